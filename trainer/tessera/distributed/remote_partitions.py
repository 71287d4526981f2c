"""A distributed trainer's partitions: fetched when a bucket needs them, given back after.

`RemotePartitions` is the trainer's `PartitionSource`. It keeps only the partitions of its
current bucket; a partition it no longer needs goes back to where the others can fetch it,
and only then is its lock released. Where "back" is depends on the job:

- `ServerPartitions`: the partition servers' memory (num_partition_servers > 0);
- `StoragePartitions`: the checkpoint version being written, as one machine swaps
  (num_partition_servers = 0); the lock server remembers which partitions were written there
  during the current chunk position, so the next trainer reads the newest copy.

Both count the bytes they move, which is what a bucket swap costs on the network.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..config import ConfigSchema
from ..training.partitions import (
    Partition,
    PartitionLoader,
    all_partition_keys,
    partition_for_workers,
)
from ..vocabulary import PartitionKey, Role
from .lock_client import LockClient
from .partition_server import PARTITIONS_SERVICE
from .rendezvous import World


@dataclass
class Traffic:
    """Partition bytes a trainer moved, and how many bucket changes moved them."""

    bytes_received: int = 0
    bytes_sent: int = 0
    swaps: int = 0  # buckets for which at least one partition was fetched

    def record(self) -> dict[str, float]:
        moved = self.bytes_received + self.bytes_sent
        return {"bytes_received": self.bytes_received, "bytes_sent": self.bytes_sent,
                "swaps": self.swaps, "bytes_per_swap": round(moved / self.swaps) if self.swaps
                else 0}


def partition_bytes(partition: Partition) -> int:
    return sum(t.numel() * t.element_size() for t in (partition.embeddings,
                                                       partition.adagrad_sum))


class PartitionBackend(Protocol):
    def fetch(self, keys: list[PartitionKey]) -> dict[PartitionKey, Partition]:
        """The newest copies of the partitions (the caller holds their locks)."""

    def give_back(self, partitions: dict[PartitionKey, Partition],
                  metadata: dict[str, object]) -> bool:
        """Store the partitions; True if they went into the checkpoint being written."""

    def write_checkpoint(self, version: int, metadata: dict[str, object]) -> None:
        """(Trainer 0, at the barrier) write every partition into checkpoint `version`."""

    def committed(self, version: int) -> None:
        """Checkpoint `version` is committed: the one to read untouched partitions from."""


class ServerPartitions:
    """Partitions kept by the partition servers."""

    def __init__(self, world: World) -> None:
        self.world = world

    def _owner(self, key: PartitionKey) -> str:
        return self.world.layout.partition_server_of(key)

    def fetch(self, keys: list[PartitionKey]) -> dict[PartitionKey, Partition]:
        pending = {key: self.world.peers.call_async(self._owner(key), PARTITIONS_SERVICE,
                                                    "get", key) for key in keys}
        return {key: Partition(*call.result()) for key, call in pending.items()}

    def give_back(self, partitions: dict[PartitionKey, Partition],
                  metadata: dict[str, object]) -> bool:
        pending = [self.world.peers.call_async(self._owner(key), PARTITIONS_SERVICE, "put", key,
                                               p.embeddings, p.adagrad_sum)
                   for key, p in partitions.items()]
        for call in pending:
            call.result()
        return False

    def write_checkpoint(self, version: int, metadata: dict[str, object]) -> None:
        servers = self.world.layout.names(Role.PARTITION_SERVER)
        pending = [self.world.peers.call_async(server, PARTITIONS_SERVICE, "write_checkpoint",
                                               version, metadata,
                                               timeout=self.world.settings.checkpoint_timeout)
                   for server in servers]
        for call in pending:
            call.result()

    def committed(self, version: int) -> None:
        """Nothing to do: the servers hold every partition in memory once they wrote one
        checkpoint."""


class StoragePartitions:
    """Partitions swapped through the checkpoint version being written."""

    def __init__(self, loader: PartitionLoader, lock: LockClient, committed_version: int) -> None:
        self.loader = loader
        self.lock = lock
        self.committed_version = committed_version

    def fetch(self, keys: list[PartitionKey]) -> dict[PartitionKey, Partition]:
        written = self.lock.written_keys() if keys else set()
        return {key: self.loader.load(key, self.committed_version + 1 if key in written
                                      else self.committed_version) for key in keys}

    def give_back(self, partitions: dict[PartitionKey, Partition],
                  metadata: dict[str, object]) -> bool:
        for key, partition in partitions.items():
            self.loader.write(key, partition, self.committed_version + 1, metadata)
        return True

    def write_checkpoint(self, version: int, metadata: dict[str, object]) -> None:
        written = self.lock.written_keys()
        for key in all_partition_keys(self.loader.config):
            if key not in written:  # untouched in this position: carry it over
                self.loader.write(key, self.loader.load(key, self.committed_version), version,
                                  metadata)

    def committed(self, version: int) -> None:
        self.committed_version = version


class RemotePartitions:
    """The trainer's `PartitionSource`: holds what the current bucket needs, nothing more."""

    def __init__(self, backend: PartitionBackend, lock: LockClient,
                 config: ConfigSchema) -> None:
        self.backend = backend
        self.lock = lock
        self.config = config
        self.held: dict[PartitionKey, Partition] = {}
        self.traffic = Traffic()

    def hold(self, keys: Iterable[PartitionKey], metadata: dict[str, object]) -> dict[
            PartitionKey, Partition]:
        wanted = set(keys)
        self._give_back([key for key in self.held if key not in wanted], metadata)
        missing = sorted(wanted - set(self.held))
        if missing:
            fetched = self.backend.fetch(missing)
            self.traffic.bytes_received += sum(map(partition_bytes, fetched.values()))
            self.traffic.swaps += 1
            self.held.update({key: partition_for_workers(p, self.config)
                              for key, p in fetched.items()})
        return {key: self.held[key] for key in wanted}

    def prefetch(self, keys: Iterable[PartitionKey]) -> None:
        """Nothing to read ahead: the next bucket is not known before it is granted."""

    def give_back_all(self, metadata: dict[str, object]) -> None:
        self._give_back(list(self.held), metadata)

    def _give_back(self, keys: list[PartitionKey], metadata: dict[str, object]) -> None:
        if not keys:
            return
        leaving = {key: self.held.pop(key) for key in keys}
        written = self.backend.give_back(leaving, metadata)
        self.traffic.bytes_sent += sum(map(partition_bytes, leaving.values()))
        self.lock.release(sorted(leaving), written)

