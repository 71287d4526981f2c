"""Grouping a block of edges by bucket (lhs partition, rhs partition) with one stable sort.

The sort key is the bucket number in the smallest integer type that holds it, so that NumPy's
stable sort is a radix sort for up to 65,536 buckets; edges keep their input order within a
bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PlacedEdges:
    """Edges whose sides have been given partitions and offsets (int64 arrays)."""

    rel: np.ndarray
    lhs_part: np.ndarray
    lhs_offset: np.ndarray
    rhs_part: np.ndarray
    rhs_offset: np.ndarray

    def __len__(self) -> int:
        return len(self.rel)

    def select(self, rows: np.ndarray) -> PlacedEdges:
        return PlacedEdges(self.rel[rows], self.lhs_part[rows], self.lhs_offset[rows],
                           self.rhs_part[rows], self.rhs_offset[rows])


@dataclass(frozen=True)
class BucketSlice:
    """The edges of one block that fall in bucket (lhs_part, rhs_part)."""

    lhs_part: int
    rhs_part: int
    rel: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray


def split_by_bucket(edges: PlacedEdges, num_rhs_parts: int,
                    num_buckets: int) -> Iterator[BucketSlice]:
    """The edges of each non-empty bucket, in bucket order."""
    if num_buckets == 1:
        if len(edges):
            yield BucketSlice(0, 0, edges.rel, edges.lhs_offset, edges.rhs_offset)
        return
    buckets = edges.lhs_part * num_rhs_parts + edges.rhs_part
    key_type = np.uint8 if num_buckets <= 2**8 else np.uint16 if num_buckets <= 2**16 else None
    order = np.argsort(buckets.astype(key_type) if key_type else buckets, kind="stable")
    counts = np.bincount(buckets, minlength=num_buckets)
    ends = np.cumsum(counts)
    rel, lhs, rhs = edges.rel[order], edges.lhs_offset[order], edges.rhs_offset[order]
    for bucket in np.flatnonzero(counts).tolist():
        start, end = int(ends[bucket] - counts[bucket]), int(ends[bucket])
        yield BucketSlice(bucket // num_rhs_parts, bucket % num_rhs_parts,
                          rel[start:end], lhs[start:end], rhs[start:end])
