"""A distributed trainer: the single-machine bucket loop with distributed parts plugged in.

`TrainingRun` does the training exactly as on one machine; what changes is where its parts
come from: buckets from the lock server (`LockedBuckets`), partitions from the partition
servers or storage (`RemotePartitions`), shared parameters kept in step by `ParameterSync`,
and checkpoints written together at a barrier (`DistributedCheckpointer`): every trainer
gives its partitions back and pushes its last parameter changes, then trainer 0 has the
partition servers write their partitions, writes the model file itself and commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..config import ConfigSchema
from ..data.graph_data import GraphData, check_has_edges
from ..model.model_io import save_model
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore
from ..training.averaged_model import finish_averaging
from ..training.bucket_trainer import BucketOutcome
from ..training.coordinator import (
    JobProgress,
    TrainingRun,
    TrainingSummary,
    build_model_state,
    check_trainable,
    iteration_metadata,
    make_schedule,
    preserved_as,
    publish_checkpoint,
    report_early_stop,
)
from ..training.devices import training_devices
from ..training.init_growth import with_replay
from ..training.partitions import PartitionLoader
from ..training.schedule import TrainingSchedule, TrainingStep
from ..training.worker import ModelState
from ..vocabulary import Bucket, ChunkPosition, Role
from .heartbeat import exit_now, peer_session
from .lock_client import LockClient
from .parameter_server import ParameterSync, shared_tensors
from .remote_partitions import (
    PartitionBackend,
    RemotePartitions,
    ServerPartitions,
    StoragePartitions,
)
from .rendezvous import World, join_world
from .settings import DistributedSettings
from .world import WorldLayout

# Seconds between two parameter exchanges of a trainer's background thread.
PARAMETER_SYNC_INTERVAL = 0.1

Metadata = Callable[[ChunkPosition], dict[str, Any]]


class LockedBuckets:
    """The trainer's `BucketSource`: buckets as the lock server grants them."""

    def __init__(self, lock: LockClient, partitions: RemotePartitions, metadata: Metadata,
                 poll_interval: float) -> None:
        self.lock = lock
        self.partitions = partitions
        self.metadata = metadata
        self.poll_interval = poll_interval

    def buckets(self, position: ChunkPosition) -> Iterator[Bucket]:
        delay = self.poll_interval
        while True:
            answer, bucket = self.lock.acquire(position)
            if answer == "bucket" and bucket is not None:
                delay = self.poll_interval
                yield bucket
            elif answer == "wait":
                # Holding partitions while waiting could block the trainer that needs them.
                self.partitions.give_back_all(self.metadata(position))
                time.sleep(delay)
                delay = min(delay * 1.5, 0.2)
            else:
                return

    def trained(self, outcome: BucketOutcome) -> JobProgress:
        return _job_progress(self.lock.trained(outcome.step.bucket, outcome.record()))

    def progress(self) -> JobProgress | None:
        progress = self.lock.progress()
        return _job_progress(progress) if progress["buckets_done"] else None

    def next_step(self, position: ChunkPosition, bucket: Bucket) -> TrainingStep | None:
        """Not known: the lock server grants a bucket only once this one is trained (asking
        earlier would lock partitions another trainer may need)."""
        return None


def _job_progress(progress: dict[str, Any]) -> JobProgress:
    return JobProgress(edges_done=progress["edges_done"], buckets_done=progress["buckets_done"],
                       bucket=progress["bucket"], loss=progress["loss"], mrr=progress["mrr"])


@dataclass(eq=False)  # a live object with state: compared by identity
class DistributedCheckpointer:
    """The checkpoint barrier at the end of each chunk position."""

    config: ConfigSchema
    data: GraphData
    schedule: TrainingSchedule
    store: CheckpointStore
    state: ModelState
    partitions: RemotePartitions
    backend: PartitionBackend
    sync: ParameterSync
    lock: LockClient
    committed_version: int
    reporter: Reporter

    def checkpoint(self, position: ChunkPosition, outcomes: list[BucketOutcome]) -> bool:
        metadata = iteration_metadata(self.config, self.schedule, position)
        self.partitions.give_back_all(metadata)
        self.sync.sync()
        self.lock.arrive(position)
        if self.lock.trainer == 0:
            version, stop = self._commit(position, metadata)
        else:
            version, stop = self.lock.wait_for(lambda: self.lock.checkpoint_state(position))
        self.backend.committed(version)
        self.committed_version = version
        return stop

    def finish(self) -> None:
        """Nothing pending: every checkpoint is committed at its barrier."""

    def finish_averaging(self) -> None:
        if self.lock.trainer == 0:  # the trainer that commits
            self.committed_version = finish_averaging(self.store, self.config,
                                                      self.committed_version, self.reporter)

    def _commit(self, position: ChunkPosition, metadata: dict[str, Any]) -> tuple[int, bool]:
        self.lock.wait_for(lambda: self.lock.all_arrived(position))
        self.data.check_unchanged()
        self.sync.sync()  # every other trainer pushed its last changes before arriving
        version = self.committed_version + 1
        started = time.monotonic()
        save_model(self.store, version, self.state.model, self.state.optimizer, metadata)
        self.backend.write_checkpoint(version, metadata)
        stats = self.lock.position_records(position)
        self.store.commit(version, self.config.to_dict(), stats=stats,
                          preserve_as=preserved_as(self.config, self.schedule, position))
        publish_checkpoint(self.schedule, self.store, version, position, self.reporter,
                           time.monotonic() - started, stats)
        stop = self.lock.committed(position, version)
        if stop:
            report_early_stop(self.reporter, position)
        return version, stop


def run_trainer(config: ConfigSchema, rank: int, settings: DistributedSettings,
                reporter: Reporter) -> TrainingSummary:
    """Train as trainer `rank` of a distributed job, until the job is done."""
    check_trainable(config)
    layout = WorldLayout.from_config(config)
    layout.check_rank(Role.TRAINER, rank)
    config = with_replay(config, reporter)
    data = GraphData(config)
    data.entity_counts  # noqa: B018 - fail before joining on a bad entity_path
    check_has_edges(data)
    schedule = make_schedule(config, data)
    store = CheckpointStore.from_config(config)
    world = join_world(layout, Role.TRAINER, rank, settings)
    lock = LockClient(world, rank)
    with peer_session(world, lock):
        plan = lock.hello()
        version, start = plan["committed_version"], plan["start"]
        init = CheckpointStore.init_from_config(config)
        state = build_model_state(config, data, store, version, init)
        backend = _backend(world, config, data, store, init, lock, version)
        partitions = RemotePartitions(backend, lock, config)
        sync = ParameterSync(shared_tensors(state), world.peers,
                             layout.parameter_server_names(), PARAMETER_SYNC_INTERVAL,
                             on_failure=lambda error: exit_now(world, str(error),
                                                               error.exit_code))
        with sync:
            checkpointer = DistributedCheckpointer(
                config=config, data=data, schedule=schedule, store=store, state=state,
                partitions=partitions, backend=backend, sync=sync, lock=lock,
                committed_version=version, reporter=reporter)
            source = LockedBuckets(lock, partitions,
                                   lambda p: iteration_metadata(config, schedule, p),
                                   settings.poll_interval)
            run = TrainingRun(config=config, data=data, schedule=schedule, state=state,
                              partitions=partitions, source=source,
                              checkpointer=checkpointer, reporter=reporter,
                              devices=training_devices(config, rank))
            summary = run.run(start)
        reporter.event("partition traffic", trainer=rank, **partitions.traffic.record())
    return summary


def _backend(world: World, config: ConfigSchema, data: GraphData, store: CheckpointStore,
             init: CheckpointStore | None, lock: LockClient, version: int) -> PartitionBackend:
    if world.layout.num_partition_servers > 0:
        return ServerPartitions(world)
    loader = PartitionLoader(config, data.entity_counts, store, init)
    return StoragePartitions(loader, lock, version)
