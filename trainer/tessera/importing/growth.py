"""Where the new entities of an import that extends a dictionary go: after the known ones.

Known entities keep their partition and offset; new ones are appended to the partitions:

- hash: a new name's partition is its hash modulo `num_partitions`, as in a fresh hash
  import, and new names are appended in hash order;
- random: new names, shuffled with the seed, fill the smallest partitions first, so that
  partition sizes end as even as the known entities allow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .partitioning import Placement, place_entities


def grown_placement(known_counts: Sequence[int], new_hashes: np.ndarray, method: str,
                    seed: int | Sequence[int]) -> Placement:
    """Known entities (indices 0..k-1, by partition and offset) then new ones (k.., with
    these stable hashes), laid out in partitions."""
    old = np.asarray(known_counts, dtype=np.int64)
    known_parts = np.repeat(np.arange(len(old)), old)
    known_offsets = np.arange(len(known_parts)) - np.repeat(np.cumsum(old) - old, old)
    new_parts, new_offsets = place_new_entities(old, new_hashes, method, seed)
    parts = np.concatenate([known_parts, new_parts])
    order = np.lexsort((np.concatenate([known_offsets, new_offsets]), parts))
    counts = np.bincount(parts, minlength=len(old))
    return Placement(order, np.concatenate([[0], np.cumsum(counts)]))


def place_new_entities(known_counts: np.ndarray, new_hashes: np.ndarray, method: str,
                       seed: int | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The partition and the offset of each new entity (see the module docstring)."""
    num_partitions = len(known_counts)
    if method == "hash":  # placed as a fresh import places them, then moved past the known
        parts, ranks = place_entities(new_hashes, num_partitions, "hash").partitions_and_offsets()
        return parts, known_counts[parts] + ranks
    # The fresh import's seeded shuffle, cut into runs that fill the smallest partitions.
    shuffled = place_entities(new_hashes, 1, method, seed).order
    additions = fill_smallest_first(known_counts, len(new_hashes))
    parts = np.empty(len(new_hashes), dtype=np.int64)
    parts[shuffled] = np.repeat(np.arange(num_partitions), additions)
    offsets = np.empty(len(new_hashes), dtype=np.int64)
    starts = np.cumsum(additions) - additions  # where each partition's run begins
    offsets[shuffled] = (np.arange(len(shuffled)) - np.repeat(starts, additions)
                         + np.repeat(known_counts, additions))
    return parts, offsets


def fill_smallest_first(counts: np.ndarray, new: int) -> np.ndarray:
    """How many of `new` entities each partition gets so that the smallest partitions are
    filled first (ties: lower partitions first)."""
    if new == 0:
        return np.zeros(len(counts), dtype=np.int64)
    # The level: the smallest size to which filling every partition takes them all.
    low, high = int(counts.min()), int(counts.max()) + new
    while low < high:
        middle = (low + high) // 2
        if np.maximum(middle - counts, 0).sum() >= new:
            high = middle
        else:
            low = middle + 1
    additions = np.maximum(low - 1 - counts, 0)
    rest = new - int(additions.sum())
    additions[np.flatnonzero(counts <= low - 1)[:rest]] += 1
    return additions
