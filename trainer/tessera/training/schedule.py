"""What is trained when: epochs, edge sets, edge chunks and buckets, nested in that order.

An epoch walks the edge sets (`edge_paths`) in order; within an edge set, every bucket is cut
into the same number of contiguous chunks and the first chunks of all buckets are trained
before the second ones; within a chunk, the buckets follow `bucket_order`, drawn afresh for
each (epoch, edge set, chunk) from a seed so that a resumed run sees the same order. A
checkpoint is written after each chunk, so a run resumes at the chunk after the last one a
checkpoint records.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tessera.config.schema import BucketOrderName, ConfigSchema
from tessera.errors import BadInputError
from tessera.seeding import stable_seed
from tessera.training.bucket_order import BUCKET_ORDERS
from tessera.vocabulary import Bucket, ChunkPosition


def num_edge_chunks(config: ConfigSchema, max_bucket_edges: int) -> int:
    """`num_edge_chunks` if set, else as many chunks as the largest bucket needs to stay
    within `max_edges_per_chunk` (at least one)."""
    if config.num_edge_chunks is not None:
        return config.num_edge_chunks
    return max(1, math.ceil(max_bucket_edges / config.max_edges_per_chunk))




@dataclass(frozen=True)
class TrainingStep:
    """One bucket to train, restricted to one chunk of one edge set, in one epoch."""

    epoch_idx: int
    edge_path_idx: int
    edge_chunk_idx: int
    bucket: Bucket

    @property
    def position(self) -> ChunkPosition:
        return ChunkPosition(self.epoch_idx, self.edge_path_idx, self.edge_chunk_idx)


@dataclass(frozen=True)
class TrainingSchedule:
    """The nested iteration of a whole run, reproducible from `seed`."""

    num_epochs: int
    num_edge_paths: int
    num_edge_chunks: int
    num_lhs_partitions: int
    num_rhs_partitions: int
    bucket_order: BucketOrderName = "inside_out"
    seed: int = 0

    @classmethod
    def from_config(cls, config: ConfigSchema, num_edge_chunks: int,
                    seed: int = 0) -> TrainingSchedule:
        num_lhs_partitions, num_rhs_partitions = config.partition_grid()
        return cls(num_epochs=config.num_epochs, num_edge_paths=len(config.edge_paths),
                   num_edge_chunks=num_edge_chunks, num_lhs_partitions=num_lhs_partitions,
                   num_rhs_partitions=num_rhs_partitions, bucket_order=config.bucket_order,
                   seed=seed)

    @property
    def num_positions(self) -> int:
        """How many chunk positions (and so checkpoints) the whole run has."""
        return self.num_epochs * self.num_edge_paths * self.num_edge_chunks

    def index_of(self, position: ChunkPosition) -> int:
        """The rank of a position in the run, i.e. how many positions come before it."""
        self._check_fits(position)
        return ((position.epoch_idx * self.num_edge_paths + position.edge_path_idx)
                * self.num_edge_chunks + position.edge_chunk_idx)

    def position_at(self, index: int) -> ChunkPosition:
        """The position with `index` positions before it (e.g. the number of checkpoints)."""
        if not 0 <= index < self.num_positions:
            raise IndexError(f"position {index} out of range for {self.num_positions}")
        epoch_and_path, edge_chunk_idx = divmod(index, self.num_edge_chunks)
        epoch_idx, edge_path_idx = divmod(epoch_and_path, self.num_edge_paths)
        return ChunkPosition(epoch_idx, edge_path_idx, edge_chunk_idx)

    def position_after(self, completed: ChunkPosition) -> ChunkPosition | None:
        """Where to resume once `completed` is checkpointed; None when the run is over."""
        index = self.index_of(completed) + 1
        return self.position_at(index) if index < self.num_positions else None

    def positions(self, start: ChunkPosition | None = None) -> Iterator[ChunkPosition]:
        """Every position from `start` (the first not yet completed) to the end of the run."""
        first = 0 if start is None else self.index_of(start)
        for index in range(first, self.num_positions):
            yield self.position_at(index)

    def ends_epoch(self, position: ChunkPosition) -> bool:
        """Whether `position` is the last chunk of the last edge set of its epoch."""
        return (position.edge_path_idx == self.num_edge_paths - 1
                and position.edge_chunk_idx == self.num_edge_chunks - 1)

    def buckets(self, position: ChunkPosition) -> list[Bucket]:
        """The bucket order of one position, the same every time it is asked for."""
        return list(bucket_order(self, position))

    def steps(self, start: ChunkPosition | None = None) -> Iterator[TrainingStep]:
        """Every (epoch, edge set, chunk, bucket) from `start` on, in training order."""
        for position in self.positions(start):
            for bucket in self.buckets(position):
                yield TrainingStep(position.epoch_idx, position.edge_path_idx,
                                   position.edge_chunk_idx, bucket)

    def _check_fits(self, position: ChunkPosition) -> None:
        # The epoch may run past num_epochs (a finished run); the inner indices may not,
        # as that means the checkpoint came from a run with other edge paths or chunks.
        if not (position.epoch_idx >= 0 and 0 <= position.edge_path_idx < self.num_edge_paths
                and 0 <= position.edge_chunk_idx < self.num_edge_chunks):
            raise BadInputError(
                f"training position {position} does not fit a schedule of "
                f"{self.num_edge_paths} edge paths and {self.num_edge_chunks} edge chunks; "
                "was the checkpoint written with other edge_paths or num_edge_chunks?")


@functools.lru_cache(maxsize=8)
def bucket_order(schedule: TrainingSchedule, position: ChunkPosition) -> tuple[Bucket, ...]:
    """A position's bucket order, drawn once: a trainer asks for it at every bucket, and a GPU
    trains a bucket in milliseconds (drawing an order of 64 buckets took 0.6 ms)."""
    generator = random.Random(stable_seed(
        (schedule.seed, position.epoch_idx, position.edge_path_idx, position.edge_chunk_idx)))
    return tuple(BUCKET_ORDERS[schedule.bucket_order](
        schedule.num_lhs_partitions, schedule.num_rhs_partitions, generator))
