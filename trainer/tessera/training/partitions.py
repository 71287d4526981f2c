"""The embedding partitions in memory: loaded when a bucket needs them, swapped out when not.

A partition's newest copy is in one of four places, checked in this order: in memory; in the
checkpoint version being written (it was swapped out earlier in the same chunk); in the last
committed version; in `init_path`. If none has it, it is initialised from `init_scale`. Only
the partitions of the current bucket (plus unpartitioned types) are held, so memory follows
two partitions, not the whole graph.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from ..config import ConfigSchema
from ..storage.checkpoint import CheckpointStore
from .optimizers import row_adagrad_state
from .seeding import stable_seed

PartitionKey = tuple[str, int]  # (entity type, partition)


@dataclass
class Partition:
    """One entity type's partition: its embedding table and Adagrad accumulators, shared."""

    embeddings: torch.Tensor  # float32 [num_entities, dimension], in shared memory
    adagrad_sum: torch.Tensor  # float32 [num_entities], in shared memory


def serialize_row_state(adagrad_sum: torch.Tensor, lr: float) -> bytes:
    """The optimizer state of a partition, laid out like a torch Optimizer state dict."""
    buffer = io.BytesIO()
    torch.save(row_adagrad_state(adagrad_sum.clone(), lr), buffer)
    return buffer.getvalue()


def deserialize_row_state(blob: bytes | None, num_rows: int) -> torch.Tensor | None:
    """The accumulators from a saved state, or None if absent or of another shape."""
    if blob is None:
        return None
    state = torch.load(io.BytesIO(blob), weights_only=True)
    row_sum = state.get("state", {}).get(0, {}).get("sum")
    if isinstance(row_sum, torch.Tensor) and row_sum.shape == (num_rows,):
        return row_sum.float()
    return None


class PartitionHolder:
    """Keeps the partitions a bucket needs in memory and writes the others to the checkpoint."""

    def __init__(self, config: ConfigSchema, entity_counts: dict[str, list[int]],
                 checkpoint: CheckpointStore, init: CheckpointStore | None,
                 committed_version: int, seed: int = 0) -> None:
        self.config = config
        self.entity_counts = entity_counts
        self.checkpoint = checkpoint
        self.init = init
        self.committed_version = committed_version
        self.seed = seed
        self.in_memory: dict[PartitionKey, Partition] = {}
        self.written_to_next: set[PartitionKey] = set()

    @property
    def next_version(self) -> int:
        return self.committed_version + 1

    def all_keys(self) -> list[PartitionKey]:
        return [(name, part) for name, entity in self.config.entities.items()
                for part in range(entity.num_partitions)]

    def hold(self, keys: Iterable[PartitionKey], metadata: dict[str, object]) -> dict[
            PartitionKey, Partition]:
        """Make exactly `keys` resident (swapping the rest out) and return them."""
        wanted = set(keys)
        for key in [k for k in self.in_memory if k not in wanted]:
            self._swap_out(key, metadata)
        for key in wanted:
            if key not in self.in_memory:
                self.in_memory[key] = self._load(key)
        return {key: self.in_memory[key] for key in wanted}

    def write_all(self, metadata: dict[str, object]) -> None:
        """Put every partition into the next version (ready to commit), keeping memory as is."""
        for key, partition in self.in_memory.items():
            self._write(key, partition, metadata)
        for key in self.all_keys():
            if key not in self.in_memory and key not in self.written_to_next:
                # Never touched during this chunk: carry its newest copy over unchanged.
                self._write(key, self._load(key), metadata)

    def committed(self) -> None:
        """The next version has been committed: it is now the one to read from."""
        self.committed_version = self.next_version
        self.written_to_next.clear()

    def _swap_out(self, key: PartitionKey, metadata: dict[str, object]) -> None:
        self._write(key, self.in_memory.pop(key), metadata)

    def _write(self, key: PartitionKey, partition: Partition, metadata: dict[str, object]) -> None:
        entity, part = key
        self.checkpoint.write_embeddings(
            self.next_version, entity, part, partition.embeddings.numpy(),
            serialize_row_state(partition.adagrad_sum, self.config.lr), metadata)
        self.written_to_next.add(key)

    def _load(self, key: PartitionKey) -> Partition:
        entity, part = key
        count = self.entity_counts[entity][part]
        if key in self.written_to_next:
            source, version = self.checkpoint, self.next_version
        elif self.committed_version > 0:
            source, version = self.checkpoint, self.committed_version
        elif self.init is not None:
            source, version = self.init, None
        else:
            return self._fresh(entity, part, count)
        embeddings, blob = source.read_embeddings(
            entity, part, version, num_entities=count,
            dimension=self.config.entity_dimension(entity))
        table = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
        row_sum = deserialize_row_state(blob, count)
        return _shared(table, torch.zeros(count) if row_sum is None else row_sum)

    def _fresh(self, entity: str, part: int, count: int) -> Partition:
        type_index = list(self.config.entities).index(entity)
        generator = torch.Generator().manual_seed(stable_seed((self.seed, type_index, part)))
        dimension = self.config.entity_dimension(entity)
        table = torch.randn(count, dimension, generator=generator) * self.config.init_scale
        return _shared(table, torch.zeros(count))


def _shared(table: torch.Tensor, adagrad_sum: torch.Tensor) -> Partition:
    return Partition(embeddings=table.share_memory_(), adagrad_sum=adagrad_sum.share_memory_())
