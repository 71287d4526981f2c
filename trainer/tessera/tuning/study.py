"""The Optuna study of `tessera tune`, kept in SQLite in the tune folder beside the checkpoints
(`<checkpoint_path>/tune/study.db`), so that running the same command again continues it.

Each trial trains into `tune/trial_<N>`; once a trial ends, the folders of every finished
trial but the best are deleted, and when it is the best so far, `tune/best.yaml` is written:
the user's config with the trial's values, which `tessera train` takes as it is, and beside it
`tune/refit.yaml`, the same trained on the validation edges too: once the choice is made, the
split that made it is more data to learn from. It trains into `<checkpoint_path>/refit`, so that
neither file's training resumes the other's checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from ..config import ConfigSchema, parse_config
from ..config.redaction import redacted, without_url_credentials
from ..errors import BadInputError, ConfigError, FormatError, TransientError, causes
from ..log_records import is_number
from ..storage.fs import Directory
from ..tracking import CurveWriter, trial_tracking_path
from .space import Dimension, SearchSpace, with_values
from .trial import VALID_METRICS, Judging, run_trial

STUDY_FILE = "study.db"
STUDY_NAME = "tessera-tune"
BEST_CONFIG = "best.yaml"
REFIT_CONFIG = "refit.yaml"
REFIT_FOLDER = "refit"  # refit.yaml's checkpoint_path, in the user's
# What counts against the budget of --trials: a trial that failed (an error, Ctrl-C) is
# tried again.
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class TuneSetup:
    """What every trial shares: the user's config (-p applied), the space and the judging."""

    raw_config: dict[str, Any]
    space: SearchSpace
    judging: Judging
    tune_dir: Path
    study_run: CurveWriter | None = None  # the tracked run of the study, the trials' parent


def open_study(tune_dir: Path, seed: int, startup_trials: int,
               warmup_epochs: int) -> optuna.Study:
    """The study of `tune_dir`, created or continued. Call it holding the tune folder's
    lease: a trial still marked running was left by a run that was killed, and is failed."""
    # Trials are reported as events, and a trial's error ends the tune as one line: Optuna's
    # own warning of a failed trial would add its traceback.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tune_dir.mkdir(parents=True, exist_ok=True)
    check_study_file(tune_dir / STUDY_FILE)
    study = optuna.create_study(
        storage=f"sqlite:///{(tune_dir / STUDY_FILE).resolve()}", study_name=STUDY_NAME,
        direction="maximize", load_if_exists=True,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=startup_trials,
                                           n_warmup_steps=warmup_epochs))
    for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(stale.number, state=TrialState.FAIL)
    # Seeded, and with the trials so far: a continued study draws new values, not the first
    # run's again.
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    return study


# What every SQLite database file starts with (an empty file is a new database too).
_SQLITE_HEADER = b"SQLite format 3\x00"


@contextlib.contextmanager
def study_database_errors(path: Path) -> Iterator[None]:
    """A study database that cannot be written (a full disk, a read-only one) as one line
    naming it; SQLite keeps it whole, so the same command continues the study later."""
    try:
        yield
    except (sqlalchemy.exc.OperationalError, optuna.exceptions.StorageInternalError) as error:
        failure = next((link for link in causes(error)
                        if isinstance(link, sqlalchemy.exc.OperationalError)), None)
        if failure is None:  # Optuna's wrapper of another failure: a bug, not the disk
            raise
        reason = str(failure.orig or failure).strip()
        if "readonly" in reason or "read-only" in reason:
            raise BadInputError(f"{path}: the study's database cannot be written ({reason}); "
                                "make it writable, or tune into another checkpoint_path"
                                ) from None
        raise TransientError(f"{path}: the study's database could not be written or read "
                             f"({reason}; a full disk?); free some space, then run the same "
                             "command: the study continues") from None


def check_study_file(path: Path) -> None:
    """Refuse a study file that SQLite cannot open, naming it: Optuna's own error would be
    a database driver's traceback."""
    if not path.exists():
        return
    if not path.is_file():
        raise BadInputError(f"{path}: is not a file, where the study's SQLite database is "
                            "kept; remove it, or tune into another checkpoint_path")
    with path.open("rb") as file:
        header = file.read(len(_SQLITE_HEADER))
    if header and header != _SQLITE_HEADER:
        raise FormatError(str(path), "not a SQLite database (the study of earlier trials); "
                                     "restore it, or delete it to start a new study")


def check_space_continues(study: optuna.Study, space: SearchSpace, tune_dir: Path) -> None:
    """Refuse a space whose key changed kind (range or choices, log or not, int or float) or
    choices since the study's earlier trials: Optuna cannot continue a study so (a range's
    ends may change)."""
    earlier: dict[str, BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        earlier.update(trial.distributions)
    for dimension in space.dimensions:
        old = earlier.get(dimension.key)
        if old is not None and not _continues(dimension, old):
            raise ConfigError(f"{space.origin}: {dimension.key}", (
                "its choices, or the kind of its range, differ from the earlier trials' of "
                f"this study; restore them, or start a new study (remove {tune_dir})"))


def _continues(dimension: Dimension, old: BaseDistribution) -> bool:
    if dimension.choices is not None:
        return isinstance(old, CategoricalDistribution) and \
            tuple(old.choices) == dimension.choices
    kind = IntDistribution if dimension.integer else FloatDistribution
    return isinstance(old, kind) and old.log == dimension.log


def finished_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return max(complete, key=lambda trial: trial.value or 0.0, default=None)


def trial_dir(tune_dir: Path, number: int) -> Path:
    return tune_dir / f"trial_{number}"


def objective(setup: TuneSetup, on_trial: Callable[[int], None],
              on_progress: Callable[[dict[str, Any]], None]) -> Callable[[optuna.Trial], float]:
    """Optuna's objective: a trial's values, its config, its training and its judging."""

    def run(trial: optuna.Trial) -> float:
        on_trial(trial.number)
        folder = trial_dir(setup.tune_dir, trial.number)
        shutil.rmtree(folder, ignore_errors=True)  # a study's number is never reused
        values = setup.space.suggest(trial)
        config = parse_config(with_values(setup.raw_config,
                                          {**values, "checkpoint_path": str(folder)}))
        config = dataclasses.replace(config, tracking_path=trial_tracking_path(
            config, str(setup.tune_dir), folder.name))
        return run_trial(trial, config, setup.judging, on_progress, setup.study_run)

    return run


def keep_only_best(study: optuna.Study, tune_dir: Path) -> None:
    """Delete the folders of the finished trials other than the best, to save disk."""
    best = best_trial(study)
    for trial in study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.FAIL)):
        if best is None or trial.number != best.number:
            shutil.rmtree(trial_dir(tune_dir, trial.number), ignore_errors=True)


def _repeatability(config: ConfigSchema) -> str:
    """Whether training the chosen config gives the trial's model again: one CPU worker
    computes the same steps for the same seed (with as many threads); Hogwild's workers and
    a GPU's atomic adds race."""
    if config.num_gpus == 0 and config.workers == 1:
        return ("With one worker, training this file on this machine gives the trial's "
                "model again.")
    racing = "A GPU's atomic adds" if config.num_gpus else "Hogwild's workers"
    return (f"{racing} race, so each training of this file is a new draw; the trial's own "
            "model is its checkpoint (workers: 1 on CPU trains one that repeats).")


def valid_stderr(trial: FrozenTrial) -> float | None:
    """The standard error of a complete trial's validation MRR (see
    `RankingMetrics.mrr_standard_error`); None for a trial without one (diverged)."""
    value = trial.user_attrs.get(VALID_METRICS, {}).get("mrr_stderr")
    return round(value, 4) if is_number(value) else None


def write_chosen_configs(setup: TuneSetup, best: FrozenTrial,
                         total: int) -> tuple[Path, Path]:
    """`tune/best.yaml`, then `tune/refit.yaml` (its edge_paths and the validation edges);
    their paths."""
    chosen = with_values(setup.raw_config, best.params)
    parsed = parse_config(chosen)
    stderr = valid_stderr(best)
    precision = "" if stderr is None else f" (standard error {stderr:.4f})"
    valid_path = setup.judging.valid_path
    chosen_by = (f"# Chosen by tessera tune: trial {best.number} of {total}, filtered MRR "
                 f"{best.value:.4f}{precision} on {valid_path}.\n")
    best_path = _write_config(
        setup.tune_dir / BEST_CONFIG, chosen,
        f"{chosen_by}# Its checkpoint: {trial_dir(setup.tune_dir, best.number)}\n"
        f"# {_repeatability(parsed)}\n")
    refit_checkpoints = setup.tune_dir.parent / REFIT_FOLDER
    refit_path = _write_config(
        setup.tune_dir / REFIT_CONFIG,
        {**chosen, "edge_paths": [*parsed.edge_paths, valid_path],
         "checkpoint_path": str(refit_checkpoints)},
        f"{chosen_by}# {BEST_CONFIG} trained on {valid_path} too, into {refit_checkpoints}: "
        "the final model, with no split but test left to judge it.\n")
    return best_path, refit_path


def _write_config(path: Path, config: dict[str, Any], header: str) -> Path:
    """A config file written whole or not at all; secrets in storage_options read
    `<redacted>`, as in a checkpoint's config."""
    Directory(str(path.parent)).write_text(
        path.name, without_url_credentials(header) + yaml.safe_dump(redacted(config),
                                                                    sort_keys=False))
    return path
