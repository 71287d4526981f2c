"""The embedding partitions in memory: loaded when a bucket needs them, swapped out when not.

A partition's newest copy is in one of four places, checked in this order: in memory; in the
checkpoint version being written (it was swapped out earlier in the same chunk); in the last
committed version; in `init_path` (whose partitions may be smaller: trained before the graph
grew, they start the first rows, see `init_growth`). If none has it, it is initialised from
`init_scale`. Only
the partitions of the current bucket (plus unpartitioned types) are held, so memory follows
two partitions, not the whole graph.

Swaps are hidden behind training where they can be. With look-ahead (on unless
`TESSERA_PREFETCH=0`), while a bucket trains a background thread reads the partitions the next
bucket needs and the current one does not hold, through the same rule as a load: memory then
follows the current bucket's partitions plus the next one's new ones, four per entity type at
most. Reading never changes a file, so a killed trainer leaves its checkpoints as they were.
With `background_io`, a partition swapped out is written by a background thread while the
next bucket trains (one write at a time: one partition more). So is a checkpoint taken while
every partition is in memory (one partition per entity type, or all of them cached): a copy
of the partitions is written as version N while the next chunk trains into version N + 1
(one version pending at a time: one copy of the model more); it counts once committed.

With `partition_cache_gb`, a partition swapped out stays in memory, unwritten, while the cache
has room; the least recently used one is written out to make room, and the chunk's checkpoint
writes the rest. A cached partition is the newest copy, so a bucket that wants it takes it
back without a read. Nothing committed changes: a killed trainer loses what it would have
lost anyway, the chunk in progress.

On one GPU whose memory holds the model well (`holder_device`), that memory is the holder's
and keeps every partition (as an unbounded cache), all read ahead from the first look-ahead
on: they live there, trained in place with no copy per bucket, and leave it only to be
written at checkpoints (by the thread that writes them). Those copies run on side streams,
after the kernels queued before them, beside training.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

from ..config import ConfigSchema
from ..model.model_io import load_optimizer_state
from ..model.weight_averaging import fold_embeddings, window_of
from ..seeding import stable_seed
from ..storage.checkpoint import CheckpointStore, embeddings_file
from ..vocabulary import PartitionKey
from .hogwild import empty_for_workers, share_with_workers
from .init_growth import check_grown_partition
from .optimizers import row_adagrad_state


@dataclass
class Partition:
    """One entity type's partition: its embedding table and Adagrad accumulators (in shared
    memory while a trainer holds them, so that its Hogwild workers update them in place)."""

    embeddings: torch.Tensor  # float32 [num_entities, dimension]
    adagrad_sum: torch.Tensor  # float32 [num_entities]


def save_row_state(adagrad_sum: torch.Tensor, lr: float) -> Callable[[BinaryIO], None]:
    """What saves a partition's optimizer state (laid out like a torch Optimizer state dict)
    into a checkpoint file: the file receives the sums' own bytes, with no copy of them in
    memory (a partition's sums are megabytes, written while both of a bucket's partitions
    are held)."""
    owns_storage = (adagrad_sum.storage_offset() == 0 and adagrad_sum.is_contiguous()
                    and adagrad_sum.untyped_storage().nbytes() == adagrad_sum.nbytes)
    # torch.save writes a tensor's whole storage: a view is saved from a copy of itself.
    row_sum = adagrad_sum if owns_storage else adagrad_sum.clone()
    return functools.partial(torch.save, row_adagrad_state(row_sum, lr))


def load_row_state(file: BinaryIO, num_rows: int, url: str) -> torch.Tensor | None:
    """The accumulators from a saved state (`url` names its file), or None if of another
    shape."""
    state = load_optimizer_state(file, url)
    row_sum = state.get("state", {}).get(0, {}).get("sum")
    if isinstance(row_sum, torch.Tensor) and row_sum.shape == (num_rows,):
        return row_sum.float()
    return None


def all_partition_keys(config: ConfigSchema) -> list[PartitionKey]:
    """Every (entity type, partition) of a config, in config order."""
    return [(name, part) for name, entity in config.entities.items()
            for part in range(entity.num_partitions)]


class PartitionLoader:
    """Reads a partition from a checkpoint version, or from `init_path`, or initialises it.

    Every place that needs a partition it does not have (the single-machine holder, a
    partition server, a trainer swapping through storage) goes through this one rule, so a
    partition starts from the same values whichever process first needs it.
    """

    def __init__(self, config: ConfigSchema, entity_counts: dict[str, list[int]],
                 checkpoint: CheckpointStore, init: CheckpointStore | None) -> None:
        self.config = config
        self.entity_counts = entity_counts
        self.checkpoint = checkpoint
        self.init = init

    def load(self, key: PartitionKey, version: int) -> Partition:
        """The partition as checkpoint `version` holds it; with version 0 (nothing committed)
        as `init_path` holds it, or freshly initialised from `init_scale`."""
        entity, part = key
        count = self.entity_counts[entity][part]
        if version > 0:
            source, source_version = self.checkpoint, version
        elif self.init is not None:
            source, source_version = self.init, self.init.current_version()
            rows = source.embeddings_rows(entity, part, source_version)
            if rows != count:
                return self._grown(key, source_version, rows, count)
        else:
            return self._fresh(entity, part, count)
        table = empty_for_workers(self.config, count, self.config.entity_dimension(entity))
        url = source.directory.url_of(embeddings_file(entity, part, source_version))
        _, row_sum = source.read_embeddings(
            entity, part, source_version, num_entities=count, dimension=table.shape[1],
            out=table.numpy(), read_state=lambda file: load_row_state(file, count, url))
        return Partition(table, torch.zeros(count) if row_sum is None else row_sum)

    def write(self, key: PartitionKey, partition: Partition, version: int,
              metadata: Mapping[str, Any]) -> None:
        """Write the partition (with its optimizer state) into checkpoint `version`; one
        held on a device is copied to the host first (as saved, it must load anywhere)."""
        entity, part = key
        host = torch.device("cpu")
        partition = Partition(copied(partition.embeddings, host),
                              copied(partition.adagrad_sum, host))
        values = partition.embeddings.numpy()
        window = window_of(self.config, metadata)
        averaged = None if window is None \
            else fold_embeddings(self.checkpoint, window, version, entity, part, values)
        self.checkpoint.write_embeddings(
            version, entity, part, values, save_row_state(partition.adagrad_sum, self.config.lr),
            metadata, averaged)

    def _grown(self, key: PartitionKey, version: int, rows: int, count: int) -> Partition:
        """A partition whose first `rows` rows (and their optimizer state) start from
        `init_path`, and the others as in a fresh run."""
        assert self.init is not None
        entity, part = key
        url = self.init.directory.url_of(embeddings_file(entity, part, version))
        check_grown_partition(self.config, self.init, entity, part, rows, count, url)
        partition = self._fresh(entity, part, count)
        known = partition.embeddings[:rows]
        _, row_sum = self.init.read_embeddings(
            entity, part, version, num_entities=rows, dimension=known.shape[1],
            out=known.numpy(), read_state=lambda file: load_row_state(file, rows, url))
        if row_sum is not None:
            partition.adagrad_sum[:rows] = row_sum
        return partition

    def _fresh(self, entity: str, part: int, count: int) -> Partition:
        type_index = list(self.config.entities).index(entity)
        generator = torch.Generator().manual_seed(stable_seed((self.config.seed, type_index, part)))
        dimension = self.config.entity_dimension(entity)
        # Filled with the values torch.randn would draw.
        table = empty_for_workers(self.config, count, dimension)
        table.normal_(generator=generator).mul_(self.config.init_scale)
        return Partition(table, torch.zeros(count))


def look_ahead_enabled() -> bool:
    """Whether partitions are read ahead for the next bucket (`TESSERA_PREFETCH=0`: not)."""
    return os.environ.get("TESSERA_PREFETCH", "1") != "0"


class PartitionHolder:
    """Keeps the partitions a bucket needs in memory and writes the others to the checkpoint;
    with `look_ahead`, reads the next bucket's partitions while the current one trains."""

    def __init__(self, config: ConfigSchema, entity_counts: dict[str, list[int]],
                 checkpoint: CheckpointStore, init: CheckpointStore | None,
                 committed_version: int, look_ahead: bool = True,
                 pinned: bool = False, device: torch.device | None = None) -> None:
        self.config = config
        self.loader = PartitionLoader(config, entity_counts, checkpoint, init)
        self.committed_version = committed_version
        self.in_memory: dict[PartitionKey, Partition] = {}
        self.written_to_next: set[PartitionKey] = set()
        # Swapped out but kept (partition_cache_gb), least recently used first; those in
        # `cached_clean` are as the checkpoint last written holds them.
        self.cached: OrderedDict[PartitionKey, Partition] = OrderedDict()
        self.cached_clean: set[PartitionKey] = set()
        # In the memory of a device that holds the whole model (`holder_device`), every
        # partition is read ahead and kept until the checkpoint: no swap is written.
        self.keeps_all = device is not None
        self.cache_bytes = sys.maxsize if self.keeps_all \
            else int(config.partition_cache_gb * 1e9)
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="tessera-partition-writer") \
            if config.io_in_background() else None
        # Partitions being written in the background, kept until their write has finished.
        self.writing: dict[PartitionKey, tuple[Future[None], Partition]] = {}
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="tessera-partition-reader") \
            if look_ahead else None
        # The next bucket's partitions, being read (or read) in the background.
        self.prefetched: dict[PartitionKey, Future[Partition]] = {}
        # Held partitions: shared with Hogwild workers, pinned for a GPU to copy from, or
        # in the memory of the device that trains them.
        self.resident: Callable[[Partition], Partition] = \
            functools.partial(partition_on_device, device=device) if device is not None \
            else partition_in_pinned_memory if pinned \
            else functools.partial(partition_for_workers, config=config)
        # The version being written and committed in the background, and its write.
        self.pending: tuple[Future[None], int] | None = None

    @property
    def next_version(self) -> int:
        return (self.pending[1] if self.pending else self.committed_version) + 1

    def all_keys(self) -> list[PartitionKey]:
        return all_partition_keys(self.config)

    def hold(self, keys: Iterable[PartitionKey], metadata: Mapping[str, Any]) -> dict[
            PartitionKey, Partition]:
        """Make exactly `keys` resident (swapping the rest out) and return them."""
        wanted = set(keys)
        for key in [k for k in self.in_memory if k not in wanted]:
            self._swap_out(key, metadata)
        if not self.keeps_all:  # one that keeps every partition keeps those read ahead too
            for key in [k for k in self.prefetched if k not in wanted]:
                self.prefetched.pop(key).result()  # read for nothing: the order changed
        for key in wanted:
            if key not in self.in_memory:
                self.in_memory[key] = self._take(key)
        return {key: self.in_memory[key] for key in wanted}

    def prefetch(self, keys: Iterable[PartitionKey]) -> None:
        """Start reading those of `keys` not in memory in the background, for the next `hold`.

        Where each is read from is decided now: until that `hold`, only partitions in memory
        are written, so the file chosen keeps the newest copy while it is read. A holder that
        keeps every partition reads them all ahead, `keys` first (the first epoch would
        otherwise wait for each new partition's read, or its draw from `init_scale`)."""
        if self.reader is None:
            return
        ahead = sorted(set(keys))
        for key in dict.fromkeys([*ahead, *self.all_keys()] if self.keeps_all else ahead):
            if key in self.in_memory or key in self.prefetched or key in self.writing \
                    or key in self.cached:
                continue  # held, asked for already, or still in memory
            self.prefetched[key] = self.reader.submit(self._read_for_workers, key,
                                                      self._newest_version(key))

    def write_all(self, metadata: Mapping[str, Any]) -> None:
        """Put every partition into the next version (ready to commit), keeping memory as is."""
        self._finish_writes()
        for key, partition in self.in_memory.items():
            self._write(key, partition, metadata)
        for key, partition in self.cached.items():  # every version holds every partition
            self._write(key, partition, metadata)
        self.cached_clean = set(self.cached)
        for key in self.all_keys():
            if key not in self.in_memory and key not in self.written_to_next:
                # Never touched during this chunk: carry its newest copy over unchanged (a
                # read-ahead copy is that copy, and stays valid once the version commits).
                partition = self.prefetched[key].result() if key in self.prefetched \
                    else self._load(key)
                self._write(key, partition, metadata)
        for future in self.prefetched.values():
            future.result()  # no read may run while the commit deletes older versions

    def committed(self) -> None:
        """The next version has been committed: it is now the one to read from."""
        self.committed_version = self.next_version
        self.written_to_next.clear()

    def snapshot(self) -> dict[PartitionKey, Partition] | None:
        """Copies of every partition, to be written as the next version while training goes
        on (None: some partition is only in files, so the version is written in the
        foreground). The version is then `pending` until `settle`."""
        keys = self.all_keys()
        if any(key not in self.in_memory and key not in self.cached for key in keys):
            return None
        self._finish_writes()
        self.cached_clean = set(self.cached)  # as the pending version holds them
        self.written_to_next.clear()  # the next version starts now
        return {key: Partition(partition.embeddings.clone(), partition.adagrad_sum.clone())
                for key, partition in (*self.in_memory.items(), *self.cached.items())}

    def settle(self) -> None:
        """Wait for the pending version, if any: committed (or its error raised) after this."""
        if self.pending is None:
            return
        (future, version), self.pending = self.pending, None
        future.result()
        self.committed_version = version

    def _swap_out(self, key: PartitionKey, metadata: Mapping[str, Any]) -> None:
        partition = self.in_memory.pop(key)
        if self.cache_bytes and partition_bytes(partition) <= self.cache_bytes:
            self.cached[key] = partition
            while sum(map(partition_bytes, self.cached.values())) > self.cache_bytes:
                self._evict(*self.cached.popitem(last=False), metadata)
            return
        self._write_out(key, partition, metadata)

    def _evict(self, key: PartitionKey, partition: Partition,
               metadata: Mapping[str, Any]) -> None:
        """Let a cached partition go, writing it first unless the checkpoint has it."""
        if key in self.cached_clean:
            self.cached_clean.discard(key)
        else:
            self._write_out(key, partition, metadata)

    def _write_out(self, key: PartitionKey, partition: Partition,
                   metadata: Mapping[str, Any]) -> None:
        if self.writer is None:
            self._write(key, partition, metadata)
            return
        self._finish_writes()
        future = self.writer.submit(self.loader.write, key, partition, self.next_version,
                                    dict(metadata))
        self.writing[key] = (future, partition)
        self.written_to_next.add(key)

    def _finish_writes(self) -> None:
        """Wait for the background writes (raising their errors)."""
        writing, self.writing = self.writing, {}
        for future, _ in writing.values():
            future.result()

    def _write(self, key: PartitionKey, partition: Partition, metadata: Mapping[str, Any]) -> None:
        self.loader.write(key, partition, self.next_version, metadata)
        self.written_to_next.add(key)

    def _take(self, key: PartitionKey) -> Partition:
        """The partition for a bucket: cached, read ahead, or read now."""
        if key in self.cached:
            self.cached_clean.discard(key)  # it will be trained
            return self.cached.pop(key)
        if key in self.prefetched:
            return self.prefetched.pop(key).result()
        return self.resident(self._load(key))

    def _load(self, key: PartitionKey) -> Partition:
        if key in self.writing:  # wanted again before its write ended: still in memory
            future, partition = self.writing.pop(key)
            future.result()
            return partition
        return self.loader.load(key, self._newest_version(key))

    def _newest_version(self, key: PartitionKey) -> int:
        # Swapped out earlier in this chunk: the version being written has the newest copy.
        if key in self.written_to_next:
            return self.next_version
        self.settle()  # a pending version is the newest once committed
        return self.committed_version

    def _read_for_workers(self, key: PartitionKey, version: int) -> Partition:
        return self.resident(self.loader.load(key, version))


def partition_bytes(partition: Partition) -> int:
    return partition.embeddings.nbytes + partition.adagrad_sum.nbytes


def partition_for_workers(partition: Partition, config: ConfigSchema) -> Partition:
    """The partition as tensors where `config`'s Hogwild workers can update it in place
    (arrays received from a partition server become tensors first)."""
    return Partition(
        embeddings=share_with_workers(torch.as_tensor(partition.embeddings), config),
        adagrad_sum=share_with_workers(torch.as_tensor(partition.adagrad_sum), config))


def partition_on_device(partition: Partition, device: torch.device) -> Partition:
    """The partition copied into `device`'s memory, complete when returned (a reader thread
    hands it over as it is)."""
    return Partition(*(copied(torch.as_tensor(tensor), device)
                       for tensor in (partition.embeddings, partition.adagrad_sum)))


def copied(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`, in a new copy or itself if there already. Between a GPU and the
    host the copy runs on a side stream, after the work queued on the device's stream so far
    (the training that wrote it), so that training goes on beside it; it has ended when this
    returns."""
    gpu = device if device.type == "cuda" else tensor.device
    if tensor.device == device or gpu.type != "cuda":
        return tensor.to(device)
    side = torch.cuda.Stream(gpu)
    side.wait_stream(torch.cuda.current_stream(gpu))
    with torch.cuda.stream(side):
        result = tensor.to(device, non_blocking=True)
    side.synchronize()
    return result


def partition_in_pinned_memory(partition: Partition) -> Partition:
    """The partition in page-locked memory, which a GPU copies from without staging it first
    (a trainer on a GPU has no Hogwild workers to share it with). Read ahead, the staging
    copy is made by the reader thread, off the path of training."""
    return Partition(embeddings=torch.as_tensor(partition.embeddings).pin_memory(),
                     adagrad_sum=torch.as_tensor(partition.adagrad_sum).pin_memory())
