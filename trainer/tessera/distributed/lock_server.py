"""The lock server: the job's single source of truth about buckets, positions and progress.

It walks the chunk positions of the schedule (resuming after the last committed checkpoint,
as one machine does), hands out the buckets of the current position under `BucketLocks`'
rules, collects what each trained bucket produced (for the job-wide progress that trainer 0
prints, and for the training stats and early stopping), holds the checkpoint barrier at the
end of each position, and watches every peer's heartbeat. Every lock and release is logged as
one JSON line (`partitions locked` / `partitions released`, with the trainer and the
partitions), so that the log alone shows which trainer held which partition when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import ConfigSchema
from ..data.graph_data import GraphData
from ..errors import EXIT_TRANSIENT
from ..log_records import CHECKPOINT_COMMITTED, CHECKPOINT_VERSION, EPOCH
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore
from ..training.coordinator import (
    EarlyStopping,
    checkpoint_lease,
    make_schedule,
    resume_position,
    should_stop,
)
from ..training.schedule import TrainingSchedule
from ..vocabulary import Bucket, ChunkPosition, PartitionKey, Role
from .bucket_locks import BucketLocks
from .liveness import Liveness
from .lock_client import LOCKS_SERVICE
from .parameter_server import ParameterServer
from .remote import serve
from .rendezvous import join_world, leave_world
from .settings import DistributedSettings
from .world import WorldLayout


@dataclass(eq=False)  # a live object with state: compared by identity
class LockService:
    """What trainers and partition servers call on the lock server (thread-safe)."""

    config: ConfigSchema
    data: GraphData
    schedule: TrainingSchedule
    committed_version: int
    start: ChunkPosition | None
    layout: WorldLayout
    reporter: Reporter
    liveness: Liveness

    def __post_init__(self) -> None:
        self.position = self.start
        # PBG's distributed_tree_init_order: on a fresh start, a bucket waits until one of its
        # partitions was trained; off, any free bucket may start at once (init_path, or a
        # resumed run, lifts the rule anyway: every partition already holds trained rows).
        fresh = (self.committed_version == 0 and self.config.init_path is None
                 and self.config.distributed_tree_init_order)
        self.locks = BucketLocks(lambda b: _keys_of(self.data, b), fresh_start=fresh)
        if self.start is not None:
            self.locks.start(self.schedule.buckets(self.start))
        self.lock = threading.Lock()
        self.early_stopping = EarlyStopping()
        self.arrived: set[int] = set()
        self.records: list[dict[str, Any]] = []
        self.written: set[PartitionKey] = set()  # swapped through storage in this position
        self.last_commit: tuple[ChunkPosition, int, bool] | None = None
        self.counters: dict[str, Any] = {"edges_done": 0, "buckets_done": 0, "bucket": "",
                                         "loss": 0.0, "mrr": None}

    @property
    def finished(self) -> bool:
        return self.position is None

    # Start-up and liveness.

    def hello(self, trainer: int) -> dict[str, Any]:
        """Where the job starts: the committed version and the first position to train."""
        self._check_running()
        return {"committed_version": self.committed_version, "start": self.start}

    def heartbeat(self, rank: int) -> dict[str, Any]:
        abort = self.liveness.seen(rank)
        return {"abort": None if abort is None else (abort.message, abort.exit_code),
                "finished": self.finished}

    def fail(self, rank: int, message: str, exit_code: int) -> None:
        """A peer failed on its own and is exiting: abort the job with its message."""
        self.liveness.left(rank)
        if self.liveness.fail(message, exit_code):
            self.reporter.event("job aborted", peer=self.layout.name_of(rank), reason=message)

    def leaving(self, rank: int) -> None:
        self.liveness.left(rank)

    def drop_trainer(self, trainer: int) -> None:
        """A trainer was lost: free its bucket and partitions (nobody waits on them)."""
        with self.lock:
            bucket, keys = self.locks.drop_trainer(trainer)
            self.reporter.event("partitions released", trainer=trainer, partitions=_names(keys),
                                bucket=None if bucket is None else str(bucket), lost=True)

    # Buckets.

    def acquire(self, trainer: int, position: ChunkPosition) -> tuple[str, Bucket | None]:
        """("bucket", b) to train b; ("wait", None) to give everything back and ask again;
        ("complete", None) once every bucket of the position is done."""
        self._check_running()
        with self.lock:
            if position != self.position:
                return "complete", None
            grant = self.locks.acquire(trainer)
            if grant.bucket is None:
                return ("complete" if grant.complete else "wait"), None
            self.reporter.event("partitions locked", trainer=trainer, bucket=str(grant.bucket),
                                partitions=_names(self.locks.held[trainer]))
            return "bucket", grant.bucket

    def trained(self, trainer: int, bucket: Bucket, record: dict[str, Any]) -> dict[str, Any]:
        """`trainer` finished `bucket` with the stats in `record`; returns the job's progress."""
        self._check_running()
        with self.lock:
            self.locks.finish(trainer, bucket)
            self.records.append(record)
            evaluation = record.get("eval_stats_after") or {}
            self.counters = {
                "edges_done": self.counters["edges_done"] + record["stats"]["count"],
                "buckets_done": self.counters["buckets_done"] + 1, "bucket": str(bucket),
                "loss": record["stats"]["metrics"]["loss"], "mrr": evaluation.get("mrr")}
            return dict(self.counters)

    def progress(self) -> dict[str, Any]:
        """The job's counters: edges and buckets trained, the last bucket's loss and MRR."""
        with self.lock:
            return dict(self.counters)

    def release(self, trainer: int, keys: list[PartitionKey], written: bool = False) -> None:
        """`trainer` gave `keys` back (into the checkpoint being written, if `written`)."""
        self._check_running()
        with self.lock:
            released = self.locks.release(trainer, keys)
            if written:
                self.written |= released
            if released:
                self.reporter.event("partitions released", trainer=trainer,
                                    partitions=_names(released))

    def written_keys(self) -> list[PartitionKey]:
        with self.lock:
            return sorted(self.written)

    # The checkpoint barrier.

    def arrive(self, trainer: int, position: ChunkPosition) -> None:
        """`trainer` has given back its partitions and synchronised its parameters."""
        self._check_running()
        with self.lock:
            if position == self.position:
                self.arrived.add(trainer)

    def all_arrived(self, position: ChunkPosition) -> bool:
        self._check_running()
        with self.lock:
            return position == self.position and self.locks.complete \
                and len(self.arrived) == self.layout.num_trainers

    def position_records(self, position: ChunkPosition) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.records) if position == self.position else []

    def committed(self, position: ChunkPosition, version: int) -> bool:
        """Trainer 0 committed `version` for `position`; move on. True: training stops."""
        self._check_running()
        with self.lock:
            self.early_stopping.add_losses(
                r["eval_stats_after"]["loss"] for r in self.records
                if r.get("eval_stats_after") and "loss" in r["eval_stats_after"])
            stop = should_stop(self.config, self.schedule, position, self.early_stopping,
                               self.reporter)
            self.committed_version = version
            self.last_commit = (position, version, stop)
            following = None if stop else self.schedule.position_after(position)
            self.position = following
            self.arrived, self.records, self.written = set(), [], set()
            if following is not None:
                self.locks.start(self.schedule.buckets(following))
            self.reporter.event(CHECKPOINT_COMMITTED, **{
                CHECKPOINT_VERSION: version, EPOCH: position.epoch_idx + 1,
                "finished": self.finished})
            return stop

    def checkpoint_state(self, position: ChunkPosition) -> tuple[int, bool] | None:
        """(version, stop) once the checkpoint ending `position` is committed, else None."""
        self._check_running()
        with self.lock:
            if self.last_commit is None or self.last_commit[0] != position:
                return None
            return self.last_commit[1], self.last_commit[2]

    def _check_running(self) -> None:
        if self.liveness.abort is not None:
            raise self.liveness.abort.error()


def _keys_of(data: GraphData, bucket: Bucket) -> frozenset[PartitionKey]:
    lhs, rhs = data.partition_keys(bucket)
    return frozenset(lhs) | frozenset(rhs)


def _names(keys: Any) -> list[list[Any]]:
    return [[entity, part] for entity, part in sorted(keys)]


def run_lock_server(config: ConfigSchema, settings: DistributedSettings,
                    reporter: Reporter) -> None:
    """Serve a job from start to end (or until it is aborted, raising the abort's error).

    The lock server holds the job's lease on the checkpoint path, for all its trainers."""
    layout = WorldLayout.from_config(config)
    data = GraphData(config)
    data.entity_counts  # noqa: B018 - fail early on a bad entity_path
    with checkpoint_lease(config, "tessera lock-server", reporter) as lease:
        store = CheckpointStore.from_config(config)
        store.remove_uncommitted(config.to_dict())  # before anyone joins: no one writes yet
        version = store.current_version()
        schedule = make_schedule(config, data)
        start = resume_position(store, version, schedule)
        liveness = Liveness(range(1, layout.world_size), settings.peer_timeout)
        service = LockService(config=config, data=data, schedule=schedule,
                              committed_version=version, start=start, layout=layout,
                              reporter=reporter, liveness=liveness)
        def lease_lost(message: str) -> None:
            liveness.fail(message, EXIT_TRANSIENT)

        with lease.renewing(on_lost=lease_lost):
            _serve_job(service, layout, settings, reporter)


def _serve_job(service: LockService, layout: WorldLayout, settings: DistributedSettings,
               reporter: Reporter) -> None:
    liveness = service.liveness
    serve(LOCKS_SERVICE, service)
    if layout.num_partition_servers == 0:
        serve(ParameterServer.SERVICE, ParameterServer())
    reporter.event("lock server waiting for peers", address=settings.init_method,
                   peers=layout.world_size - 1, checkpoint_version=service.committed_version,
                   start=None if service.start is None else str(service.start))
    world = join_world(layout, Role.LOCK_SERVER, 0, settings)
    liveness.start()
    reporter.event("all peers joined", peers=world.layout.world_size - 1)
    while not liveness.everyone_left() and liveness.abort is None:
        _watch_peers(service, world.peers.describe, layout, reporter)
        time.sleep(settings.heartbeat_interval / 2)
    if liveness.abort is not None:
        while not liveness.everyone_gone():
            time.sleep(0.05)
        leave_world(graceful=False, timeout=settings.peer_timeout)
        raise liveness.abort.error()
    reporter.event("job finished", checkpoint_version=service.committed_version)
    leave_world(graceful=True, timeout=settings.peer_timeout)


def _watch_peers(service: LockService, describe: Callable[[str], str], layout: WorldLayout,
                 reporter: Reporter) -> None:
    """Abort the job when a peer has been silent for the peer time-out."""
    for rank, silent in service.liveness.lost():
        name = layout.name_of(rank)
        service.liveness.left(rank)
        role, role_rank = layout.role_of(rank)
        if role is Role.TRAINER:
            service.drop_trainer(role_rank)
        message = f"lost {describe(name)}: no heartbeat for {silent:.1f} s"
        if service.liveness.fail(message, EXIT_TRANSIENT):
            reporter.event("job aborted", peer=name, reason=message)
