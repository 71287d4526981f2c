"""One trial of `tessera tune`: train a config into a folder of its own, then judge it by the
filtered MRR of the validation edge set.

Training runs in this process, reporting to a quiet `Reporter` whose listener sees each
bucket's progress record (loss, held-out MRR when `eval_fraction` > 0) and each committed
checkpoint. At the end of an epoch the listener reports a figure to the Optuna trial: every
`Judging.every` epochs the filtered validation MRR of the checkpoint just committed, else the
epoch's mean held-out MRR. It raises `TrialPruned` there, as Ctrl-C raises KeyboardInterrupt,
when the pruner gives up on the trial: training stops as it stops for any error, its workers
ended and its lease released.

With `tracking` on, a trial's run is tracked as `tessera train`'s is, where
`tracking.trial_tracking_path` says, with its validation MRRs as points and, at the end, its
validation metrics and sampled values to compare trials by; a pruned trial's run ends KILLED,
a diverged one's FAILED.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import resource_sharer
from typing import Any

import optuna

from ..config import ConfigSchema
from ..evaluation.command import evaluate_checkpoint
from ..log_records import (
    BUCKETS_DONE,
    CHECKPOINT_COMMITTED,
    CHUNKS_DONE,
    CHUNKS_TOTAL,
    EVENT,
    LOSS,
    MRR,
    PROGRESS,
    TRAIN_TASK,
    is_number,
)
from ..progress import Reporter
from ..tracking import CurveWriter, tag_name, tracking
from ..training.coordinator import train

# What a trial reports to the pruner (its user attribute REPORTED says which).
VALID_MRR = "valid_mrr"
HELD_OUT_MRR = "held_out_mrr"
REPORTED = "reported"
VALID_METRICS = "valid_metrics"  # a complete trial's user attribute: its validation metrics
VALID_TAG = "valid"  # the prefix of the validation metrics in a trial's tracked curves

# The validation MRR given to a trial whose loss stopped being a number: its scores are NaN,
# and a NaN score outranks nothing, which would read as a perfect MRR.
DIVERGED_MRR = 0.0


@dataclass(frozen=True)
class Judging:
    """How every trial is judged: the validation edge set, ranked filtered."""

    valid_path: str
    filter_paths: tuple[str, ...]  # other known true edges, besides training's and valid's
    # Epochs between the filtered validation MRRs a trial reports to the pruner; 0: none (the
    # pruner has the held-out MRR of eval_fraction, if any).
    every: int = 0


class Diverged(Exception):  # noqa: N818 - named as what happened to the trial
    """The training loss became NaN or infinite: the trial cannot get better."""


class EpochReports:
    """A listener of a trial's training: forwards its progress, and reports an MRR to the
    Optuna trial at the end of epochs (`judge`'s every `every` epochs, else the held-out
    one), stopping the trial where the pruner says."""

    def __init__(self, trial: optuna.Trial, num_epochs: int,
                 on_progress: Callable[[dict[str, Any]], None],
                 judge: Callable[[int], float] | None = None, every: int = 0) -> None:
        self.trial = trial
        self.num_epochs = max(num_epochs, 1)
        self.on_progress = on_progress
        self.judge = judge  # the newest checkpoint's filtered validation MRR, at an epoch
        self.every = every
        self.mrrs: dict[int, float] = {}  # held-out MRR by buckets_done, this epoch
        # Buckets done by the last epoch reported: a record repeats the last bucket's fields
        # until the next bucket ends (the live line moves during a bucket too).
        self.reported_through = 0
        self.diverged = False

    def __call__(self, record: dict[str, Any]) -> None:
        if record.get(PROGRESS) == TRAIN_TASK:
            self.on_progress(record)
            buckets = record.get(BUCKETS_DONE)
            if self.judge is None and is_number(record.get(MRR)) \
                    and isinstance(buckets, int) and buckets > self.reported_through:
                self.mrrs[buckets] = record[MRR]
            loss = record.get(LOSS)
            if isinstance(loss, float) and not math.isfinite(loss):
                self.diverged = True
        elif record.get(EVENT) == CHECKPOINT_COMMITTED:
            self._checkpoint_committed(record)

    def _checkpoint_committed(self, record: dict[str, Any]) -> None:
        if self.diverged:
            raise Diverged
        per_epoch = max(int(record[CHUNKS_TOTAL]) // self.num_epochs, 1)
        done = int(record[CHUNKS_DONE])
        if done % per_epoch:
            return  # not the end of an epoch
        epoch = done // per_epoch
        if self.judge is not None:
            if epoch % self.every == 0 and epoch < self.num_epochs:  # the last: the score
                self._report(self.judge(epoch), epoch, VALID_MRR)
        elif self.mrrs:  # held-out edges (eval_fraction > 0)
            mean = sum(self.mrrs.values()) / len(self.mrrs)
            self.reported_through = max(self.mrrs)
            self.mrrs = {}
            self._report(mean, epoch, HELD_OUT_MRR)

    def _report(self, value: float, epoch: int, figure: str) -> None:
        self.trial.set_user_attr(REPORTED, figure)
        self.trial.report(value, step=epoch)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"epoch {epoch}: {figure} below the other trials'")


def run_trial(trial: optuna.Trial, config: ConfigSchema, judging: Judging,
              on_progress: Callable[[dict[str, Any]], None],
              study_run: CurveWriter | None = None) -> float:
    """Train `config` (its checkpoint_path the trial's folder) and return the filtered MRR
    of the validation edges; raises TrialPruned if the pruner stops it."""
    try:
        metrics = _train_and_judge(trial, config, judging, on_progress, study_run)
    except Diverged:
        trial.set_user_attr("diverged", True)
        return DIVERGED_MRR
    finally:
        stop_descriptor_server()
    trial.set_user_attr(VALID_METRICS, {key: value for key, value in metrics.items()
                                          if is_number(value)})
    return float(metrics[MRR])


def _train_and_judge(trial: optuna.Trial, config: ConfigSchema, judging: Judging,
                     on_progress: Callable[[dict[str, Any]], None],
                     study_run: CurveWriter | None) -> dict[str, Any]:
    """The trial's training and its validation metrics, tracked as the config says (the
    validation MRRs the pruner judges by are points of the curves too); raises Diverged."""
    reporter = Reporter("quiet")
    with tracking(config, reporter, stopped_by=(optuna.TrialPruned,),
                  parent=study_run) as curves:
        def judge(epoch: int) -> float:
            mrr = float(validation_metrics(config, judging, Reporter("quiet"))[MRR])
            if curves is not None:
                curves.writer.write([(f"{VALID_TAG}/{MRR}", mrr, epoch)])
            return mrr

        reports = EpochReports(trial, config.num_epochs, on_progress,
                               judge if judging.every else None, judging.every)
        reporter.listeners.append(reports)
        summary = train(config, reporter)
        if reports.diverged or (summary.last_loss is not None
                                and not math.isfinite(summary.last_loss)):
            raise Diverged
        metrics = validation_metrics(config, judging, reporter)
        if curves is not None:
            curves.writer.compare_by(trial.params, tracked_figures(metrics),
                                     step=config.num_epochs)
    return metrics


def tracked_figures(metrics: dict[str, Any]) -> dict[str, float]:
    """The validation metrics a trial's tracked run is compared by: `valid/mrr`,
    `valid/hits_at_10`..."""
    return {f"{VALID_TAG}/{tag_name(name)}": float(value) for name, value in metrics.items()
            if name not in ("count", "checkpoint_version") and is_number(value)}


def validation_metrics(config: ConfigSchema, judging: Judging,
                       reporter: Reporter) -> dict[str, Any]:
    """The filtered metrics of the validation edges under the trial's checkpoint; the edges
    known true are training's, validation's and the given filter paths' (never the test
    split's unless the user names it)."""
    known = list(dict.fromkeys([*config.edge_paths, judging.valid_path, *judging.filter_paths]))
    return evaluate_checkpoint(dataclasses.replace(config, edge_paths=[judging.valid_path]),
                               reporter, filtered=True, filter_paths=known)


def stop_descriptor_server() -> None:
    """Stop the thread through which multiprocessing hands file descriptors (shared tensors)
    between processes, started by the first trial's Hogwild workers and otherwise kept for
    good: with a second thread alive, the next trial's workers are spawned rather than forked
    (`hogwild.start_method`), seconds of start-up each. No worker is alive between trials."""
    resource_sharer.stop()
