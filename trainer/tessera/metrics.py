"""Prometheus metrics of a Tessera process, served at `/metrics` when asked (`--metrics-port`).

The training figures are not measured here: they are what the trainer already reports (the
`Reporter`'s progress records and events, once per bucket and per checkpoint), folded into
gauges by `TrainingMetrics`, so the training code has no metric calls of its own and the
Hogwild workers never touch a metric. The storage layer counts the bytes it moves
(`storage.fs.Directory`), the one place every read and write passes through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import Counter, Histogram, start_http_server
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .log_records import (
    BUCKETS_DONE,
    BUCKETS_TOTAL,
    CHECKPOINT_COMMITTED,
    CHECKPOINT_VERSION,
    COMMIT_SECONDS,
    DONE,
    EDGES_PER_SECOND,
    EPOCH,
    EVAL_PREFIX,
    EVENT,
    LOSS,
    MRR,
    PROGRESS,
    RATE,
    TRAIN_TASK,
    TRAINING_FINISHED,
    is_number,
    parse_epoch,
)

_log = logging.getLogger(__name__)

STORAGE_READ_BYTES = Counter(
    "tessera_storage_read_bytes", "Bytes this process read from storage through Tessera's "
    "storage layer (HDF5 files on a local disk, which HDF5 reads by path, are not counted)")
STORAGE_WRITTEN_BYTES = Counter(
    "tessera_storage_written_bytes", "Bytes of the files this process published to storage")
EDGES_TRAINED = Counter(
    "tessera_train_edges", "Edges trained since this process started (the whole job's, as "
    "this trainer learns of them)")
COMMIT_SECONDS_HISTOGRAM = Histogram(
    "tessera_checkpoint_commit_seconds", "Time to write and commit a checkpoint version",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))

# (attribute, metric name, help) of the gauges, exported once the trainer has reported them.
GAUGES = (
    ("edges_per_second", "tessera_train_edges_per_second",
     "Edges trained per second by this process's run so far"),
    ("loss", "tessera_train_loss", "Training loss of the last bucket"),
    ("mrr", "tessera_train_mrr",
     "Held-out MRR after the last bucket (only with eval_fraction > 0)"),
    ("epoch", "tessera_train_epoch", "Epoch being trained (1-based)"),
    ("num_epochs", "tessera_train_epochs", "Epochs of the run"),
    ("buckets_done", "tessera_train_buckets_done",
     "Buckets trained since this process started"),
    ("buckets_scheduled", "tessera_train_buckets_scheduled",
     "Buckets this process's invocation has to train"),
    ("checkpoint_version", "tessera_checkpoint_version", "Last committed checkpoint version"),
    ("committed_at", "tessera_checkpoint_last_commit_timestamp_seconds",
     "Unix time of the last checkpoint commit"),
)


class TrainingMetrics(Collector):
    """The latest training figures; `record` is a `Reporter` listener, `collect` is what a
    scrape sees. A figure not reported yet is left out rather than shown as 0 (an MRR of 0
    would read as a broken model, not as "no evaluation")."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self._edges_done = 0.0

    def record(self, record: Mapping[str, Any]) -> None:
        """Fold one progress record or event, as the Reporter would print it."""
        task, event = record.get(PROGRESS), record.get(EVENT)
        if task == TRAIN_TASK:
            self._progress(record)
        elif event == CHECKPOINT_COMMITTED:
            self._set(record, checkpoint_version=CHECKPOINT_VERSION)
            self.values["committed_at"] = time.time()
            if is_number(record.get(COMMIT_SECONDS)):
                COMMIT_SECONDS_HISTOGRAM.observe(float(record[COMMIT_SECONDS]))
        elif event == TRAINING_FINISHED:
            self._set(record, checkpoint_version=CHECKPOINT_VERSION,
                      edges_per_second=EDGES_PER_SECOND, mrr=EVAL_PREFIX + MRR)

    def collect(self) -> Iterator[Metric]:
        values = dict(self.values)  # a copy: the training thread may add one meanwhile
        for attribute, name, documentation in GAUGES:
            if attribute in values:
                yield GaugeMetricFamily(name, documentation, value=values[attribute])

    def _progress(self, record: Mapping[str, Any]) -> None:
        if is_number(record.get(DONE)):
            done = float(record[DONE])
            EDGES_TRAINED.inc(max(done - self._edges_done, 0.0))
            self._edges_done = max(done, self._edges_done)
        self._set(record, edges_per_second=RATE, loss=LOSS, mrr=MRR,
                  buckets_done=BUCKETS_DONE, buckets_scheduled=BUCKETS_TOTAL)
        epoch, num_epochs = parse_epoch(record.get(EPOCH))
        if epoch is not None:
            self.values["epoch"] = float(epoch)
        if num_epochs is not None:
            self.values["num_epochs"] = float(num_epochs)

    def _set(self, record: Mapping[str, Any], **keys: str) -> None:
        for attribute, key in keys.items():
            if is_number(record.get(key)):
                self.values[attribute] = float(record[key])


def serve(address: tuple[str, int]) -> TrainingMetrics | None:
    """Serve /metrics at `address` and return the collector to feed; None when the port
    cannot be had (logged: metrics must never stop a training run)."""
    host, port = address
    try:
        start_http_server(port, addr=host)
    except OSError as error:
        _log.warning("metrics not served", extra={"fields": {
            "address": f"{host}:{port}", "error": str(error)}})
        return None
    metrics = TrainingMetrics()
    REGISTRY.register(metrics)
    return metrics
