"""The training run: the loop over chunk positions and buckets, and its single-machine parts.

A run is a sequence of chunk positions (epoch, edge set, chunk); each trains every bucket
once and ends with an atomic checkpoint whose metadata records the position, so a restarted
run on the same checkpoint_path continues with the next position.

The loop (`TrainingRun`) is the same on one machine and in a distributed job; three small
interfaces say where its parts come from:

- a `BucketSource` says which bucket to train next (one machine: the schedule's bucket
  order; distributed: the lock server) and how far the whole job has got;
- a `PartitionSource` makes a bucket's partitions resident (one machine: swapped through
  the checkpoint being written; distributed: fetched from partition servers);
- a `Checkpointer` ends a chunk position with a committed checkpoint and says whether to stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..config import ConfigSchema
from ..config.redaction import redacted
from ..data.graph_data import GraphData, check_edge_paths, check_has_edges
from ..errors import BadInputError
from ..log_records import (
    BUCKETS_DONE,
    BUCKETS_TOTAL,
    CHECKPOINT_COMMITTED,
    CHECKPOINT_SECONDS,
    CHECKPOINT_VERSION,
    CHUNK_STATS,
    CHUNKS_DONE,
    CHUNKS_TOTAL,
    COMMIT_SECONDS,
    CONFIG_CHANGED,
    DEVICE_BUSY_SECONDS,
    DEVICE_PEAK_MEMORY_GB,
    EDGE_PATHS_CHANGED,
    EDGES_PER_SECOND,
    EPOCH,
    EPOCH_ENDED,
    EVAL_PREFIX,
    LOSS,
    MRR,
    NOTHING_TO_TRAIN,
    PARTITION_WAIT_SECONDS,
    PARTITIONS_HELD_IN,
    RESUMING,
    STARTUP_SECONDS,
    STATS,
    STEP,
    TRAIN_TASK,
    TRAINING_FINISHED,
    epoch_text,
)
from ..model import EmbeddingModel
from ..model.model_io import INIT_PATH, load_model, model_writer, save_model
from ..process_age import process_age
from ..progress import HUMAN_INTERVAL, Reporter, Task
from ..stop_signals import raise_if_stopped
from ..storage.checkpoint import CheckpointStore, should_preserve
from ..storage.lease import CheckpointLease, LeaseHeldError
from ..vocabulary import Bucket, ChunkPosition, PartitionKey
from .allocator import release_freed_memory
from .averaged_model import finish_averaging
from .bucket_trainer import BucketOutcome, BucketTrainer
from .device_trainer import DeviceBucketTrainer
from .devices import check_devices, embedding_dtype, holder_device, training_devices
from .hogwild import Pool, make_pool
from .init_growth import with_replay
from .multi_device_trainer import MultiDeviceBucketTrainer
from .optimizers import make_model_optimizer
from .partitions import Partition, PartitionHolder, look_ahead_enabled
from .schedule import TrainingSchedule, TrainingStep, num_edge_chunks
from .steps import StepImplementation, choose_step
from .trained_edges import LiveReports
from .worker import ModelState, train_part

AnyBucketTrainer = BucketTrainer | DeviceBucketTrainer | MultiDeviceBucketTrainer


@dataclass(frozen=True)
class TrainingSummary:
    edges: int
    seconds: float
    checkpoint_version: int
    checkpoint_path: str
    last_loss: float | None
    last_eval: dict[str, float] | None
    # On a device: its time in the buckets' batch loops, and its peak allocated memory.
    device_seconds: float | None = None
    device_peak_bytes: int | None = None
    # The time training waited for the buckets' partitions (swaps not hidden by look-ahead).
    partition_wait_seconds: float = 0.0
    # Apart from the training `seconds`: the process's age when training began (imports,
    # CUDA's initialisation, reading the checkpoint), and the time checkpoints took in it.
    startup_seconds: float | None = None
    checkpoint_seconds: float = 0.0
    step: str | None = None  # the name of the run's step implementation (`steps`)
    partitions_held_in: str | None = None  # on a device: the device, or "host"

    @property
    def edges_per_second(self) -> float:
        return self.edges / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class JobProgress:
    """How far the whole job has got since this invocation started, after a bucket."""

    edges_done: int
    buckets_done: int
    bucket: str  # the bucket trained last
    loss: float
    mrr: float | None


class BucketSource(Protocol):
    def buckets(self, position: ChunkPosition) -> Iterator[Bucket]:
        """The buckets of `position` this trainer is to train, as they become available."""

    def trained(self, outcome: BucketOutcome) -> JobProgress:
        """Record a trained bucket; the job's progress including it."""

    def progress(self) -> JobProgress | None:
        """The job's progress now (None before any bucket was trained)."""

    def next_step(self, position: ChunkPosition, bucket: Bucket) -> TrainingStep | None:
        """The bucket chunk this trainer trains after `bucket` of `position`, if known
        before `bucket` trains (None: none follows, or it is not known yet)."""


class PartitionSource(Protocol):
    def hold(self, keys: Iterable[PartitionKey], metadata: dict[str, object]) -> dict[
            PartitionKey, Partition]:
        """Make exactly `keys` resident (in shared memory; pinned for a GPU), and return
        them."""

    def prefetch(self, keys: Iterable[PartitionKey]) -> None:
        """Start making `keys` ready for the next `hold`, while the current bucket trains (or
        do nothing)."""


class Checkpointer(Protocol):
    @property
    def committed_version(self) -> int:
        """The last version committed (0: none)."""

    def checkpoint(self, position: ChunkPosition, outcomes: list[BucketOutcome]) -> bool:
        """Commit the checkpoint that ends `position` (or start writing it, to be committed
        in the background); True if training should stop."""

    def finish(self) -> None:
        """Commit the checkpoint still being written, if any (raising its error)."""

    def finish_averaging(self) -> None:
        """Once the run's last checkpoint is committed, commit its weight-averaged model
        (`averaged_model`)."""


def train(config: ConfigSchema, reporter: Reporter,
          devices: list[torch.device] | None = None) -> TrainingSummary:
    """Train (or resume training) as the config says; returns what was done. `devices`: where
    to train (by default the CUDA devices `num_gpus` asks for; none: the CPU path)."""
    check_supported(config)
    config = with_replay(config, reporter)
    data = GraphData(config)
    data.entity_counts  # noqa: B018 - read first: a missing entity_path is the likeliest error
    check_has_edges(data)
    with checkpoint_lease(config, "tessera train", reporter) as lease:
        store = CheckpointStore.from_config(config)
        store.remove_uncommitted(config.to_dict())
        version = store.current_version()
        init = CheckpointStore.init_from_config(config)
        schedule = make_schedule(config, data)
        start = resume_position(store, version, schedule)
        report_resume(schedule, version, start, reporter)
        report_config_changes(store, config, version, start, reporter)
        state = build_model_state(config, data, store, version, init)
        devices = training_devices(config) if devices is None else devices
        on_device = holder_device(config, devices, data.entity_counts)
        holder = PartitionHolder(config, data.entity_counts, store, init, version,
                                 look_ahead=look_ahead_enabled(),
                                 pinned=any(device.type == "cuda" for device in devices),
                                 device=on_device)
        checkpointer = LocalCheckpointer(config, data, schedule, store, holder, state,
                                         reporter)
        run = TrainingRun(config=config, data=data, schedule=schedule, state=state,
                          partitions=holder, source=ScheduledBuckets(schedule),
                          checkpointer=checkpointer, reporter=reporter, devices=devices,
                          partitions_on_device=on_device is not None)
        return run.run(start, alongside=lease.renewing())


@contextlib.contextmanager
def checkpoint_lease(config: ConfigSchema, command: str,
                     reporter: Reporter) -> Iterator[CheckpointLease]:
    """The job's lease on its checkpoint path, held (not yet renewed) for the block: taken
    before anything there is read or deleted, so that two jobs never write one checkpoint."""
    lease = CheckpointLease(CheckpointStore.from_config(config).directory, command)
    replaced = lease.acquire()
    if replaced is not None:
        reporter.event("took over the checkpoint lease of a stopped run", previous=replaced)
    try:
        yield lease
    except Exception as error:
        # A contender whose lease write landed late took over: whatever went wrong here
        # since (another run's files in the way) is that run's doing, and ends with the wait.
        holder = lease.taken_over_by()
        if holder is None:
            raise
        raise LeaseHeldError(f"{lease.url}: the lease was taken over by {holder.describe()} "
                             f"while this run held it ({error}); stopped") from error
    finally:
        lease.release()


def check_supported(config: ConfigSchema) -> None:
    check_trainable(config)
    if config.num_machines > 1:
        raise BadInputError("num_machines: this command trains on one machine; set "
                            "num_machines: 1, or start the distributed roles (tessera "
                            "lock-server, partition-server, train --rank R), or run them all "
                            "here with tessera train --local-cluster")


def check_trainable(config: ConfigSchema) -> None:
    """What every trainer, on one machine or many, needs of a config."""
    check_edge_paths(config)
    check_devices(config)


def make_schedule(config: ConfigSchema, data: GraphData) -> TrainingSchedule:
    return TrainingSchedule.from_config(config, num_edge_chunks(config, data.max_bucket_size()))


def build_model_state(config: ConfigSchema, data: GraphData, store: CheckpointStore,
                      version: int, init: CheckpointStore | None) -> ModelState:
    """The model and its optimizer, from the committed checkpoint, init_path or fresh, in
    shared memory for the Hogwild workers."""
    model = EmbeddingModel(config, data.num_relations)
    optimizer = make_model_optimizer(model, config)
    if version > 0:
        load_model(store, version, model, optimizer)
    elif init is not None:
        load_model(init, None, model, optimizer, origin=INIT_PATH)
    return ModelState(model.share_memory(),
                      optimizer.share_memory() if optimizer is not None else None)


def resume_position(store: CheckpointStore, version: int,
                    schedule: TrainingSchedule) -> ChunkPosition | None:
    """The first chunk position a checkpoint has not completed (None: nothing left)."""
    if version == 0:
        return schedule.position_at(0) if schedule.num_positions else None
    metadata = store.read_metadata(version)
    completed = ChunkPosition(int(metadata["iteration/epoch_idx"]),
                              int(metadata["iteration/edge_path_idx"]),
                              int(metadata["iteration/edge_chunk_idx"]))
    if completed.epoch_idx >= schedule.num_epochs:
        return None
    return schedule.position_after(completed)


def report_resume(schedule: TrainingSchedule, version: int, start: ChunkPosition | None,
                  reporter: Reporter) -> None:
    """Say which checkpoint a rerun goes on from, and where in the schedule: without it a
    resumed run looks like a fresh one that is oddly short, and a complete one like a
    failure (nothing trained, no reason given)."""
    if version == 0:
        return
    if start is None:
        reporter.event(NOTHING_TO_TRAIN, **{CHECKPOINT_VERSION: version,
                                            "num_epochs": schedule.num_epochs})
        return
    reporter.event(RESUMING, **{CHECKPOINT_VERSION: version, EPOCH: start.epoch_idx + 1,
                                CHUNKS_DONE: schedule.index_of(start),
                                CHUNKS_TOTAL: schedule.num_positions})


def report_config_changes(store: CheckpointStore, config: ConfigSchema, version: int,
                          start: ChunkPosition | None, reporter: Reporter) -> None:
    """Name the keys (beyond num_epochs) a rerun changed since its checkpoint: they apply
    from here on, as in PBG, which someone who meant a fresh run needs to know. Keys only one
    side has (a newer schema, PBG's config) are left out. Changed edge_paths get a line of
    their own: resuming by position, a grown list trains only what lies after it."""
    if version == 0:
        return
    try:
        committed = store.read_config()
    except BadInputError:  # a checkpoint without a readable config.json
        return
    current = json.loads(json.dumps(redacted(config.to_dict())))  # as config.json holds it
    changed = sorted(key for key in current.keys() & committed.keys()
                     if key != "num_epochs" and current[key] != committed[key])
    if changed:
        reporter.event(CONFIG_CHANGED, keys=changed)
    if "edge_paths" in changed:
        where = {} if start is None else {
            "edge_set": f"{start.edge_path_idx + 1}/{len(config.edge_paths)}",
            "edge_path": current["edge_paths"][start.edge_path_idx]}
        reporter.event(EDGE_PATHS_CHANGED, **where)


def iteration_metadata(config: ConfigSchema, schedule: TrainingSchedule,
                       position: ChunkPosition) -> dict[str, Any]:
    """PBG's checkpoint metadata attributes for a chunk position."""
    return {"config/json": json.dumps(redacted(config.to_dict())),
            "iteration/num_epochs": schedule.num_epochs,
            "iteration/epoch_idx": position.epoch_idx,
            "iteration/num_edge_paths": schedule.num_edge_paths,
            "iteration/edge_path_idx": position.edge_path_idx,
            "iteration/edge_path": config.edge_paths[position.edge_path_idx],
            "iteration/num_edge_chunks": schedule.num_edge_chunks,
            "iteration/edge_chunk_idx": position.edge_chunk_idx}


def edges_per_position(config: ConfigSchema, data: GraphData,
                       schedule: TrainingSchedule) -> int:
    """Training edges of one chunk position, averaged over edge sets (for the ETA); each
    takes its share of the replayed edges."""
    totals = [sum(sizes.values()) for sizes in data.bucket_sizes]
    train_share = 1 - config.eval_fraction
    replayed = sum(sum(sizes.values()) for sizes in data.replay_sizes)
    return int((sum(totals) * train_share + replayed) / len(totals) / schedule.num_edge_chunks)


@dataclass(eq=False)  # a live object with state: compared by identity
class TrainingRun:
    """Drives one run from a start position to the end, one checkpoint per chunk position."""

    config: ConfigSchema
    data: GraphData
    schedule: TrainingSchedule
    state: ModelState
    partitions: PartitionSource
    source: BucketSource
    checkpointer: Checkpointer
    reporter: Reporter
    # Where buckets train: none, the CPU's Hogwild workers; else the device trainer.
    devices: list[torch.device] = field(default_factory=list)
    partitions_on_device: bool = False  # held in the one device's memory (`holder_device`)
    buckets_total: int = field(default=0, init=False)  # of the whole job, this invocation
    trained_here: int = field(default=0, init=False)  # buckets this process trained
    device_seconds: float = field(default=0.0, init=False)  # see TrainingSummary
    partition_wait_seconds: float = field(default=0.0, init=False)  # see TrainingSummary
    metadata_of: tuple[ChunkPosition, dict[str, Any]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        # How every step of the run is computed: chosen once, here.
        self.step: StepImplementation = choose_step(self.config, on_device=bool(self.devices))

    @property
    def num_workers(self) -> int:
        return self.config.workers or os.cpu_count() or 1

    def run(self, start: ChunkPosition | None,
            alongside: contextlib.AbstractContextManager[Any] | None = None) -> TrainingSummary:
        """Train from `start` to the end; `alongside` (the lease's heartbeat) is entered once
        the Hogwild workers are started, so that they are forked from a single thread."""
        positions = list(self.schedule.positions(start)) if start is not None else []
        total = edges_per_position(self.config, self.data, self.schedule) * len(positions)
        pool = make_pool(self.config, self.num_workers, train_part, self.state) \
            if self.num_workers > 1 and positions and not self.devices else None
        trainer = self._bucket_trainer(pool)
        last: BucketOutcome | None = None
        self.buckets_total = len(positions) * len(self.data.bucket_grid())
        checkpoint_seconds = 0.0
        with self.reporter.task(TRAIN_TASK, total=total or None, unit="edges") as task, \
                pool or contextlib.nullcontext(), alongside or contextlib.nullcontext(), \
                LiveReports(HUMAN_INTERVAL / 2) as live:  # polled twice per update: none late
            startup_seconds = process_age()
            try:
                for position in positions:
                    outcomes = [self._train_step(trainer, position, bucket, task, live)
                                for bucket in self.source.buckets(position)]
                    last = outcomes[-1] if outcomes else last
                    started = time.monotonic()
                    stop = self.checkpointer.checkpoint(position, outcomes)
                    checkpoint_seconds += time.monotonic() - started
                    # Other trainers may have trained buckets of this position meanwhile.
                    self._report(task, position, self.source.progress())
                    if stop:
                        break
            finally:  # a stopped run too commits the chunk it had finished
                started = time.monotonic()
                self.checkpointer.finish()
                checkpoint_seconds += time.monotonic() - started
            started = time.monotonic()
            self.checkpointer.finish_averaging()
            checkpoint_seconds += time.monotonic() - started
            done, seconds = task.done, task.elapsed
        summary = TrainingSummary(
            edges=int(done), seconds=seconds,
            checkpoint_version=self.checkpointer.committed_version,
            checkpoint_path=self.config.checkpoint_path,
            last_loss=last.loss if last else None,
            last_eval=last.eval_after if last else None,
            device_seconds=self.device_seconds if self.devices else None,
            device_peak_bytes=peak_memory(self.devices),
            partition_wait_seconds=self.partition_wait_seconds,
            startup_seconds=startup_seconds, checkpoint_seconds=checkpoint_seconds,
            step=self.step.name, partitions_held_in=self._partitions_held_in())
        self.reporter.summary(TRAINING_FINISHED, summary_rows(summary))
        return summary

    def _bucket_trainer(self, pool: Pool | None) -> AnyBucketTrainer:
        if not self.devices:
            return BucketTrainer(self.config, self.data, self.state, pool, self.num_workers,
                                 self.schedule.num_edge_chunks, self.step)
        dtype, chunks = embedding_dtype(self.config), self.schedule.num_edge_chunks
        closed_form = self.step.closed_form
        featurized = any(entity.featurized for entity in self.config.entities.values())
        if len(self.devices) == 1 or featurized:  # a feature's rows are in no one range
            return DeviceBucketTrainer(self.config, self.data, self.state, chunks,
                                       self.devices[0], dtype, closed_form=closed_form,
                                       in_place=self.partitions_on_device)
        return MultiDeviceBucketTrainer(self.config, self.data, self.state, chunks,
                                        self.devices, dtype, closed_form=closed_form)

    def _train_step(self, trainer: AnyBucketTrainer, position: ChunkPosition, bucket: Bucket,
                    task: Task, live: LiveReports) -> BucketOutcome:
        raise_if_stopped()
        step = step_at(position, bucket)
        lhs_keys, rhs_keys = self.data.partition_keys(bucket)
        metadata = self._metadata(position)
        started = time.monotonic()
        partitions = self.partitions.hold(set(lhs_keys) | set(rhs_keys), metadata)
        self.partition_wait_seconds += time.monotonic() - started
        following = self.source.next_step(position, bucket)
        if following is not None:  # read while this bucket trains
            self.partitions.prefetch(part for keys in self.data.partition_keys(following.bucket)
                                     for part in keys)
            if isinstance(trainer, DeviceBucketTrainer):
                trainer.look_ahead(following)
        first_ever = position == self.schedule.position_at(0) and self.trained_here == 0
        base = task.done
        with live.during(lambda: task.advance(
                max(base + trainer.edges_trained() - task.done, 0))):
            outcome = trainer.train(step, partitions,
                                    self.config.hogwild_delay if first_ever else 0.0)
        release_freed_memory()  # the bucket's edges and batches, before the next swap
        self.trained_here += 1
        self.device_seconds += outcome.device_seconds or 0.0
        self._report(task, position, self.source.trained(outcome))
        if self.config.verbose:
            self.reporter.event("bucket trained", **outcome.record())
        return outcome

    def _partitions_held_in(self) -> str | None:
        if not self.devices:
            return None
        return str(self.devices[0]) if self.partitions_on_device else "host"

    def _metadata(self, position: ChunkPosition) -> dict[str, Any]:
        """`iteration_metadata` of `position`, made once per position rather than per bucket
        (its config JSON took 0.5 ms, a GPU's bucket takes milliseconds)."""
        if self.metadata_of is None or self.metadata_of[0] != position:
            self.metadata_of = (position, iteration_metadata(self.config, self.schedule,
                                                             position))
        return self.metadata_of[1]

    def _report(self, task: Task, position: ChunkPosition, progress: JobProgress | None) -> None:
        if progress is None:
            return
        fields: dict[str, Any] = {
            EPOCH: epoch_text(position.epoch_idx + 1, self.schedule.num_epochs),
            "bucket": progress.bucket, BUCKETS_DONE: progress.buckets_done,
            BUCKETS_TOTAL: self.buckets_total, LOSS: round(progress.loss, 5)}
        if progress.mrr is not None:
            fields[MRR] = round(progress.mrr, 4)
        task.advance(progress.edges_done - task.done, **fields)


def step_at(position: ChunkPosition, bucket: Bucket) -> TrainingStep:
    return TrainingStep(position.epoch_idx, position.edge_path_idx, position.edge_chunk_idx,
                        bucket)


def peak_memory(devices: list[torch.device]) -> int | None:
    """The most memory torch allocated on the CUDA devices trained on (None: none used)."""
    cuda = [device for device in devices if device.type == "cuda"]
    return max(torch.cuda.max_memory_allocated(device) for device in cuda) if cuda else None


def summary_rows(summary: TrainingSummary) -> dict[str, Any]:
    """The final summary table of a run."""
    rows: dict[str, Any] = {
        "edges": summary.edges, "seconds": round(summary.seconds, 2),
        EDGES_PER_SECOND: round(summary.edges_per_second),
        LOSS: None if summary.last_loss is None else round(summary.last_loss, 5)}
    rows.update({EVAL_PREFIX + k: round(v, 4) for k, v in (summary.last_eval or {}).items()})
    if summary.device_seconds is not None:
        rows[DEVICE_BUSY_SECONDS] = round(summary.device_seconds, 2)
    if summary.device_peak_bytes is not None:
        rows[DEVICE_PEAK_MEMORY_GB] = round(summary.device_peak_bytes / 1e9, 3)
    if summary.step is not None:
        rows[STEP] = summary.step
    if summary.partitions_held_in is not None:
        rows[PARTITIONS_HELD_IN] = summary.partitions_held_in
    rows[PARTITION_WAIT_SECONDS] = round(summary.partition_wait_seconds, 2)
    rows[CHECKPOINT_SECONDS] = round(summary.checkpoint_seconds, 2)
    if summary.startup_seconds is not None:
        rows[STARTUP_SECONDS] = round(summary.startup_seconds, 2)
    rows.update({CHECKPOINT_VERSION: summary.checkpoint_version,
                 "checkpoint": summary.checkpoint_path})
    return rows


class ScheduledBuckets:
    """One machine: every bucket of a position in the schedule's order."""

    def __init__(self, schedule: TrainingSchedule) -> None:
        self.schedule = schedule
        self.last: JobProgress | None = None

    def buckets(self, position: ChunkPosition) -> Iterator[Bucket]:
        return iter(self.schedule.buckets(position))

    def trained(self, outcome: BucketOutcome) -> JobProgress:
        edges, buckets = (self.last.edges_done, self.last.buckets_done) if self.last else (0, 0)
        mrr = outcome.eval_after["mrr"] if outcome.eval_after else None
        self.last = JobProgress(edges + outcome.count, buckets + 1, str(outcome.step.bucket),
                                outcome.loss, mrr)
        return self.last

    def progress(self) -> JobProgress | None:
        return self.last

    def next_step(self, position: ChunkPosition, bucket: Bucket) -> TrainingStep | None:
        """The schedule's next bucket, in this position or the first of the next one."""
        buckets = self.schedule.buckets(position)
        index = buckets.index(bucket) + 1
        if index < len(buckets):
            return step_at(position, buckets[index])
        following = self.schedule.position_after(position)
        return step_at(following, self.schedule.buckets(following)[0]) \
            if following is not None else None


class EarlyStopping:
    """PBG's early_stopping: stop after an epoch whose mean held-out loss is above the
    previous epoch's (needs eval_fraction > 0; without held-out edges it never stops)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.previous: float | None = None

    def add(self, outcomes: list[BucketOutcome]) -> None:
        self.add_losses([o.eval_after["loss"] for o in outcomes
                         if o.eval_after and "loss" in o.eval_after])

    def add_losses(self, losses: Iterable[float]) -> None:
        """Held-out losses of buckets trained in the current epoch."""
        self.losses += list(losses)

    def epoch_ended(self) -> bool:
        """Close the epoch; True if training should stop."""
        if not self.losses:
            return False
        mean = sum(self.losses) / len(self.losses)
        worse = self.previous is not None and mean > self.previous
        self.previous, self.losses = mean, []
        return worse


@dataclass(eq=False)
class LocalCheckpointer:
    """One machine: write the held and swapped-out partitions and the model, then commit."""

    config: ConfigSchema
    data: GraphData
    schedule: TrainingSchedule
    store: CheckpointStore
    holder: PartitionHolder
    state: ModelState
    reporter: Reporter
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping, init=False)
    # Writes and commits checkpoints in the background (made at the first one so written).
    writer: ThreadPoolExecutor | None = field(default=None, init=False)

    @property
    def committed_version(self) -> int:
        return self.holder.committed_version

    def checkpoint(self, position: ChunkPosition, outcomes: list[BucketOutcome]) -> bool:
        self.data.check_unchanged()
        metadata = iteration_metadata(self.config, self.schedule, position)
        self.holder.settle()  # one version pending at a time
        version = self.holder.next_version
        started = time.monotonic()
        stats = [outcome.record() for outcome in outcomes]
        snapshot = self.holder.snapshot() if self.config.io_in_background() else None
        if snapshot is None:
            self.holder.write_all(metadata)
            save_model(self.store, version, self.state.model, self.state.optimizer, metadata)
            self._commit(version, position, stats)
            self.holder.committed()
            self._publish(version, position, stats, started)
        else:
            write_model = model_writer(self.state.model, self.state.optimizer, copied=True)

            def write_and_commit() -> None:
                for key, partition in snapshot.items():
                    self.holder.loader.write(key, partition, version, metadata)
                write_model(self.store, version, metadata)
                self._commit(version, position, stats)
                self._publish(version, position, stats, started)

            if self.writer is None:
                self.writer = ThreadPoolExecutor(1, thread_name_prefix="tessera-checkpoint")
            self.holder.pending = (self.writer.submit(write_and_commit), version)
        self.early_stopping.add(outcomes)
        return should_stop(self.config, self.schedule, position, self.early_stopping,
                           self.reporter)

    def finish(self) -> None:
        try:
            self.holder.settle()
        finally:  # the writer's thread ends with the run, failed or not
            if self.writer is not None:
                self.writer.shutdown()

    def finish_averaging(self) -> None:
        self.holder.committed_version = finish_averaging(
            self.store, self.config, self.holder.committed_version, self.reporter)

    def _commit(self, version: int, position: ChunkPosition,
                stats: list[dict[str, Any]]) -> None:
        self.store.commit(version, self.config.to_dict(), stats=stats,
                          preserve_as=preserved_as(self.config, self.schedule, position))

    def _publish(self, version: int, position: ChunkPosition, stats: list[dict[str, Any]],
                 started: float) -> None:
        publish_checkpoint(self.schedule, self.store, version, position, self.reporter,
                           time.monotonic() - started, stats)


def preserved_as(config: ConfigSchema, schedule: TrainingSchedule,
                 position: ChunkPosition) -> int | None:
    """The epoch count under which the checkpoint ending `position` is kept in `epoch_N/`
    (None: it is not), as `checkpoint_preservation_interval` says."""
    epochs_done = position.epoch_idx + 1
    if schedule.ends_epoch(position) and should_preserve(
            epochs_done, config.checkpoint_preservation_interval):
        return epochs_done
    return None


def publish_checkpoint(schedule: TrainingSchedule, store: CheckpointStore, version: int,
                       position: ChunkPosition, reporter: Reporter, commit_seconds: float,
                       stats: list[dict[str, Any]]) -> None:
    """After `version` is committed: hand its bucket `stats` to the listeners (experiment
    tracking: first, so that a listener that stops training at the announcement, as a tune's
    pruner does, leaves the curves whole), announce it (with the share of the whole run it
    completes, which a watcher cannot compute when num_edge_chunks comes from the data, and
    the `commit_seconds` its partitions, model and commit took to write), then finish the
    commit (the stats appended, its epoch copy made: see CheckpointStore.commit)."""
    reporter.notify(CHUNK_STATS, **{EPOCH: position.epoch_idx + 1, STATS: stats,
                                    EPOCH_ENDED: schedule.ends_epoch(position)})
    reporter.event(CHECKPOINT_COMMITTED, **{
        CHECKPOINT_VERSION: version, EPOCH: position.epoch_idx + 1,
        "edge_path": position.edge_path_idx, "edge_chunk": position.edge_chunk_idx,
        CHUNKS_DONE: schedule.index_of(position) + 1, CHUNKS_TOTAL: schedule.num_positions,
        COMMIT_SECONDS: round(commit_seconds, 3)})
    store.finish_commit()


def should_stop(config: ConfigSchema, schedule: TrainingSchedule, position: ChunkPosition,
                early_stopping: EarlyStopping, reporter: Reporter) -> bool:
    """Whether early stopping ends the run after `position` (only at the end of an epoch)."""
    if not (config.early_stopping and schedule.ends_epoch(position)
            and early_stopping.epoch_ended()):
        return False
    report_early_stop(reporter, position)
    return True


def report_early_stop(reporter: Reporter, position: ChunkPosition) -> None:
    """The event that says early stopping ended the run after `position`'s epoch."""
    reporter.event("early stopping: the held-out loss went up", epoch=position.epoch_idx + 1)

