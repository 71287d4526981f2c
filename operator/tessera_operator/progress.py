"""Training progress, read from the JSON lines a trainer pod prints.

Design: the numbers in a job's status (epoch, edges/s, loss, MRR, checkpoint version) come
from the trainer's own log, which `tessera train --log-format json` writes as one JSON object
per line on stderr: progress records at most every few seconds, a `checkpoint committed`
event after every commit and a `training finished` one at the end (`tessera.log_records`
defines them, for the trainer that writes them and for this reader). The operator reads
the tail of the first trainer's log through the API (`pods/log`) and folds its records here,
later records overriding earlier ones. The alternatives were worse: reading
`checkpoint_version.txt` and `training_stats.json` from object storage would give the operator
storage credentials and a storage client for every scheme fsspec knows, against least
privilege; a progress endpoint served by the pods would need a port open to the operator, a
Service and a NetworkPolicy exception. The log is already there, is what a human reads with
`kubectl logs`, and keeps the pods without any inbound access. What a tail does not show (it
is bounded) keeps the value the status had, and so does a read that fails: progress is never
allowed to hold up the job's lifecycle.

Parsing is lenient: a line that is not a JSON object, a record of another task, a field of
the wrong type are skipped, since a log is not an API and a malformed line must not stop
the status from being written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.log_records import (
    BUCKETS_DONE,
    BUCKETS_TOTAL,
    CHECKPOINT_VERSION,
    CHUNKS_DONE,
    CHUNKS_TOTAL,
    DONE,
    EDGES_PER_SECOND,
    EPOCH,
    ETA_SECONDS,
    EVAL_PREFIX,
    EVENT,
    LOSS,
    PROGRESS,
    RATE,
    TIME,
    TOTAL,
    TRAIN_TASK,
    TRAINING_FINISHED,
    is_number,
    parse_epoch,
    parse_record,
)

# The trainer's metric names and the status's (camelCase, as Kubernetes fields are).
METRIC_NAMES = {"mrr": "mrr", "hits@1": "hitsAt1", "hits@10": "hitsAt10",
                "hits@50": "hitsAt50", "mean_rank": "meanRank", "auc": "auc"}


@dataclass(frozen=True)
class TrainingProgress:
    """What the trainer last said about its run; None where it has not said it.

    `unavailable` says why the log could not be read this time; everything else is then
    unknown, and the status keeps what it showed (see `status`)."""

    epoch: int | None = None
    num_epochs: int | None = None
    edges_done: float | None = None
    edges_total: float | None = None
    edges_per_second: float | None = None
    loss: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    buckets_done: int | None = None
    buckets_total: int | None = None
    checkpoint_version: int | None = None
    chunks_done: int | None = None  # edge chunks of the whole run committed, from commits
    chunks_total: int | None = None
    estimated_completion: float | None = None  # Unix time, from the freshest measured rate
    finished: bool = False
    time: float | None = None
    unavailable: str | None = None
    # (time, chunks_done) of the first commit seen: with a later one, it measures the rate.
    first_commit: tuple[float, int] | None = None

    @classmethod
    def unreadable(cls, why: str) -> TrainingProgress:
        return cls(unavailable=why)

    @property
    def fraction_done(self) -> float | None:
        """Share of this trainer's work done (1 once training finished); the edge counts are
        those of this trainer process, so a resumed run's share of the whole run is more
        (see `run_fraction`)."""
        if self.finished:
            return 1.0
        if self.edges_done is None or not self.edges_total:
            return None
        return min(self.edges_done / self.edges_total, 1.0)


def run_fraction(edges_fraction: float | None, chunks_done: int | None,
                 chunks_total: int | None, epoch: int | None,
                 num_epochs: int | None) -> float | None:
    """The share of the whole run done, as the largest of what is known to be done: a
    process's edge share (a resumed process counts only its own part, so it is a lower
    bound), the committed chunks, and the epochs before the one in training. Taking the
    largest keeps the percentage consistent with the epoch whichever was reported last."""
    candidates = [edges_fraction]
    if chunks_done is not None and chunks_total:
        candidates.append(chunks_done / chunks_total)
    if epoch and num_epochs:
        candidates.append((epoch - 1) / num_epochs)
    known = [value for value in candidates if value is not None]
    return min(max(known), 1.0) if known else None


def log_read_failure(status: int | None, error: str) -> str:
    """Why a log read failed, in the words of the status message: the API server's status
    (500/502/503 when it cannot reach the kubelet, 403 when the log permission is
    missing), or the error when there was none."""
    if status == 403:
        return "pod log read refused (HTTP 403): the operator's role needs get on pods/log"
    if status is not None:
        return f"pod log read failed (HTTP {status})"
    return f"pod log read failed ({error})"


def parse_progress(lines: Iterable[str]) -> TrainingProgress:
    """Fold a log (or its tail) into the latest progress it shows."""
    progress = TrainingProgress()
    for line in lines:
        record = parse_record(line)
        if record is not None:
            progress = fold_record(progress, record)
    return progress


def fold_record(progress: TrainingProgress, record: Mapping[str, Any]) -> TrainingProgress:
    """`progress` updated with what one record says."""
    task = record.get(PROGRESS)
    if task is not None and task != TRAIN_TASK:
        return progress  # another command's progress (an import run in the same pod)
    changes: dict[str, Any] = {}
    if task == TRAIN_TASK:
        changes.update(_numbers(record, edges_done=DONE, edges_total=TOTAL,
                                edges_per_second=RATE))
    changes.update(_numbers(record, edges_per_second=EDGES_PER_SECOND, loss=LOSS, time=TIME))
    changes.update(_integers(record, checkpoint_version=CHECKPOINT_VERSION,
                             buckets_done=BUCKETS_DONE, buckets_total=BUCKETS_TOTAL,
                             chunks_done=CHUNKS_DONE, chunks_total=CHUNKS_TOTAL))
    changes.update(_epoch(record.get(EPOCH)))
    changes.update(_completion(progress, record, task == TRAIN_TASK, changes))
    changes.update(_loss_of_bucket(record))
    metrics = {**progress.metrics, **_metrics(record),
               **_metrics(record.get("eval_stats_after") or {}), **_metrics(_eval_fields(record))}
    if metrics != progress.metrics:
        changes["metrics"] = metrics
    if record.get(EVENT) == TRAINING_FINISHED:
        changes["finished"] = True
    return dataclasses.replace(progress, **changes)


def _completion(progress: TrainingProgress, record: Mapping[str, Any], is_progress: bool,
                changes: Mapping[str, Any]) -> dict[str, Any]:
    """When the run will end, from the rate measured up to this record: a progress record
    carries the trainer's own estimate (`eta_s`, from its edges per second); two commits
    give the rate of chunks. The later record's estimate is the fresher one."""
    moment = changes.get("time")
    if moment is None:
        return {}
    if is_progress and is_number(record.get(ETA_SECONDS)):
        return {"estimated_completion": moment + float(record[ETA_SECONDS])}
    done, total = changes.get("chunks_done"), changes.get("chunks_total")
    if done is None or not total:
        return {}
    first = progress.first_commit
    if first is None or done <= first[1] or moment <= first[0]:
        return {"first_commit": (moment, done)}
    rate = (done - first[1]) / (moment - first[0])
    return {"estimated_completion": moment + (total - done) / rate}


def _numbers(record: Mapping[str, Any], **names: str) -> dict[str, float]:
    return {attribute: float(record[key]) for attribute, key in names.items()
            if is_number(record.get(key))}


def _integers(record: Mapping[str, Any], **names: str) -> dict[str, int]:
    return {attribute: int(record[key]) for attribute, key in names.items()
            if is_number(record.get(key)) and float(record[key]).is_integer()}


def _epoch(value: Any) -> dict[str, int]:
    epoch, num_epochs = parse_epoch(value)
    parsed = {} if epoch is None else {"epoch": epoch}
    if epoch is not None and num_epochs is not None:
        parsed["num_epochs"] = num_epochs
    return parsed


def _loss_of_bucket(record: Mapping[str, Any]) -> dict[str, float]:
    """A verbose `bucket trained` event nests its loss in `stats.metrics.loss`."""
    stats = record.get("stats")
    metrics = stats.get("metrics") if isinstance(stats, Mapping) else None
    loss: Any = metrics.get("loss") if isinstance(metrics, Mapping) else None
    return {"loss": float(loss)} if is_number(loss) else {}


def _eval_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run's summary names its last evaluation's metrics `eval_mrr`, `eval_hits@10`..."""
    return {key.removeprefix(EVAL_PREFIX): value for key, value in record.items()
            if key.startswith(EVAL_PREFIX)}


def _metrics(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {name: float(values[key]) for key, name in METRIC_NAMES.items()
            if is_number(values.get(key))}
