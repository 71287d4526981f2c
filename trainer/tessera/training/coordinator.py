"""The single-machine training run: the epoch loop, partition swapping and checkpoints.

A run is a sequence of chunk positions (epoch, edge set, chunk); each trains every bucket
once and ends with an atomic checkpoint whose metadata records the position, so a restarted
run on the same checkpoint_path continues with the next position.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any

from ..config import ConfigSchema
from ..errors import BadInputError
from ..model import EmbeddingModel
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore, should_preserve
from ..storage.fs import Directory
from .bucket_trainer import BucketOutcome, BucketTrainer, partition_keys
from .graph_data import GraphData, check_edge_paths
from .hogwild import HogwildPool
from .model_checkpoint import load_model, save_model
from .optimizers import make_model_optimizer
from .partitions import PartitionHolder
from .schedule import ChunkPosition, TrainingSchedule, TrainingStep, num_edge_chunks
from .worker import ModelState, train_part


@dataclass(frozen=True)
class TrainingSummary:
    edges: int
    seconds: float
    checkpoint_version: int
    checkpoint_path: str
    last_loss: float | None
    last_eval: dict[str, float] | None

    @property
    def edges_per_second(self) -> float:
        return self.edges / self.seconds if self.seconds else 0.0


def train(config: ConfigSchema, reporter: Reporter) -> TrainingSummary:
    """Train (or resume training) as the config says; returns what was done."""
    check_supported(config)
    data = GraphData(config)
    data.entity_counts  # noqa: B018 - read first: a missing entity_path is the likeliest error
    store = CheckpointStore(Directory(config.checkpoint_path, config.storage_options))
    store.remove_uncommitted()
    version = store.current_version()
    init = CheckpointStore(Directory(config.init_path, config.storage_options)) \
        if config.init_path else None
    schedule = TrainingSchedule.from_config(config, num_edge_chunks(config,
                                                                    data.max_bucket_size()))
    start = resume_position(store, version, schedule)
    model = EmbeddingModel(config, data.num_relations)
    optimizer = make_model_optimizer(model, config)
    if version > 0:
        load_model(store, version, model, optimizer)
    elif init is not None:
        load_model(init, None, model, optimizer)
    state = ModelState(model.share_memory(),
                       optimizer.share_memory() if optimizer is not None else None)
    run = TrainingRun(config, data, store, schedule, state,
                      PartitionHolder(config, data.entity_counts, store, init, version), reporter)
    return run.run(start)


def check_supported(config: ConfigSchema) -> None:
    check_edge_paths(config)
    if config.num_gpus > 0:
        raise BadInputError("num_gpus: Tessera trains on CPUs; set num_gpus: 0")
    if config.num_machines > 1:
        raise BadInputError("num_machines: this command trains on one machine; set "
                            "num_machines: 1")


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


def iteration_metadata(config: ConfigSchema, schedule: TrainingSchedule,
                       position: ChunkPosition) -> dict[str, Any]:
    """PBG's checkpoint metadata attributes for a chunk position."""
    return {"config/json": json.dumps(config.to_dict()),
            "iteration/num_epochs": schedule.num_epochs,
            "iteration/epoch_idx": position.epoch_idx,
            "iteration/num_edge_paths": schedule.num_edge_paths,
            "iteration/edge_path_idx": position.edge_path_idx,
            "iteration/edge_path": config.edge_paths[position.edge_path_idx],
            "iteration/num_edge_chunks": schedule.num_edge_chunks,
            "iteration/edge_chunk_idx": position.edge_chunk_idx}


class TrainingRun:
    """Drives one run from a start position to the end, one checkpoint per chunk position."""

    def __init__(self, config: ConfigSchema, data: GraphData, store: CheckpointStore,
                 schedule: TrainingSchedule, state: ModelState, holder: PartitionHolder,
                 reporter: Reporter) -> None:
        self.config = config
        self.data = data
        self.store = store
        self.schedule = schedule
        self.state = state
        self.holder = holder
        self.reporter = reporter
        self.num_workers = config.workers or os.cpu_count() or 1
        self.buckets_done = self.buckets_total = 0  # progress of this invocation

    def run(self, start: ChunkPosition | None) -> TrainingSummary:
        positions = list(self.schedule.positions(start)) if start is not None else []
        total = self._edges_per_position() * len(positions)
        pool = HogwildPool(self.num_workers, train_part, self.state) \
            if self.num_workers > 1 and positions else None
        trainer = BucketTrainer(self.config, self.data, self.state, pool, self.num_workers,
                                self.schedule.num_edge_chunks)
        last: BucketOutcome | None = None
        early_stopping = EarlyStopping()
        self.buckets_done, self.buckets_total = 0, len(positions) * len(self.data.bucket_grid())
        with self.reporter.task("train", total=total or None, unit="edges") as task, \
                pool or contextlib.nullcontext():
            for position in positions:
                outcomes = [self._train_step(trainer, position, bucket, task)
                            for bucket in self.schedule.buckets(position)]
                self._checkpoint(position, outcomes)
                last = outcomes[-1] if outcomes else last
                early_stopping.add(outcomes)
                if self.config.early_stopping and self._ends_epoch(position) \
                        and early_stopping.epoch_ended():
                    self.reporter.event("early stopping: the held-out loss went up",
                                        epoch=position.epoch_idx + 1)
                    break
            done, seconds = task.done, task.elapsed
        summary = TrainingSummary(
            edges=int(done), seconds=seconds,
            checkpoint_version=self.holder.committed_version,
            checkpoint_path=self.config.checkpoint_path,
            last_loss=last.loss if last else None,
            last_eval=last.eval_after if last else None)
        rows: dict[str, Any] = {
            "edges": summary.edges, "seconds": round(seconds, 2),
            "edges_per_s": round(summary.edges_per_second),
            "loss": None if summary.last_loss is None else round(summary.last_loss, 5)}
        rows.update({f"eval_{k}": round(v, 4) for k, v in (summary.last_eval or {}).items()})
        rows.update(checkpoint_version=summary.checkpoint_version,
                    checkpoint=summary.checkpoint_path)
        self.reporter.summary("training finished", rows)
        return summary

    def _train_step(self, trainer: BucketTrainer, position: ChunkPosition, bucket: Any,
                    task: Any) -> BucketOutcome:
        step = TrainingStep(position.epoch_idx, position.edge_path_idx,
                            position.edge_chunk_idx, bucket)
        lhs_keys, rhs_keys = partition_keys(self.data, bucket)
        metadata = iteration_metadata(self.config, self.schedule, position)
        partitions = self.holder.hold(set(lhs_keys) | set(rhs_keys), metadata)
        first_ever = position == self.schedule.position_at(0) and task.done == 0
        outcome = trainer.train(step, partitions,
                                self.config.hogwild_delay if first_ever else 0.0)
        self.buckets_done += 1
        fields: dict[str, Any] = {"epoch": f"{position.epoch_idx + 1}/{self.schedule.num_epochs}",
                                  "bucket": str(bucket), "buckets_done": self.buckets_done,
                                  "buckets_total": self.buckets_total,
                                  "loss": round(outcome.loss, 5)}
        if outcome.eval_after:
            fields["mrr"] = round(outcome.eval_after["mrr"], 4)
        task.advance(outcome.count, **fields)
        if self.config.verbose:
            self.reporter.event("bucket trained", **outcome.record())
        return outcome

    def _checkpoint(self, position: ChunkPosition, outcomes: list[BucketOutcome]) -> None:
        metadata = iteration_metadata(self.config, self.schedule, position)
        version = self.holder.next_version
        self.holder.write_all(metadata)
        save_model(self.store, version, self.state.model, self.state.optimizer, metadata)
        self.store.commit(version, self.config.to_dict())
        self.holder.committed()
        self.reporter.event("checkpoint committed", checkpoint_version=version,
                            epoch=position.epoch_idx + 1, edge_path=position.edge_path_idx,
                            edge_chunk=position.edge_chunk_idx)
        self.store.append_stats([outcome.record() for outcome in outcomes])
        epochs_done = position.epoch_idx + 1
        if self._ends_epoch(position) and should_preserve(epochs_done,
                                            self.config.checkpoint_preservation_interval):
            self.store.preserve(epochs_done)

    def _ends_epoch(self, position: ChunkPosition) -> bool:
        return (position.edge_path_idx == self.schedule.num_edge_paths - 1
                and position.edge_chunk_idx == self.schedule.num_edge_chunks - 1)

    def _edges_per_position(self) -> int:
        """Training edges of one chunk position, averaged over edge sets (for the ETA)."""
        totals = [sum(sizes.values()) for sizes in self.data.bucket_sizes]
        train_share = 1 - self.config.eval_fraction
        return int(sum(totals) / len(totals) / self.schedule.num_edge_chunks * train_share)


class EarlyStopping:
    """PBG's early_stopping: stop after an epoch whose mean held-out loss is above the
    previous epoch's (needs eval_fraction > 0; without held-out edges it never stops)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.previous: float | None = None

    def add(self, outcomes: list[BucketOutcome]) -> None:
        self.losses += [o.eval_after["loss"] for o in outcomes
                        if o.eval_after and "loss" in o.eval_after]

    def epoch_ended(self) -> bool:
        """Close the epoch; True if training should stop."""
        if not self.losses:
            return False
        mean = sum(self.losses) / len(self.losses)
        worse = self.previous is not None and mean > self.previous
        self.previous, self.losses = mean, []
        return worse
