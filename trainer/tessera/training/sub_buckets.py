"""How several devices share one bucket: sub-buckets of row ranges, in conflict-free rounds.

As in PyTorch-BigGraph's GPU training, the rows of each partition of the bucket are cut
into contiguous ranges, a sub-bucket (i, j) holds the edges whose left entity is in range i
and right entity in range j, and the sub-buckets are trained in rounds in which no two
devices touch the same rows (a device's uniform negatives are drawn from its own ranges).

- The two sides use different tables (the usual off-diagonal bucket): G ranges a side, and
  in round k device g trains (g, (g + k) mod G); G rounds, every device busy in each.
- A table is on both sides (a diagonal bucket of one entity type): device g's left range
  and device h's right range may then be the same rows. The rows are cut into 2G ranges
  instead, and each round pairs them into G disjoint pairs {i, j} (the circle method of a
  round-robin tournament); the device given {i, j} trains (i, j) and (j, i), and in the
  first round also (i, i) and (j, j). 2G - 1 rounds, every device busy in each.
"""

from __future__ import annotations

SubBucket = tuple[int, int]  # (left range, right range)
Round = list[list[SubBucket]]  # per device, the sub-buckets it trains one after the other


def num_ranges(num_devices: int, shared_table: bool) -> int:
    return 2 * num_devices if shared_table else num_devices


def sub_bucket_rounds(num_devices: int, shared_table: bool) -> list[Round]:
    """Rounds covering every sub-bucket once, no two devices of a round sharing a range of
    one table (see the module's docstring)."""
    if not shared_table:
        return [[[(g, (g + k) % num_devices)] for g in range(num_devices)]
                for k in range(num_devices)]
    players = 2 * num_devices
    rounds = []
    for r in range(players - 1):
        pairs = [(r, players - 1)] + [((r + k) % (players - 1), (r - k) % (players - 1))
                                      for k in range(1, num_devices)]
        rounds.append([[(i, j), (j, i)] + ([(i, i), (j, j)] if r == 0 else [])
                       for i, j in pairs])
    return rounds


def rows_touched(sub_buckets: list[SubBucket], shared_table: bool) -> set[tuple[str, int]]:
    """The (table, range) pairs a device's sub-buckets read and write; with one shared
    table both sides name the same table."""
    return {(side, index) for lhs, rhs in sub_buckets
            for side, index in (("lhs" if not shared_table else "table", lhs),
                                ("rhs" if not shared_table else "table", rhs))}
