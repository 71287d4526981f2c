"""The choice of `tessera tune`: a search's luckiest run loses to a finalist of a better
mean, and a study's reruns are queued once however often it is continued."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tessera.tuning.study import RERUN_OF, chosen, queue_reruns

LR = {"lr": FloatDistribution(0.01, 1.0)}


def add(study: optuna.Study, lr: float, value: float, **attrs: Any) -> None:
    study.add_trial(create_trial(params={"lr": lr}, distributions=LR, value=value,
                                 user_attrs=attrs))


def test_the_best_mean_of_the_most_runs_wins_over_the_best_run() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 0.1, 0.90)  # the luckiest run
    add(study, 0.2, 0.85)
    add(study, 0.3, 0.50)
    choice = chosen(study)
    assert choice is not None and choice.numbers == (0,)  # no reruns yet: the best run
    add(study, 0.1, 0.70, **{RERUN_OF: 0})
    add(study, 0.1, 0.72, **{RERUN_OF: 0})
    add(study, 0.2, 0.84, **{RERUN_OF: 1})
    choice = chosen(study)
    assert choice is not None and choice.numbers == (0, 3, 4)  # only 0 has three runs
    add(study, 0.2, 0.83, **{RERUN_OF: 1})
    choice = chosen(study)
    assert choice is not None and choice.numbers == (1, 5, 6)
    assert choice.trial.number == 1 and abs(choice.mean_mrr - 0.84) < 1e-9


def test_reruns_are_queued_for_the_finalists_once() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 0.1, 0.60)
    add(study, 0.2, 0.0, diverged=True)  # never a finalist
    add(study, 0.3, 0.70)
    add(study, 0.4, 0.65)
    assert queue_reruns(study, 2) == 4
    assert queue_reruns(study, 2) == 4  # a continued tune queues nothing more
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert sorted(trial.user_attrs[RERUN_OF] for trial in waiting) == [2, 2, 3, 3]


def test_no_finalists_no_reruns() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 0.1, 0.60)
    assert queue_reruns(study, 0) == 0
