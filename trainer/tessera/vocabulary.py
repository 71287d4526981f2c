"""The names every role of a run shares: the roles themselves, and where edges and
embeddings are (partitions, buckets and chunks).

The lock server, the trainers, the storage layer and the operator all speak of these, so they
live here, free of torch, and a process that only hands out buckets (or only manages pods)
does not load the training stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Role(str, Enum):
    """What a process of a run does; the value names it (`trainer-0`), and the operator uses
    it as its pod's `tessera.dev/role` label and in the pod's name."""

    TRAINER = "trainer"
    LOCK_SERVER = "lock-server"
    PARTITION_SERVER = "partition-server"


def process_name(role: Role, role_rank: int = 0) -> str:
    """How the processes of a run name each other (`lock-server`, `trainer-0`); a pod's name
    is its job's name, a dash and this."""
    return role.value if role is Role.LOCK_SERVER else f"{role.value}-{role_rank}"


PartitionKey = tuple[str, int]  # (entity type, partition)


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


@dataclass(frozen=True, order=True)
class ChunkPosition:
    """One chunk of one edge set of one epoch: the unit after which a checkpoint is written."""

    epoch_idx: int
    edge_path_idx: int
    edge_chunk_idx: int


def chunk_range(num_edges: int, chunk_idx: int, num_chunks: int) -> tuple[int, int]:
    """The [start, stop) edges of a chunk: contiguous, sizes differing by at most one (larger
    ones first), and together covering every edge exactly once."""
    if not 0 <= chunk_idx < num_chunks:
        raise IndexError(f"chunk {chunk_idx} out of range for {num_chunks} chunks")
    size, num_larger = divmod(num_edges, num_chunks)
    start = chunk_idx * size + min(chunk_idx, num_larger)
    return start, start + size + (1 if chunk_idx < num_larger else 0)
