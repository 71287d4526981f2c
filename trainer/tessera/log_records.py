"""The JSON lines a trainer prints that other programs read: the trainer -> operator contract.

`tessera train --log-format json` writes one JSON object per line. The operator folds the
first trainer's log into the job's status (`tessera_operator.progress`) and the trainer's own
Prometheus gauges fold the same records (`tessera.metrics`), so the record kinds and the keys
those readers rely on are named here, once, free of torch. Two kinds of record:

- a progress record, at most every few seconds: `{"progress": "train", "done", "total",
  "rate", "eta_s", "epoch": "3/50", "loss", "mrr", "buckets_done", "buckets_total"}`;
- an event: `{"event": "checkpoint committed", "checkpoint_version", "epoch", "chunks_done",
  "chunks_total", "commit_seconds"}` after every commit, and at the end `{"event": "training
  finished", "checkpoint_version", "edges_per_s", "loss", "eval_mrr"...}`; a run that resumes
  starts with `{"event": "resuming from a checkpoint", "checkpoint_version", "epoch",
  "chunks_done", "chunks_total"}`, or, with every epoch done, with `{"event": "nothing to
  train: ...", "checkpoint_version", "num_epochs"}`.

Every printed record starts with `"time"` (Unix seconds).
"""

from __future__ import annotations

import json
from typing import Any

# What a record is.
EVENT = "event"
PROGRESS = "progress"
TIME = "time"

# The task and events the readers look for.
TRAIN_TASK = "train"
CHECKPOINT_COMMITTED = "checkpoint committed"
# The version after a weight-averaged run's last checkpoint (with `checkpoint_version`, and
# `averaged_checkpoints`: how many the mean is of).
AVERAGED_MODEL_COMMITTED = "averaged model committed"
TRAINING_FINISHED = "training finished"
RESUMING = "resuming from a checkpoint"
# A rerun whose config differs from its checkpoint's (with `keys`, the top-level keys changed).
CONFIG_CHANGED = "the config differs from the checkpoint's: training goes on with its values"
# A rerun whose edge_paths changed (with `edge_set`, `edge_path`: where it goes on, if anywhere).
# PBG's rule: the checkpoint's position (epoch, edge set index, chunk) holds, not the path names,
# so edge sets added before that position wait for the next epoch, or are never trained.
EDGE_PATHS_CHANGED = ("edge_paths differ from the checkpoint's: training goes on from its "
                      "position in the new list; to train every edge set from the first epoch, "
                      "train into a new checkpoint_path with init_path set to this one")
# A rerun whose checkpoint has every epoch already (with `checkpoint_version`, `num_epochs`).
NOTHING_TO_TRAIN = "nothing to train: the checkpoint has every epoch (raise num_epochs to train on)"
EVALUATION_FINISHED = "evaluation finished"  # `tessera eval`'s result, also printed on stdout
# An event for the Reporter's listeners only, never printed (too long for a log line): a
# committed chunk position's training_stats.json lines (`stats`), with its 1-based `epoch` and
# whether it ended that epoch, for experiment tracking (`tessera.tracking`).
CHUNK_STATS = "chunk stats"
STATS = "stats"
EPOCH_ENDED = "epoch_ended"

# Keys of a progress record.
DONE = "done"
TOTAL = "total"
RATE = "rate"
ETA_SECONDS = "eta_s"
# Keys the training task's progress records and its events add.
EPOCH = "epoch"  # "3/50" in progress records (see `epoch_text`), a number in events
LOSS = "loss"
MRR = "mrr"
BUCKETS_DONE = "buckets_done"
BUCKETS_TOTAL = "buckets_total"
CHECKPOINT_VERSION = "checkpoint_version"
CHUNKS_DONE = "chunks_done"
CHUNKS_TOTAL = "chunks_total"
COMMIT_SECONDS = "commit_seconds"
EDGES_PER_SECOND = "edges_per_s"
# The summary's figures of a run on a device (`num_gpus`): the device's time in the batch
# loops (CUDA events), and the peak memory torch allocated on it.
DEVICE_BUSY_SECONDS = "device_busy_s"
DEVICE_PEAK_MEMORY_GB = "device_peak_memory_gb"
# The summary's time training waited for partitions to be read or written (not hidden behind
# the previous bucket's training).
PARTITION_WAIT_SECONDS = "partition_wait_s"
# Apart from the training time: the process's age when training began, and the time the
# run's checkpoints took (written and committed while training waited).
STARTUP_SECONDS = "startup_s"
STEP = "step"  # the summary's name of the run's step implementation (`training.steps`)
# On a device, the memory that holds the partitions: the device's (`holder_device`), or "host".
PARTITIONS_HELD_IN = "partitions_held_in"
CHECKPOINT_SECONDS = "checkpoint_s"
EVAL_PREFIX = "eval_"  # the summary's metrics of the last evaluation: eval_mrr, eval_hits@10


def event_record(event: str, **fields: Any) -> dict[str, Any]:
    """An event record (`checkpoint committed`...), without its time."""
    return {EVENT: event, **fields}


def progress_record(task: str, done: float, total: float | None, rate: float,
                    eta_seconds: float | None, **fields: Any) -> dict[str, Any]:
    """A progress record of `task`, without its time."""
    return {PROGRESS: task, DONE: done, TOTAL: total, RATE: rate, ETA_SECONDS: eta_seconds,
            **fields}


def json_line(record: dict[str, Any], time: float) -> str:
    """The line a record is printed as, its time first."""
    return json.dumps({TIME: round(time, 3), **record}, default=str)


def parse_record(line: str) -> dict[str, Any] | None:
    """The record a log line holds, or None for any other line (a log is not an API: a
    malformed or foreign line is skipped, never an error)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def epoch_text(epoch: int, num_epochs: int) -> str:
    """The `epoch` of a progress record: the 1-based epoch being trained and the run's
    number of epochs."""
    return f"{epoch}/{num_epochs}"


def parse_epoch(value: Any) -> tuple[int | None, int | None]:
    """(epoch, num_epochs) from an `epoch` field: `"3/50"`, or a plain number as events
    carry; None where it does not say."""
    if is_number(value):
        return int(value), None
    if isinstance(value, str):
        epoch, _, total = value.partition("/")
        if epoch.strip().isdigit():
            return int(epoch), int(total) if total.strip().isdigit() else None
    return None, None


def is_number(value: Any) -> bool:
    """Whether a field holds a finite number (JSON's booleans are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and value == value and abs(value) != float("inf")
