"""A bucket: the edges whose left side lies in one partition and right side in another."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Bucket:
    """The pair (lhs partition, rhs partition) that names a bucket of edges (0-based)."""

    lhs: int
    rhs: int

    def transposed(self) -> Bucket:
        return Bucket(self.rhs, self.lhs)

    def __str__(self) -> str:
        return f"({self.lhs}, {self.rhs})"


def all_buckets(num_lhs_partitions: int, num_rhs_partitions: int) -> list[Bucket]:
    """Every bucket of the grid, in lexicographic order."""
    return [Bucket(lhs, rhs) for lhs in range(num_lhs_partitions)
            for rhs in range(num_rhs_partitions)]
