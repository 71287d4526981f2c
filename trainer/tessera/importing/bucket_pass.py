"""The second pass: read the spilled ids back, place every edge, append it to its bucket.

Per block, ids become (partition, offset) pairs by array lookup, edges of dropped entities or
relation types are left out, sides whose entity type is unpartitioned are spread over the grid
by a hash of the edge, and the block is split by bucket and appended to the open bucket
writers. At most `MAX_OPEN_BUCKETS` writers are open at once (each buffers a little and holds
a file): larger grids are written in rounds of left-hand partitions, each reading the spill
again.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..progress import Task
from .bucketing import BucketSlice, PlacedEdges, split_by_bucket
from .fingerprint import combine
from .layout import OFFSET_MASK, PLACE_SHIFT, Layout
from .plan import ImportPlan
from .publication import Publication
from .read_ahead import read_ahead
from .spill import EdgeIds, EdgeIdSpill
from .writer import BucketWriters

MAX_OPEN_BUCKETS = 128
# Edges placed at a time: the second pass makes several arrays per edge, and its blocks need
# not be as large as the first pass's, whose cost per block grows with the dictionary.
BLOCK_EDGES = 2**18


def write_buckets(plan: ImportPlan, input_index: int, spill: EdgeIdSpill, layout: Layout,
                  publication: Publication, task: Task) -> int:
    """Stage every bucket of one input's edge directory; returns the edges written."""
    edge_dir = plan.inputs[input_index].edge_dir
    num_lhs, num_rhs = plan.grid
    written = 0
    for first, stop in lhs_rounds(num_lhs, num_rhs):
        buckets = [(lhs, rhs) for lhs in range(first, stop) for rhs in range(num_rhs)]
        with BucketWriters(edge_dir, buckets, publication) as writers:
            # Placing and sorting the next block (NumPy, mostly without the GIL) overlaps
            # with appending this one to the HDF5 files.
            for block_edges, pieces in read_ahead(_placed_blocks(plan, input_index, spill,
                                                                 layout, first, stop)):
                for piece in pieces:
                    writers.append(piece)
                task.advance(block_edges)
            written += writers.num_edges
    return written


def _placed_blocks(plan: ImportPlan, input_index: int, spill: EdgeIdSpill, layout: Layout,
                   first: int, stop: int) -> Iterator[tuple[int, list[BucketSlice]]]:
    """Each spilled block's edges of lhs partitions [first, stop), split by bucket (with the
    block's size, for progress)."""
    num_lhs, num_rhs = plan.grid
    for ids in spill.blocks(input_index, min(BLOCK_EDGES, plan.options.block_edges)):
        edges = place_edges(plan, layout, ids)
        if (first, stop) != (0, num_lhs):
            edges = edges.select(np.flatnonzero((edges.lhs_part >= first)
                                                & (edges.lhs_part < stop)))
        yield len(ids), list(split_by_bucket(edges, num_rhs, num_lhs * num_rhs))


def lhs_rounds(num_lhs: int, num_rhs: int) -> Iterator[tuple[int, int]]:
    """Ranges [first, stop) of left-hand partitions whose buckets can be open together."""
    per_round = max(1, MAX_OPEN_BUCKETS // num_rhs)
    for first in range(0, num_lhs, per_round):
        yield first, min(first + per_round, num_lhs)


def num_rounds(num_lhs: int, num_rhs: int) -> int:
    return len(list(lhs_rounds(num_lhs, num_rhs)))


def place_edges(plan: ImportPlan, layout: Layout, ids: EdgeIds) -> PlacedEdges:
    """Partitions and offsets of a block's edges, without those that were dropped.

    A side whose entity type is unpartitioned (on a partitioned side of the grid) goes to the
    bucket column, or row, chosen by a hash of the edge's two names: edges spread evenly over
    the grid, and the same edge lands in the same bucket in every import.
    """
    rel = ids.rel if layout.relation_ids is None else layout.relation_ids[ids.rel]
    lhs, rhs = layout.entity_places[ids.lhs], layout.entity_places[ids.rhs]
    kept = (lhs >= 0) & (rhs >= 0) & (rel >= 0)
    if not kept.all():
        rows = np.flatnonzero(kept)
        ids = EdgeIds(ids.rel[rows], ids.lhs[rows], ids.rhs[rows])
        rel, lhs, rhs = rel[rows], lhs[rows], rhs[rows]
    edges = PlacedEdges(rel, lhs >> PLACE_SHIFT, lhs & OFFSET_MASK,
                        rhs >> PLACE_SHIFT, rhs & OFFSET_MASK)
    for side, parts, grid_parts in (("lhs", edges.lhs_part, plan.grid[0]),
                                    ("rhs", edges.rhs_part, plan.grid[1])):
        spread = plan.spread_sides(side)
        if not spread.any():
            continue
        # The template relation (index 0) decides for all dynamic relation types.
        rows = (np.arange(len(edges)) if plan.dynamic_relations
                else np.flatnonzero(spread[edges.rel]))
        pair_hashes = combine(layout.entity_hashes[ids.lhs[rows]],
                              layout.entity_hashes[ids.rhs[rows]])
        parts[rows] = (pair_hashes % np.uint64(grid_parts)).astype(np.int64)
    return edges
