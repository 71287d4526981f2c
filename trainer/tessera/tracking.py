"""Experiment tracking: the curves of a training run, as TensorBoard event files
(`tracking: tensorboard`) or as the metrics of an MLflow run (`tracking: mlflow`,
`tessera.mlflow_runs`).

The curves hold the figures training_stats.json gets, no others: when a chunk position's
checkpoint is committed, its bucket chunks' stats go to the `Reporter`'s listeners as one
`chunk stats` record (never printed), and `CurveTracker.record` turns them into points for
the chosen writer. So the training loop makes no tracking calls, and a chunk that a resumed
run trains again (it was never committed) is not drawn twice. Only the process that commits
gets those records: the trainer on one machine, trainer 0 (with every trainer's stats) in a
distributed job.

Two kinds of point, on two x-axes:

- `chunk/*`, one per bucket chunk (a line of training_stats.json), at the edges trained so far
  (those of earlier runs on the checkpoint path included): `loss`, `reg`, `edges_per_s` (the
  chunk's edges over its training seconds) and, with `eval_fraction > 0`, the held-out
  `eval_mrr`, `eval_hits_at_K`, `eval_mean_rank`, `eval_auc`, `eval_loss` after the chunk;
- `epoch/*`, one per epoch, at the epoch's number: the same figures averaged over its chunks
  (weighted by edges, held-out ones by ranked edges), `edges_per_s` from the wall clock.

TensorBoard's files are written with tensorboardX (it needs numpy and protobuf only;
`torch.utils.tensorboard` needs the whole tensorboard package, a web server included). Its
writer queues the events for a thread of its own, which writes them out every
`FLUSH_SECONDS`. Event files are appended to, which object stores cannot do: a log dir there
is written in a local temporary folder, whose files are uploaded at each checkpoint (as far as
written by then) and, complete, at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .errors import BadInputError, TesseraError
from .log_records import CHUNK_STATS, EPOCH, EPOCH_ENDED, EVENT, STATS, is_number
from .stop_signals import Terminated
from .storage.fs import Directory

if TYPE_CHECKING:
    from .config import ConfigSchema
    from .progress import Reporter

_log = logging.getLogger(__name__)

TENSORBOARD = "tensorboard"  # the `tracking` value, and the default folder's name
MLFLOW = "mlflow"  # the `tracking` value
EXTRA = "tracking"  # the pip extra that brings the writer
# Seconds between the writer thread's flushes to disk (what a watching TensorBoard lags by).
FLUSH_SECONDS = 5


def tracking_url(config: ConfigSchema) -> str:
    """Where the event files go: `tracking_path`, else beside the checkpoints."""
    return config.tracking_path or f"{config.checkpoint_path.rstrip('/')}/{TENSORBOARD}"


def is_tracked(config: ConfigSchema) -> bool:
    """Whether the config asks for its runs to be tracked (`tracking` other than none)."""
    return config.tracking in (TENSORBOARD, MLFLOW)


@contextlib.contextmanager
def tracking(config: ConfigSchema, reporter: Reporter, rank: int | None = None, *,
             stopped_by: tuple[type[BaseException], ...] = (),
             parent: CurveWriter | None = None) -> Iterator[CurveTracker | None]:
    """Track the training run of the block as the config says (in a distributed job, only
    trainer 0, which commits, has anything to write); the block gets the tracker, None when
    nothing is tracked. The run ends `FINISHED`, `FAILED`, or `KILLED` when stopped: Ctrl-C,
    SIGTERM or one of `stopped_by` (a tune's pruner) (an MLflow run's status; TensorBoard has
    none). `parent`: the run of a tune's study, which an MLflow run is nested in."""
    if not is_tracked(config) or (rank or 0) > 0:
        yield None
        return
    from .storage.checkpoint import CheckpointStore

    edges = sum(int(line["stats"]["count"])
                for line in CheckpointStore.from_config(config).read_stats())
    tracker = CurveTracker(open_writer(config, resume=edges > 0, parent=parent),
                           edges_before=edges)
    reporter.listeners.append(tracker.record)
    try:
        with ended_by_outcome(tracker.writer, stopped_by):
            yield tracker
    finally:
        reporter.listeners.remove(tracker.record)


@contextlib.contextmanager
def study_tracking(config: ConfigSchema, tune_dir: str, *,
                   resume: bool) -> Iterator[CurveWriter | None]:
    """The run of a tune's study, as the config's tracking says (None: not tracked): the
    parent of the trials' MLflow runs, named after the tune folder; TensorBoard's files at
    the top of the trials' folders. `resume`: the study has earlier trials, and its run goes
    on."""
    if not is_tracked(config):
        yield None
        return
    writer = open_writer(dataclasses.replace(
        config, checkpoint_path=tune_dir, tracking_path=tune_tracking_url(config, tune_dir)),
        resume=resume)
    with ended_by_outcome(writer):
        yield writer


@contextlib.contextmanager
def ended_by_outcome(writer: CurveWriter,
                     stopped_by: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Close the writer when the block ends: `FINISHED`, `KILLED` by Ctrl-C, SIGTERM or one
    of `stopped_by`, else `FAILED`."""
    killed_by: tuple[type[BaseException], ...] = (KeyboardInterrupt, Terminated, *stopped_by)
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    except BaseException as error:
        if isinstance(error, killed_by):
            status = "KILLED"
        raise
    finally:
        writer.close(status)


def open_writer(config: ConfigSchema, *, resume: bool = False,
                parent: CurveWriter | None = None) -> CurveWriter:
    """The writer `tracking` names, ready to take points; `resume`: the checkpoint path
    holds committed chunks, whose curves the writer goes on (an MLflow run is found again);
    `parent`: the writer of the run this one is nested in (MLflow's; TensorBoard nests by
    folder)."""
    if config.tracking == MLFLOW:
        from .mlflow_runs import MlflowRun

        return MlflowRun(config, resume=resume,
                         parent=parent if isinstance(parent, MlflowRun) else None)
    writer_class = summary_writer_class()
    log_dir = Directory.from_config(tracking_url(config), config)
    log_dir.check_writable()
    return TensorBoardFiles(log_dir, writer_class)


def tune_tracking_url(config: ConfigSchema, tune_dir: str) -> str | None:
    """Where a tune's trials track their runs: TensorBoard's files under `tracking_path` or
    `tune/tensorboard` (not in a trial's checkpoints, which are deleted unless it is the best),
    a folder a trial, so that one `--logdir` shows every trial; MLflow's URI as it is."""
    if config.tracking != TENSORBOARD:
        return config.tracking_path
    return (config.tracking_path or f"{tune_dir}/{TENSORBOARD}").rstrip("/")


def trial_tracking_path(config: ConfigSchema, tune_dir: str, trial: str) -> str | None:
    """The `tracking_path` of a tune's trial (see `tune_tracking_url`)."""
    url = tune_tracking_url(config, tune_dir)
    return f"{url}/{trial}" if config.tracking == TENSORBOARD else url


def summary_writer_class() -> Any:
    """tensorboardX's SummaryWriter; missing, a bad input that names the extra to install."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError as error:
        raise BadInputError(f"tracking: {TENSORBOARD} needs the tensorboardX package: "
                            f"pip install 'tessera[{EXTRA}]' (or tensorboardX), or set "
                            "tracking: none") from error
    return SummaryWriter


Point = tuple[str, float, int]  # (name, value, step)


class CurveWriter(Protocol):
    def write(self, points: list[Point]) -> None: ...

    def compare_by(self, values: Mapping[str, Any], figures: Mapping[str, float],
                   step: int) -> None:
        """The values a run was given and the figures it is judged by, at `step` (a tune's
        trial: its sampled values and its validation metrics), to compare runs side by
        side."""

    def close(self, status: str) -> None: ...


class CurveTracker:
    """Turns the `chunk stats` records it is given into points for a writer (see the
    module)."""

    def __init__(self, writer: CurveWriter, *, edges_before: int = 0) -> None:
        self.writer = writer
        self.edges = edges_before  # the x of the chunk points
        self.epoch = EpochTotals()

    def record(self, record: Mapping[str, Any]) -> None:
        """A `Reporter` listener: writes the points of a `chunk stats` record."""
        if record.get(EVENT) != CHUNK_STATS:
            return
        points: list[Point] = []
        for line in record[STATS]:
            self.edges += int(line["stats"]["count"])
            self.epoch.add(line)
            points += [(f"chunk/{name}", value, self.edges)
                       for name, value in chunk_scalars(line).items()]
        if record[EPOCH_ENDED]:
            points += [(f"epoch/{name}", value, int(record[EPOCH]))
                       for name, value in self.epoch.scalars(time.monotonic()).items()]
            self.epoch = EpochTotals()
        self.writer.write(points)

    def close(self, status: str = "FINISHED") -> None:
        self.writer.close(status)


def _event_file_suffix() -> str:
    """tensorboardX names an event file by the second and the host alone: two writers of one
    log dir opened within a second (a continued study, a resumed run) would share a name,
    and the later would truncate the earlier's file. Nanoseconds keep the names apart, and
    sorted in the order the files were opened, the order TensorBoard reads them in."""
    return f".{time.time_ns()}.{os.getpid()}"


class TensorBoardFiles:
    """Writes points as TensorBoard scalars into a log dir, local or uploaded (see the
    module)."""

    def __init__(self, log_dir: Directory, writer_class: Any) -> None:
        self.log_dir = log_dir
        self.writer_class = writer_class
        self._writer: Any = None  # made with the first point: a run with none writes no file
        self._local = ""  # the folder the writer writes in
        self._uploaded: dict[str, int] = {}  # remote log dir: size of each file uploaded

    def write(self, points: list[Point]) -> None:
        writer = self._open()
        for name, value, step in points:
            writer.add_scalar(name, value, step)
        self._upload()

    def compare_by(self, values: Mapping[str, Any], figures: Mapping[str, float],
                   step: int) -> None:
        """The figures as scalars, and with the values as a session of TensorBoard's HParams
        tab, in the run's own event file (`add_hparams` would open a second writer, whose
        file takes the same name when opened within the same second)."""
        from tensorboardX.summary import hparams

        writer = self._open()
        for summary in hparams(dict(values), dict(figures)):
            writer.file_writer.add_summary(summary)
        for name, value in figures.items():
            writer.add_scalar(name, value, step)
        self._upload()

    def close(self, status: str = "FINISHED") -> None:
        """Write what is queued and, for a remote log dir, upload it (whatever the run's
        `status`: the curves up to a failure are worth as much)."""
        if self._writer is None:
            return
        self._writer.close()
        self._upload()
        if not self.log_dir.is_local:
            shutil.rmtree(self._local, ignore_errors=True)

    def _open(self) -> Any:
        if self._writer is None:
            self._local = self.log_dir.root if self.log_dir.is_local \
                else tempfile.mkdtemp(prefix="tessera-tensorboard-")
            self._writer = self.writer_class(self._local, flush_secs=FLUSH_SECONDS,
                                             filename_suffix=_event_file_suffix())
        return self._writer

    def _upload(self) -> None:
        """Copy the event files that grew to the remote log dir (each file whole: object
        stores cannot append). A failure is logged and tried again at the next checkpoint:
        tracking never stops a training run."""
        if self.log_dir.is_local:
            return
        local = Directory(self._local)
        try:
            for name in local.listdir():
                size = os.path.getsize(local.path(name))
                if self._uploaded.get(name) != size:
                    local.copy(name, self.log_dir)
                    self._uploaded[name] = size
        except (TesseraError, OSError) as error:
            _log.warning("tracking files not uploaded", extra={"fields": {
                "tracking_path": self.log_dir.url, "error": str(error)}})


def chunk_scalars(line: Mapping[str, Any]) -> dict[str, float]:
    """The figures of one training_stats.json line, by tag name (NaN and missing ones left
    out: a held-out set too small to rank has no MRR)."""
    count, seconds = line["stats"]["count"], line.get("seconds") or 0
    figures: dict[str, Any] = dict(line["stats"]["metrics"])
    if seconds > 0:
        figures["edges_per_s"] = count / seconds
    figures.update(eval_figures(line))
    return {tag_name(name): float(value) for name, value in figures.items() if is_number(value)}


def eval_figures(line: Mapping[str, Any]) -> dict[str, Any]:
    """The held-out metrics after the chunk, `eval_` before each name (`eval_mrr`)."""
    after = line.get("eval_stats_after") or {}
    return {f"eval_{name}": value for name, value in after.items() if name != "count"}


def tag_name(name: str) -> str:
    """A TensorBoard tag for a stats name: `hits@10` -> `hits_at_10` (`@` is not allowed)."""
    return name.replace("@", "_at_")


class EpochTotals:
    """The weighted sums an epoch's averages come from."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.edges = 0
        self.ranked = 0  # held-out rows ranked (the weight of the eval figures)
        self.sums: dict[str, float] = {}

    def add(self, line: Mapping[str, Any]) -> None:
        count = int(line["stats"]["count"])
        ranked = int((line.get("eval_stats_after") or {}).get("count") or 0)
        self.edges += count
        self.ranked += ranked
        for name, value in line["stats"]["metrics"].items():
            self._add(name, value, count)
        for name, value in eval_figures(line).items():
            self._add(name, value, ranked)

    def scalars(self, now: float) -> dict[str, float]:
        """The epoch's averages, and its rate by the wall clock up to `now`."""
        figures = {name: total / (self.ranked if name.startswith("eval_") else self.edges)
                   for name, total in self.sums.items()}
        if now > self.started:
            figures["edges_per_s"] = self.edges / (now - self.started)
        return {tag_name(name): value for name, value in figures.items()
                if math.isfinite(value)}

    def _add(self, name: str, value: Any, weight: int) -> None:
        if is_number(value) and weight > 0:
            self.sums[name] = self.sums.get(name, 0.0) + float(value) * weight
