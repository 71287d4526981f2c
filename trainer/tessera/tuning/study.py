"""The Optuna study of `tessera tune`, kept in SQLite in the tune folder beside the checkpoints
(`<checkpoint_path>/tune/study.db`), so that running the same command again continues it.

Each trial trains into `tune/trial_<N>`; once a trial ends, the folders of every finished
trial but the chosen one are deleted, and when the choice changes, `tune/best.yaml` is
written: the user's config with the chosen values, which `tessera train` takes as it is.

After the search, the finalists (its best configs) are trained twice more each, and the
choice is the finalist of the highest mean: the single best trial of a search is, among
runs of similar configs, the luckiest one (Hogwild's races and a small validation split
move a run's MRR by about as much as the configs differ), and its config trained anew
scores less.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from ..config import parse_config
from ..config.redaction import redacted, without_url_credentials
from ..errors import ConfigError
from .space import Dimension, SearchSpace, with_values
from .trial import Judging, run_trial

STUDY_FILE = "study.db"
STUDY_NAME = "tessera-tune"
BEST_CONFIG = "best.yaml"
# What counts against the budget of --trials: a trial that failed (an error, Ctrl-C) is
# tried again.
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# A rerun's user attribute: the number of the search trial whose values it trains again.
RERUN_OF = "rerun_of"
RUNS_PER_FINALIST = 3  # its search trial and two reruns


@dataclass(frozen=True)
class TuneSetup:
    """What every trial shares: the user's config (-p applied), the space and the judging."""

    raw_config: dict[str, Any]
    space: SearchSpace
    judging: Judging
    tune_dir: Path


def open_study(tune_dir: Path, seed: int, startup_trials: int,
               warmup_epochs: int) -> optuna.Study:
    """The study of `tune_dir`, created or continued. Call it holding the tune folder's
    lease: a trial still marked running was left by a run that was killed, and is failed."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # trials are reported as events
    tune_dir.mkdir(parents=True, exist_ok=True)
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


@dataclass(frozen=True)
class Choice:
    """The chosen config: its runs (a search trial, and its reruns if it was a finalist)."""

    runs: tuple[FrozenTrial, ...]

    @property
    def trial(self) -> FrozenTrial:
        """The config's best run: its checkpoint is the tune's model."""
        return max(self.runs, key=_value)

    @property
    def numbers(self) -> tuple[int, ...]:
        return tuple(run.number for run in self.runs)

    @property
    def mean_mrr(self) -> float:
        return statistics.fmean(_value(run) for run in self.runs)


def finished_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def finished_search_trials(study: optuna.Study) -> int:
    return sum(RERUN_OF not in trial.user_attrs
               for trial in study.get_trials(deepcopy=False, states=FINISHED))


def chosen(study: optuna.Study) -> Choice | None:
    """Among the configs of the most complete runs (the finalists once rerun), the one of
    the highest mean validation MRR; before any rerun, the best trial."""
    runs = runs_by_config(study)
    most = max(map(len, runs.values()), default=0)
    candidates = [Choice(tuple(mine)) for mine in runs.values() if len(mine) == most]
    return max(candidates, key=lambda choice: choice.mean_mrr, default=None)


def runs_by_config(study: optuna.Study) -> dict[int, list[FrozenTrial]]:
    """Complete trials by the search trial whose config they ran (a rerun's, or its own)."""
    runs: dict[int, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        runs.setdefault(trial.user_attrs.get(RERUN_OF, trial.number), []).append(trial)
    return runs


def queue_reruns(study: optuna.Study, finalists: int) -> int:
    """Queue the reruns that the search's best `finalists` configs still lack (none twice,
    however often the tune is started); the number of reruns waiting."""
    taken = Counter(trial.user_attrs.get(RERUN_OF) for trial in study.get_trials(
        deepcopy=False, states=(*FINISHED, TrialState.WAITING)))
    for finalist in best_searched(study, finalists):
        for _ in range(RUNS_PER_FINALIST - 1 - taken[finalist.number]):
            study.enqueue_trial(finalist.params, user_attrs={RERUN_OF: finalist.number})
    return waiting_trials(study)


def waiting_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def best_searched(study: optuna.Study, count: int) -> list[FrozenTrial]:
    """The `count` best search trials (the finalists, once the search ends)."""
    searched = [trial for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if RERUN_OF not in trial.user_attrs and not trial.user_attrs.get("diverged")]
    return sorted(searched, key=_value, reverse=True)[:count]


def _value(trial: FrozenTrial) -> float:
    return trial.value or 0.0


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
        if RERUN_OF in trial.user_attrs:  # a draw of its own, not its search trial's again
            config = dataclasses.replace(config, seed=config.seed + trial.number)
        return run_trial(trial, config, setup.judging, on_progress)

    return run


def keep_only_best(study: optuna.Study, tune_dir: Path, finalists: int) -> None:
    """Delete the folders of the finished trials but the chosen config's best run and the
    best run of each of the search's `finalists` best configs (until their reruns end, any
    may be chosen: give 0 then), to save disk."""
    choice = chosen(study)
    keep = {choice.trial.number} if choice is not None else set()
    runs = runs_by_config(study)
    keep |= {max(runs[finalist.number], key=_value).number
             for finalist in best_searched(study, finalists)}
    for trial in study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.FAIL)):
        if trial.number not in keep:
            shutil.rmtree(trial_dir(tune_dir, trial.number), ignore_errors=True)


def write_best_config(setup: TuneSetup, choice: Choice, total: int) -> Path:
    """`tune/best.yaml`: the user's config with the chosen values, written whole or not at
    all; secrets in storage_options read `<redacted>`, as in a checkpoint's config."""
    best = choice.trial
    config = redacted(with_values(setup.raw_config, best.params))
    runs = "" if len(choice.runs) == 1 else (
        f" (mean of {len(choice.runs)} runs, trials "
        f"{', '.join(map(str, choice.numbers))}: {choice.mean_mrr:.4f})")
    header = (f"# Chosen by tessera tune: trial {best.number} of {total}, filtered MRR "
              f"{best.value:.4f}{runs} on {setup.judging.valid_path}.\n"
              f"# Its checkpoint: {trial_dir(setup.tune_dir, best.number)}\n")
    path = setup.tune_dir / BEST_CONFIG
    partial = path.with_name(f".{BEST_CONFIG}.tmp")
    text = without_url_credentials(header) + yaml.safe_dump(config, sort_keys=False)
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path
