"""From the edges of one bucket chunk to the batches each Hogwild worker trains on.

The chunk's edges lose a held-out subset (fixed across epochs) for evaluation, the rest are
shuffled and cut into one contiguous part per worker, and each worker cuts its part into
batches: contiguous ones with dynamic relations, otherwise single-relation batches whose
relation type is drawn in proportion to the edges of that type still left.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence

import torch

from tessera import kernels
from tessera.edgelist import EdgeList
from tessera.seeding import stable_seed
from tessera.vocabulary import chunk_range


def split_holdout(edges: EdgeList, eval_fraction: float,
                  seed_key: Sequence[int]) -> tuple[EdgeList, EdgeList]:
    """(train, eval) edges, eval being int(len * eval_fraction) of them.

    The subset is drawn from a seed that depends only on `seed_key` (the identity of the
    bucket chunk), so every epoch holds out the same edges and never trains on them. Both
    parts keep the stored order of the edges.
    """
    num_eval = int(len(edges) * eval_fraction)
    if num_eval == 0:
        # No copy of the bucket for nothing; the empty part is indexed, not sliced, since a
        # slice would keep the whole bucket's tensors alive as its base.
        return edges, edges[torch.empty(0, dtype=torch.long)]
    generator = torch.Generator().manual_seed(stable_seed(seed_key))
    held_out = torch.zeros(len(edges), dtype=torch.bool)
    held_out[torch.randperm(len(edges), generator=generator)[:num_eval]] = True
    return edges[(~held_out).nonzero().squeeze(1)], edges[held_out.nonzero().squeeze(1)]


def random_order(size: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random permutation of range(size), as `torch.randperm` draws it from
    `generator`; int32 where it fits: the same positions in half the memory."""
    dtype = torch.int32 if size <= torch.iinfo(torch.int32).max else torch.long
    return torch.randperm(size, generator=generator, dtype=dtype)


def permute_in_place(columns: Sequence[torch.Tensor], generator: torch.Generator) -> None:
    """Reorder equal-length columns in place by one uniformly random permutation drawn from
    `generator`. With the compiled kernels (int64, contiguous, on the host, as a bucket is
    read) the columns are swapped in place (`kernels.shuffle_columns`): no order, no copy.
    Otherwise the order is `random_order`'s (another draw for the same generator) and each
    column goes through one column-sized copy. A host-side step, outside the switch that
    turns the kernels off for the device trainers: a seed shuffles the same on every device.
    """
    if kernels.AVAILABLE and all(column.dtype == torch.long and column.is_contiguous()
                                 and column.is_cpu for column in columns):
        seed = int(torch.randint(2 ** 63 - 1, (), generator=generator))
        kernels.shuffle_columns(columns, seed)
        return
    order = random_order(len(columns[0]), generator)
    for column in columns:
        column.copy_(column.index_select(0, order))


def shuffle_edges(edges: EdgeList, generator: torch.Generator,
                  allocate: Callable[..., torch.Tensor] | None = None) -> EdgeList:
    """The same edges in a uniformly random order, in new memory. `allocate(3, n,
    dtype=torch.long)` gives where plain (not featurized) edges are copied to and shuffled as
    `shuffle_edges_in_place` would (the same order): shared memory, for worker processes, so
    that handing them over copies nothing."""
    if allocate is None or edges.lhs.is_featurized or edges.rhs.is_featurized:
        return edges[random_order(len(edges), generator)]
    rel, lhs, rhs = allocate(3, len(edges), dtype=torch.long)
    for values, column in zip((edges.rel, edges.lhs.ids, edges.rhs.ids), (rel, lhs, rhs)):
        column.copy_(values)
    if len(edges):
        low, high = torch.aminmax(edges.rel)
        permute_in_place((lhs, rhs) if low == high else (rel, lhs, rhs), generator)
    return EdgeList.from_ids(rel, lhs, rhs)


def shuffle_edges_in_place(edges: EdgeList, generator: torch.Generator) -> EdgeList:
    """`shuffle_edges` in the memory of the edges given, which the caller must own (featurized
    edges are shuffled into a copy). With one relation type the relation ids, all one value,
    become a broadcast view of it (a column read for them is let go) and only the two id
    columns are reordered: with the kernels the shuffle adds nothing to the bucket."""
    if edges.lhs.is_featurized or edges.rhs.is_featurized:
        return shuffle_edges(edges, generator)
    if len(edges) == 0:
        return edges
    rel, lhs, rhs = edges.rel, edges.lhs.ids, edges.rhs.ids
    low, high = torch.aminmax(rel)
    if low == high:
        rel = low.reshape(1).expand(len(edges))
        permute_in_place((lhs, rhs), generator)
    else:
        permute_in_place((rel, lhs, rhs), generator)
    return EdgeList.from_ids(rel, lhs, rhs)


def split_among_workers(edges: EdgeList, num_workers: int) -> list[EdgeList]:
    """`num_workers` contiguous parts whose sizes differ by at most one."""
    parts = []
    for worker_idx in range(num_workers):
        start, stop = chunk_range(len(edges), worker_idx, num_workers)
        parts.append(edges[start:stop])
    return parts


def iter_batches(edges: EdgeList, batch_size: int, dynamic_relations: bool,
                 generator: torch.Generator) -> Iterator[EdgeList]:
    """The batches one worker trains on, covering each of its edges exactly once."""
    if dynamic_relations:
        # The model handles mixed relation types, so batches are plain contiguous slices.
        for start in range(0, len(edges), batch_size):
            yield edges[start:start + batch_size]
        return
    yield from _single_relation_batches(edges, batch_size, generator)


def _single_relation_batches(edges: EdgeList, batch_size: int,
                             generator: torch.Generator) -> Iterator[EdgeList]:
    """Batches of one relation type each; the type of the next batch is drawn with
    probability proportional to its edges still left, and the batch takes the first of them.
    """
    # One stable sort groups each type's edges together without changing their order, so
    # "the first edges of a type still left" is a cursor moving through its group.
    already_grouped = bool((edges.rel[1:] >= edges.rel[:-1]).all())  # one relation type, say
    grouped = edges if already_grouped else edges[torch.argsort(edges.rel, stable=True)]
    _, counts = torch.unique_consecutive(grouped.rel, return_counts=True)
    left = counts.tolist()
    cursors = list(itertools.accumulate(left, initial=0))
    while any(left):
        group = _draw_in_proportion(left, generator)
        size = min(batch_size, left[group])
        yield grouped[cursors[group]:cursors[group] + size]
        cursors[group] += size
        left[group] -= size


def _draw_in_proportion(weights: list[int], generator: torch.Generator) -> int:
    """An index drawn with probability proportional to its weight; in plain Python, since
    this runs once per batch and torch.multinomial costs a noticeable share of one."""
    if len(weights) == 1:  # one relation type: nothing to draw
        return 0
    point = float(torch.rand((), generator=generator, dtype=torch.float64)) * sum(weights)
    return bisect.bisect_right(list(itertools.accumulate(weights)), point)
