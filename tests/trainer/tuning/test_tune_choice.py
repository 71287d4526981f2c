"""The choice of `tessera tune`: a search's luckiest run loses to a finalist of a better
mean, a study's reruns are queued once however often it is continued, and a finalist's
checkpoint is kept until the reruns show which one is chosen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tessera.tuning.study import RERUN_OF, chosen, keep_only_best, queue_reruns

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


def test_every_finalist_keeps_its_best_run_until_the_reruns_end(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize")

    def ended(number: int, finalists: int = 2) -> list[str]:
        (tmp_path / f"trial_{number}").mkdir()  # what the trial wrote
        keep_only_best(study, tmp_path, finalists)
        return sorted(path.name for path in tmp_path.iterdir())

    add(study, 0.1, 0.90)
    assert ended(0) == ["trial_0"]
    add(study, 0.2, 0.85)
    assert ended(1) == ["trial_0", "trial_1"]  # the two finalists-to-be
    add(study, 0.3, 0.50)
    assert ended(2) == ["trial_0", "trial_1"]
    assert queue_reruns(study, 2) == 4
    reruns = [study.ask() for _ in range(4)]  # the queue's order: two of 0, two of 1
    assert [trial.user_attrs[RERUN_OF] for trial in reruns] == [0, 0, 1, 1]
    study.tell(reruns[0], 0.60)
    assert ended(reruns[0].number) == ["trial_0", "trial_1"]  # 0 ahead for now, 1 may win
    study.tell(reruns[1], 0.60)
    assert ended(reruns[1].number) == ["trial_0", "trial_1"]
    study.tell(reruns[2], 0.86)  # better than 1's search run: now 1's best run
    assert ended(reruns[2].number) == ["trial_0", f"trial_{reruns[2].number}"]
    study.tell(reruns[3], 0.84)
    choice = chosen(study)
    assert choice is not None and choice.numbers == (1, 5, 6)
    assert ended(reruns[3].number, finalists=0) == [f"trial_{reruns[2].number}"]
