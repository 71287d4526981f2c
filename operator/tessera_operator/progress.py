"""Training progress, read from the JSON lines a trainer pod prints.

Design: the numbers in a job's status (epoch, edges/s, loss, MRR, checkpoint version) come
from the trainer's own log, which `tessera train --log-format json` writes as one JSON object
per line on stderr: `{"progress": "train", "done", "total", "rate", "epoch": "3/50", "loss",
"mrr", "time"}` at most every few seconds, and events such as `{"event": "training finished",
"checkpoint_version", "edges_per_s"}`. The operator reads the tail of the first trainer's log
through the API (`pods/log`) and folds its records here, later records overriding earlier
ones. The alternatives were worse: reading `checkpoint_version.txt` and `training_stats.json`
from object storage would give the operator storage credentials and a storage client for
every scheme fsspec knows, against least privilege; a progress endpoint served by the pods
would need a port open to the operator, a Service and a NetworkPolicy exception. The log is
already there, is what a human reads with `kubectl logs`, and keeps the pods without any
inbound access. What a tail does not show (it is bounded) keeps the value the status had.

Parsing is lenient: a line that is not a JSON object, a record of another task, a field of
the wrong type are skipped, since a log is not an API and a malformed line must not stop
the status from being written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TRAIN_TASK = "train"
FINISHED_EVENT = "training finished"
# The trainer's metric names and the status's (camelCase, as Kubernetes fields are).
METRIC_NAMES = {"mrr": "mrr", "hits@1": "hitsAt1", "hits@10": "hitsAt10",
                "hits@50": "hitsAt50", "mean_rank": "meanRank", "auc": "auc"}


@dataclass(frozen=True)
class TrainingProgress:
    """What the trainer last said about its run; None where it has not said it."""

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
    finished: bool = False
    time: float | None = None

    @property
    def fraction_done(self) -> float | None:
        """Share of this trainer's work done (1 once training finished)."""
        if self.finished:
            return 1.0
        if self.edges_done is None or not self.edges_total:
            return None
        return min(self.edges_done / self.edges_total, 1.0)


def json_record(line: str) -> dict[str, Any] | None:
    """The JSON object a log line holds, or None for any other line."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def parse_progress(lines: Iterable[str]) -> TrainingProgress:
    """Fold a log (or its tail) into the latest progress it shows."""
    progress = TrainingProgress()
    for line in lines:
        record = json_record(line)
        if record is not None:
            progress = fold_record(progress, record)
    return progress


def fold_record(progress: TrainingProgress, record: Mapping[str, Any]) -> TrainingProgress:
    """`progress` updated with what one record says."""
    task = record.get("progress")
    if task is not None and task != TRAIN_TASK:
        return progress  # another command's progress (an import run in the same pod)
    changes: dict[str, Any] = {}
    if task == TRAIN_TASK:
        changes.update(_numbers(record, edges_done="done", edges_total="total",
                                edges_per_second="rate"))
    changes.update(_numbers(record, edges_per_second="edges_per_s", loss="loss", time="time"))
    changes.update(_integers(record, checkpoint_version="checkpoint_version",
                             buckets_done="buckets_done", buckets_total="buckets_total"))
    changes.update(_epoch(record.get("epoch")))
    changes.update(_loss_of_bucket(record))
    metrics = {**progress.metrics, **_metrics(record),
               **_metrics(record.get("eval_stats_after") or {}), **_metrics(_eval_fields(record))}
    if metrics != progress.metrics:
        changes["metrics"] = metrics
    if record.get("event") == FINISHED_EVENT:
        changes["finished"] = True
    return dataclasses.replace(progress, **changes)


def _numbers(record: Mapping[str, Any], **names: str) -> dict[str, float]:
    return {attribute: float(record[key]) for attribute, key in names.items()
            if _is_number(record.get(key))}


def _integers(record: Mapping[str, Any], **names: str) -> dict[str, int]:
    return {attribute: int(record[key]) for attribute, key in names.items()
            if _is_number(record.get(key)) and float(record[key]).is_integer()}


def _epoch(value: Any) -> dict[str, int]:
    """`"3/50"` (what the trainer prints) or a plain epoch number."""
    if _is_number(value):
        return {"epoch": int(value)}
    if isinstance(value, str):
        epoch, _, total = value.partition("/")
        if epoch.strip().isdigit():
            parsed = {"epoch": int(epoch)}
            if total.strip().isdigit():
                parsed["num_epochs"] = int(total)
            return parsed
    return {}


def _loss_of_bucket(record: Mapping[str, Any]) -> dict[str, float]:
    """A verbose `bucket trained` event nests its loss in `stats.metrics.loss`."""
    stats = record.get("stats")
    metrics = stats.get("metrics") if isinstance(stats, Mapping) else None
    loss: Any = metrics.get("loss") if isinstance(metrics, Mapping) else None
    return {"loss": float(loss)} if _is_number(loss) else {}


def _eval_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run's summary names its last evaluation's metrics `eval_mrr`, `eval_hits@10`..."""
    return {key.removeprefix("eval_"): value for key, value in record.items()
            if key.startswith("eval_")}


def _metrics(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {name: float(values[key]) for key, name in METRIC_NAMES.items()
            if _is_number(values.get(key))}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and value == value and abs(value) != float("inf")
