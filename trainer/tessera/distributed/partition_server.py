"""A partition server: keeps the partitions no trainer holds, and writes them to checkpoints.

Partitions are sharded over the servers by partition number. A server loads each of its
partitions the first time it is asked for it, by the same rules (and seeds) as one machine
(`PartitionLoader`: the committed checkpoint, else `init_path`, else a fresh one), and from
then on keeps the newest copy in memory: trainers fetch a partition when a bucket needs it
and put it back when done. At the end of each chunk position, when every partition is back,
trainer 0 asks all servers to write their shares into the next checkpoint version at once.
The server also hosts a shard of the shared parameters (`ParameterServer`).
"""

from __future__ import annotations

import threading

import torch

from ..config import ConfigSchema
from ..data.graph_data import GraphData
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore
from ..training.partitions import Partition, PartitionLoader, all_partition_keys
from ..vocabulary import PartitionKey, Role
from .heartbeat import peer_session
from .lock_client import LockClient
from .parameter_server import ParameterServer
from .remote import serve
from .rendezvous import join_world
from .settings import DistributedSettings
from .world import WorldLayout

PARTITIONS_SERVICE = "partitions"


class PartitionServer:
    """The partitions of one shard, loaded lazily and then kept in memory (thread-safe)."""

    def __init__(self, keys: list[PartitionKey], loader: PartitionLoader,
                 committed_version: int) -> None:
        self.keys = set(keys)
        self.loader = loader
        self.committed_version = committed_version
        self.partitions: dict[PartitionKey, Partition] = {}
        self.lock = threading.Lock()

    def get(self, key: PartitionKey) -> tuple[torch.Tensor, torch.Tensor]:
        """A partition's embeddings and Adagrad sums."""
        partition = self._partition(tuple(key))  # type: ignore[arg-type]
        return partition.embeddings, partition.adagrad_sum

    def put(self, key: PartitionKey, embeddings: torch.Tensor,
            adagrad_sum: torch.Tensor) -> None:
        key = tuple(key)  # type: ignore[assignment]
        self._check_owned(key)
        with self.lock:
            self.partitions[key] = Partition(embeddings, adagrad_sum)

    def write_checkpoint(self, version: int, metadata: dict[str, object]) -> int:
        """Write every partition of the shard into checkpoint `version`; returns how many.

        Afterwards every partition of the shard is in memory, so the version the server
        started from is never read again."""
        for key in sorted(self.keys):
            self.loader.write(key, self._partition(key), version, metadata)
        return len(self.keys)

    def _partition(self, key: PartitionKey) -> Partition:
        self._check_owned(key)
        with self.lock:
            if key not in self.partitions:
                self.partitions[key] = self.loader.load(key, self.committed_version)
            return self.partitions[key]

    def _check_owned(self, key: PartitionKey) -> None:
        if key not in self.keys:
            raise RuntimeError(f"partition {key} does not belong to this server's shard")


def run_partition_server(config: ConfigSchema, rank: int, settings: DistributedSettings,
                         reporter: Reporter) -> None:
    """Serve partitions (and a parameter shard) until the job finishes or is aborted."""
    layout = WorldLayout.from_config(config)
    layout.check_rank(Role.PARTITION_SERVER, rank)
    name = layout.name_of(layout.rank_of(Role.PARTITION_SERVER, rank))
    data = GraphData(config)
    store = CheckpointStore.from_config(config)
    # The lock server only cleans up versions other than the committed one, so the committed
    # version read here is the one the job resumes from.
    loader = PartitionLoader(config, data.entity_counts, store,
                             CheckpointStore.init_from_config(config))
    keys = [key for key in all_partition_keys(config) if layout.partition_server_of(key) == name]
    # Served before joining: trainers may call as soon as the rendezvous completes.
    serve(PARTITIONS_SERVICE, PartitionServer(keys, loader, store.current_version()))
    serve(ParameterServer.SERVICE, ParameterServer())
    reporter.event("partition server joining", server=name, partitions=len(keys),
                   address=settings.init_method)
    world = join_world(layout, Role.PARTITION_SERVER, rank, settings)
    with peer_session(world, LockClient(world)) as heartbeat:
        heartbeat.wait_until_finished()
    reporter.event("partition server done", server=name)
