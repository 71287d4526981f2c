"""`tessera tune CONFIG`: check everything a tune needs before the first trial trains, run
the study under a budget of trials and of time with a live progress line, and return the best
config's path.

`--trials` is the study's budget, not this run's: running the same command again after an
interruption finishes the study, and a larger `--trials` adds trials to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..config import apply_overrides, parse_config, read_config_dict
from ..config.redaction import without_url_credentials
from ..config.schema import ConfigSchema
from ..data.graph_data import check_flag_edge_sets
from ..errors import ConfigError
from ..log_records import EPOCH, MRR
from ..progress import Reporter, Task
from ..storage.fs import Directory, place_of
from ..storage.lease import CheckpointLease
from ..tracking import Point, is_tracked, study_tracking, tune_tracking_url
from .space import SearchSpace, load_space
from .study import (
    STUDY_FILE,
    TuneSetup,
    best_trial,
    check_space_continues,
    finished_trials,
    keep_only_best,
    objective,
    open_study,
    study_database_errors,
    valid_stderr,
    write_chosen_configs,
)
from .trial import HELD_OUT_MRR, REPORTED, Judging

TUNE_FOLDER = "tune"
TUNE_TASK = "tune"
TRIAL_FINISHED = "trial finished"
TUNING_FINISHED = "tuning finished"


@dataclass(frozen=True)
class TuneOptions:
    valid_path: str | None
    filter_paths: tuple[str, ...] = ()
    space: str | None = None  # a space file; None: the default space
    trials: int = 30
    timeout: float | None = None  # seconds after which no trial starts
    startup_trials: int = 5  # trials that run to the end before the pruner judges any
    warmup_epochs: int = 5  # epochs a trial trains before the pruner judges it
    valid_every: int = 0  # epochs between the validation MRRs the pruner judges by; 0: none


@dataclass(frozen=True)
class TuneResult:
    best_config: Path | None  # None: no trial completed
    refit_config: Path | None  # best_config trained on the validation edges too
    best_trial: int | None
    valid_mrr: float | None
    valid_mrr_stderr: float | None  # the standard error of valid_mrr over its rankings
    trials: int  # finished trials in the study (complete or pruned)


class StudyLease(CheckpointLease):
    """One `tessera tune` at a time on a tune folder: two would share trial numbers' folders
    and fail each other's running trials."""

    FILE = "tune_lease.json"
    LABEL = "tune folder"
    GUARDED = "study"


def tune(config_location: str, overrides: list[str], options: TuneOptions,
         reporter: Reporter) -> TuneResult:
    """Run (or continue) the study of the config's tune folder; the best config's path."""
    raw_config = apply_overrides(read_config_dict(config_location), overrides)
    config = parse_config(raw_config)
    judging = check_judging(config, options)
    check_budget(options)
    space = load_space(options.space, raw_config, config)
    tune_dir = tune_folder(config)
    lease = StudyLease(Directory(str(tune_dir)), "tessera tune")
    lease.acquire()  # not renewed: on one machine its holder is known alive by its pid
    try:
        with study_database_errors(tune_dir / STUDY_FILE):
            return _run(config, raw_config, space, judging, tune_dir, options, reporter)
    finally:
        lease.release()


def check_judging(config: ConfigSchema, options: TuneOptions) -> Judging:
    """The validation edge set, refused if missing, empty or trained on."""
    if not options.valid_path:
        raise ConfigError("--valid", "no validation edge set: give --valid EDGE_PATH, an "
                                     "imported edge set that training does not read (the "
                                     "valid split); trials are judged on it, never on test")
    # However spelled (a trailing slash, `..`, a relative path, a link on a local disk).
    if place_of(options.valid_path) in map(place_of, config.edge_paths):
        raise ConfigError("--valid", f"{options.valid_path} is also in edge_paths, which "
                                     "every trial trains on; train on the training split "
                                     "alone (-p edge_paths=...)")
    check_flag_edge_sets(config, "--valid", [options.valid_path])
    check_flag_edge_sets(config, "--filter-paths", list(options.filter_paths))
    return Judging(options.valid_path, tuple(options.filter_paths), options.valid_every)


def check_budget(options: TuneOptions) -> None:
    if options.trials < 1:
        raise ConfigError("--trials", f"must be at least 1, got {options.trials}")
    if options.timeout is not None and options.timeout <= 0:
        raise ConfigError("--timeout", f"must be above 0 seconds, got {options.timeout}")
    for flag, value in (("--startup-trials", options.startup_trials),
                        ("--warmup-epochs", options.warmup_epochs),
                        ("--valid-every", options.valid_every)):
        if value < 0:
            raise ConfigError(flag, f"must be 0 or more, got {value}")


def tune_folder(config: ConfigSchema) -> Path:
    """`<checkpoint_path>/tune`: local, as SQLite needs a file system with locks."""
    checkpoints = Directory.from_config(config.checkpoint_path, config)
    if not checkpoints.is_local:
        raise ConfigError("checkpoint_path", "tessera tune keeps its study and trials in "
                                             "checkpoint_path/tune: give a local path")
    return Path(checkpoints.path(TUNE_FOLDER))


def _run(config: ConfigSchema, raw_config: dict[str, Any], space: SearchSpace,
         judging: Judging, tune_dir: Path, options: TuneOptions,
         reporter: Reporter) -> TuneResult:
    study = open_study(tune_dir, config.seed, options.startup_trials, options.warmup_epochs)
    check_space_continues(study, space, tune_dir)
    remaining = options.trials - finished_trials(study)
    if config.eval_fraction == 0 and not options.valid_every:
        reporter.event("pruning off: eval_fraction is 0 and no --valid-every, so no trial "
                       "reports an MRR to be judged by before it ends")
    if remaining <= 0:
        reporter.event("the study already has its trials; raise --trials to add more",
                       trials=finished_trials(study), study=str(tune_dir))
    written: list[tuple[Path, Path]] = []  # best.yaml and refit.yaml
    with reporter.task(TUNE_TASK, total=max(remaining, 0) or None, unit="trials") as task, \
            study_tracking(config, str(tune_dir), resume=bool(study.trials)) as study_run:
        setup = TuneSetup(raw_config, space, judging, tune_dir, study_run)
        progress = TuneProgress(reporter, task)

        def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
            best = best_trial(study)
            if best is not None and best.number == trial.number:
                written[:] = [write_chosen_configs(setup, best, len(study.trials))]
            keep_only_best(study, tune_dir)
            progress.trial_finished(trial, best)
            if study_run is not None:
                study_run.write(study_points(trial, best))

        if remaining > 0:
            study.optimize(objective(setup, progress.trial_started, progress.training),
                           n_trials=remaining, timeout=options.timeout,
                           callbacks=[after_trial], gc_after_trial=True)
    best = best_trial(study)
    if best is not None and not written:  # a continued study with nothing left to run
        written = [write_chosen_configs(setup, best, len(study.trials))]
    best_config, refit_config = written[0] if written else (None, None)
    result = TuneResult(best_config, refit_config,
                        best.number if best else None, best.value if best else None,
                        valid_stderr(best) if best else None, finished_trials(study))
    rows = summary_rows(result, best, tune_dir)
    if is_tracked(config):  # where the trials' runs are
        url = tune_tracking_url(config, str(tune_dir)) or "MLflow's default tracking URI"
        rows["tracking"] = f"{config.tracking}: {without_url_credentials(url)}"
    reporter.summary(TUNING_FINISHED, rows)
    return result


def study_points(trial: FrozenTrial, best: FrozenTrial | None) -> list[Point]:
    """The points of the study's tracked run after a trial, at its number: its score (a
    complete trial's) and the best so far."""
    points: list[Point] = []
    if trial.state == TrialState.COMPLETE and trial.value is not None:
        points.append((f"{TUNE_TASK}/valid_mrr", trial.value, trial.number))
    if best is not None and best.value is not None:
        points.append((f"{TUNE_TASK}/best_valid_mrr", best.value, trial.number))
    return points


class TuneProgress:
    """The live line (`tune 40%  12 trials ... trial=13 epoch=45/100 best_mrr=0.81`) and one
    event a trial."""

    def __init__(self, reporter: Reporter, task: Task) -> None:
        self.reporter = reporter
        self.task = task

    def trial_started(self, number: int) -> None:
        self.task.fields.pop(EPOCH, None)
        self.task.advance(0, trial=number)

    def training(self, record: dict[str, Any]) -> None:
        if record.get(EPOCH) is not None:
            self.task.advance(0, **{EPOCH: record[EPOCH]})

    def trial_finished(self, trial: FrozenTrial, best: FrozenTrial | None) -> None:
        fields: dict[str, Any] = {"trial": trial.number, "state": trial.state.name.lower()}
        if trial.state == TrialState.COMPLETE:
            fields["valid_mrr"] = rounded_value(trial)
        elif trial.intermediate_values:  # pruned: judged by an MRR of an epoch
            epoch = max(trial.intermediate_values)
            figure = trial.user_attrs.get(REPORTED, HELD_OUT_MRR)
            fields.update({"epoch": epoch,
                           figure: round(trial.intermediate_values[epoch], 4)})
        if trial.user_attrs.get("diverged"):
            fields["diverged"] = True
        fields.update(trial.params)
        fields["seconds"] = round(trial.duration.total_seconds(), 1) if trial.duration else None
        self.reporter.event(TRIAL_FINISHED, **fields)
        best_fields = {"best_trial": best.number, f"best_{MRR}": rounded_value(best)} \
            if best is not None else {}
        self.task.advance(1, **best_fields)


def summary_rows(result: TuneResult, best: FrozenTrial | None,
                 tune_dir: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {"trials": result.trials, "best_trial": result.best_trial,
                            "valid_mrr": None if best is None else rounded_value(best),
                            "valid_mrr_stderr": result.valid_mrr_stderr}
    if best is not None:
        rows.update(best.params)
    rows.update({"study": str(tune_dir / "study.db"),
                 "best_config": str(result.best_config) if result.best_config else None,
                 "refit_config": str(result.refit_config) if result.refit_config else None})
    return rows


def rounded_value(trial: FrozenTrial) -> float | None:
    """A complete trial's filtered validation MRR, as printed."""
    return None if trial.value is None else round(trial.value, 4)
