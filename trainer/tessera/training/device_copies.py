"""A bucket's partitions copied between host memory and the device it trains on.

On a GPU the copies to the device run on a side stream, from page-locked (pinned) staging
memory, so they proceed while the host reads and shuffles the bucket's edges; the compute
stream waits for them (`wait_stream`) only before the first batch, and the copies' memory is
marked as used by it (`record_stream`), so that the allocator never hands it out while a
kernel still reads it. The copies back run on the compute stream after the last batch: a
partition must be complete on the host before it is swapped out or checkpointed. On the CPU
the same calls make plain copies (the tests' device). A partition the holder keeps in the
device's memory already (`partitions.holder_device`) is neither copied there nor back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from .partitions import Partition

Key = TypeVar("Key", bound=Hashable)  # what names a partition or a range of one


@dataclass(frozen=True)
class DevicePartitions(Generic[Key]):
    """Partitions on their way to a device; `ready` says when the compute stream may use them."""

    partitions: dict[Key, Partition]
    stream: torch.cuda.Stream | None  # the side stream they were copied on (None: CPU)

    def ready(self) -> dict[Key, Partition]:
        """The partitions, once the current stream has been told to wait for their copies."""
        if self.stream is not None:
            current = torch.cuda.current_stream(self.stream.device)
            current.wait_stream(self.stream)
            for partition in {id(p): p for p in self.partitions.values()}.values():
                partition.embeddings.record_stream(current)
                partition.adagrad_sum.record_stream(current)
        return self.partitions


class PartitionCopier:
    """Copies partitions to `device` (embeddings as `dtype`) and back; with `in_place`, the
    partitions are held in the device's memory and trained there, with no copy."""

    def __init__(self, device: torch.device, dtype: torch.dtype, in_place: bool = False) -> None:
        self.device = device
        self.dtype = dtype
        self.in_place = in_place
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def to_device(self, partitions: Mapping[Key, Partition]) -> DevicePartitions[Key]:
        """Start copying `partitions` to the device; returns before the copies end on a GPU.
        A partition named by two keys is copied once: both keys name the one copy."""
        if self.stream is not None:
            # The side stream must not start before what the compute stream queued so far
            # (the previous bucket's copies back, from the memory these copies may reuse).
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        copies: dict[int, Partition] = {}
        with torch.cuda.stream(self.stream) if self.stream is not None \
                else contextlib.nullcontext():
            for partition in partitions.values():
                if id(partition) not in copies:
                    copies[id(partition)] = self._copy(partition)
        return DevicePartitions({key: copies[id(p)] for key, p in partitions.items()},
                                self.stream)

    def _copy(self, partition: Partition) -> Partition:
        if self.holds(partition):  # held in the device's memory already: trained in place
            return partition
        if self.stream is None:
            return Partition(partition.embeddings.to(self.dtype, copy=True),
                             partition.adagrad_sum.clone())
        return Partition(self._upload(partition.embeddings).to(self.dtype),
                         self._upload(partition.adagrad_sum))

    def _upload(self, host: torch.Tensor) -> torch.Tensor:
        # Shared host memory is pageable: staged through pinned memory, whose block the
        # caching host allocator keeps until the asynchronous copy has read it. Partitions
        # held for a GPU are pinned already (see `partition_in_pinned_memory`).
        staged = host if host.is_pinned() else host.pin_memory()
        return staged.to(self.device, non_blocking=True)

    def holds(self, partition: Partition) -> bool:
        """Whether `partition` is held in the device's memory, as `dtype`: no copy to make."""
        return self.in_place and partition.embeddings.device == self.device \
            and partition.embeddings.dtype == self.dtype

    @staticmethod
    def to_host(on_device: Mapping[Key, Partition], host: Mapping[Key, Partition]) -> None:
        """Write the trained partitions back into the host's tensors, in place (in float32);
        those trained in place are there already."""
        for key, partition in on_device.items():
            if partition is host[key]:
                continue
            host[key].embeddings.copy_(partition.embeddings)
            host[key].adagrad_sum.copy_(partition.adagrad_sum)
