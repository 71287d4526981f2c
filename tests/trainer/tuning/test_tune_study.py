"""`tessera tune` end to end on a planted graph: a best config that `tessera train` takes, a
study that a second run continues, pruning that stops a hopeless trial, and a test split that
is never read."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState
from support.planted import write_planted_graph

from tessera.cli import main
from tessera.config import parse_config
from tessera.errors import EXIT_TRANSIENT
from tessera.mlflow_runs import PARENT_RUN_TAG
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training.coordinator import train
from tessera.tuning.trial import Judging, validation_metrics

# The planted graph's `test` edge set plays the validation split here; the config names a
# test split that does not exist, so that reading it would fail.
SPACE = {"lr": {"low": 0.05, "high": 0.5, "log": True}, "dimension": {"choices": [8, 16]}}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    graph = write_planted_graph(tmp_path, 1, num_entities=100, num_edges=2000)
    config = graph.config(num_epochs=3, eval_fraction=0.1,
                          edge_paths=[str(tmp_path / "train"), str(tmp_path / "test"),
                                      str(tmp_path / "missing-test")])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    write_space(tmp_path, SPACE)
    return tmp_path


def write_space(root: Path, space: dict[str, Any], name: str = "space.yaml") -> Path:
    (root / name).write_text(yaml.safe_dump(space))
    return root / name


def tune(root: Path, *args: str, space: str = "space.yaml", output: str = "--quiet") -> int:
    return main(["tune", str(root / "config.yaml"), "-p", f"edge_paths={root / 'train'}",
                 "--valid", str(root / "test"), "--space", str(root / space), output, *args])


def study_of(root: Path) -> optuna.Study:
    return optuna.load_study(study_name="tessera-tune",
                             storage=f"sqlite:///{root / 'checkpoints' / 'tune' / 'study.db'}")


def test_a_tune_writes_a_best_config_that_train_takes(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(workspace, "--trials", "2") == 0
    out = capsys.readouterr().out
    best = workspace / "checkpoints" / "tune" / "best.yaml"
    assert f"best config: {best}" in out and f"tessera train {best}" in out
    config = yaml.safe_load(best.read_text())
    study = study_of(workspace)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    assert config["lr"] == study.best_params["lr"]
    assert config["dimension"] == study.best_params["dimension"]
    assert study.best_value > 0.2  # far above random on the planted communities
    # The header gives the precision of the validation split: the standard error of the
    # best trial's MRR over its rankings, as the evaluation computed it.
    stderr = study.best_trial.user_attrs["valid_metrics"]["mrr_stderr"]
    assert 0 < stderr < 0.05  # 2 rows for each of about 200 validation edges
    assert f"filtered MRR {study.best_value:.4f} (standard error {stderr:.4f}) on " \
        in best.read_text().splitlines()[0]
    assert f"filtered valid MRR {study.best_value:.4f}, standard error {stderr:.4f})" in out
    # Trained on the training split alone, into the user's checkpoint_path.
    assert config["edge_paths"] == [str(workspace / "train")]
    assert config["checkpoint_path"] == str(workspace / "checkpoints")
    trials = sorted(p.name for p in (workspace / "checkpoints" / "tune").glob("trial_*"))
    assert trials == [f"trial_{study.best_trial.number}"]  # the others deleted
    assert main(["train", str(best), "--quiet"]) == 0
    assert (workspace / "checkpoints" / "checkpoint_version.txt").read_text().strip() == "3"


def test_refit_config_trains_the_best_config_on_the_validation_edges_too(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(workspace, "--trials", "1") == 0
    tune_dir = workspace / "checkpoints" / "tune"
    refit = tune_dir / "refit.yaml"
    assert f"tessera train {refit}" in capsys.readouterr().out
    best_config = yaml.safe_load((tune_dir / "best.yaml").read_text())
    refit_config = yaml.safe_load(refit.read_text())
    valid = str(workspace / "test")
    own_folder = str(workspace / "checkpoints" / "refit")
    assert refit_config == {**best_config, "edge_paths": [str(workspace / "train"), valid],
                            "checkpoint_path": own_folder}
    assert f"best.yaml trained on {valid} too, into {own_folder}" \
        in refit.read_text().splitlines()[1]
    # Trained after best.yaml, it starts afresh in a folder of its own (resuming best.yaml's
    # checkpoint would train the validation edges of the last epoch alone), and trains the
    # validation edges besides the training ones.
    best = train(parse_config(best_config), Reporter("quiet")).edges
    refit_edges = train(parse_config(refit_config), Reporter("quiet")).edges
    only_valid = train(parse_config({**best_config, "edge_paths": [valid],
                                     "checkpoint_path": str(workspace / "v")}),
                       Reporter("quiet")).edges
    assert only_valid > 0 and refit_edges == best + only_valid


def test_running_again_continues_the_study(workspace: Path) -> None:
    assert tune(workspace, "--trials", "2") == 0
    first = [(t.number, t.params, t.value) for t in study_of(workspace).trials]
    assert tune(workspace, "--trials", "2") == 0  # its budget is spent: nothing to add
    assert [(t.number, t.params, t.value) for t in study_of(workspace).trials] == first
    assert tune(workspace, "--trials", "3") == 0
    trials = study_of(workspace).trials
    assert [(t.number, t.params, t.value) for t in trials[:2]] == first
    assert len(trials) == 3 and trials[2].state == TrialState.COMPLETE
    assert trials[2].params != trials[0].params  # a new draw, not the first run's again


def test_a_hopeless_trial_is_pruned(workspace: Path) -> None:
    write_space(workspace, {"lr": {"low": 0.3, "high": 0.3}}, "good.yaml")
    write_space(workspace, {"lr": {"low": 0.0, "high": 0.0}}, "hopeless.yaml")
    assert tune(workspace, "--trials", "1", space="good.yaml") == 0
    assert tune(workspace, "--trials", "2", "--startup-trials", "1", "--warmup-epochs", "0",
                space="hopeless.yaml") == 0
    good, hopeless = study_of(workspace).trials
    assert good.state == TrialState.COMPLETE and good.intermediate_values
    assert hopeless.state == TrialState.PRUNED
    assert len(hopeless.intermediate_values) < 3  # stopped before its last epoch
    assert not (workspace / "checkpoints" / "tune" / f"trial_{hopeless.number}").exists()


def test_a_continued_study_refuses_other_choices(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(workspace, "--trials", "1") == 0
    write_space(workspace, {**SPACE, "dimension": {"choices": [8, 32]}})
    assert tune(workspace, "--trials", "2") == 65
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "space.yaml: dimension: its choices, or the kind of its range, differ" in err
    assert len(study_of(workspace).trials) == 1


def test_a_trial_left_running_by_a_killed_run_is_failed_and_tried_again(
        workspace: Path) -> None:
    (workspace / "checkpoints" / "tune").mkdir(parents=True)
    killed = optuna.create_study(
        study_name="tessera-tune", direction="maximize",
        storage=f"sqlite:///{workspace / 'checkpoints' / 'tune' / 'study.db'}")
    killed.ask()  # a trial that a SIGKILLed run left marked as running
    assert tune(workspace, "--trials", "1") == 0
    assert [t.state for t in study_of(workspace).trials] == [TrialState.FAIL,
                                                             TrialState.COMPLETE]


@pytest.mark.parametrize("workers", [1, 2])
def test_best_config_says_whether_training_it_repeats_the_trial(
        workspace: Path, workers: int) -> None:
    assert tune(workspace, "--trials", "1", "-p", f"workers={workers}") == 0
    best = workspace / "checkpoints" / "tune" / "best.yaml"
    header = best.read_text().splitlines()[2]
    if workers > 1:
        assert "Hogwild's workers race, so each training of this file is a new draw" in header
        return
    assert "gives the trial's model again" in header
    assert main(["train", str(best), "--quiet"]) == 0
    assert np.array_equal(embeddings(workspace / "checkpoints"),
                          embeddings(workspace / "checkpoints" / "tune" / "trial_0"))


def embeddings(checkpoints: Path) -> np.ndarray:
    return CheckpointStore(Directory(str(checkpoints))).read_embeddings("node", 0)[0]


def test_valid_every_prunes_by_the_filtered_validation_mrr(workspace: Path) -> None:
    write_space(workspace, {"lr": {"low": 0.3, "high": 0.3}}, "good.yaml")
    write_space(workspace, {"lr": {"low": 0.0, "high": 0.0}}, "hopeless.yaml")
    every_epoch = ["-p", "eval_fraction=0", "-p", "checkpoint_preservation_interval=1",
                   "--valid-every", "1"]
    assert tune(workspace, "--trials", "1", *every_epoch, space="good.yaml") == 0
    assert tune(workspace, "--trials", "2", "--startup-trials", "1", "--warmup-epochs", "0",
                *every_epoch, space="hopeless.yaml") == 0
    good, hopeless = study_of(workspace).trials
    # Epochs 1 and 2 reported (the third is the score), each the MRR of its checkpoint.
    assert sorted(good.intermediate_values) == [1, 2]
    trial_0 = workspace / "checkpoints" / "tune" / "trial_0"
    config = yaml.safe_load((workspace / "checkpoints" / "tune" / "best.yaml").read_text())
    for epoch, reported in good.intermediate_values.items():
        checkpoint = parse_config({**config, "checkpoint_path": str(trial_0 / f"epoch_{epoch}")})
        metrics = validation_metrics(checkpoint, Judging(str(workspace / "test"), ()),
                                     Reporter("quiet"))
        assert reported == pytest.approx(metrics["mrr"])
    assert good.intermediate_values[2] > 0.2  # far above random, not a held-out sample's MRR
    assert hopeless.state == TrialState.PRUNED
    assert hopeless.user_attrs["reported"] == "valid_mrr"
    assert hopeless.intermediate_values[1] < good.intermediate_values[1]


# --- Tracking: each trial's run, to compare trials by -----------------------------------------

EVERY_EPOCH = ("-p", "eval_fraction=0", "-p", "checkpoint_preservation_interval=1",
               "--valid-every", "1")


def tune_a_good_then_a_pruned_trial(root: Path, *tracking: str) -> tuple[FrozenTrial, ...]:
    """Trial 0 runs its 3 epochs, reporting the validation MRR of the first two; trial 1
    (lr 0) is pruned after its first."""
    write_space(root, {"lr": {"low": 0.3, "high": 0.3}}, "good.yaml")
    write_space(root, {"lr": {"low": 0.0, "high": 0.0}}, "hopeless.yaml")
    assert tune(root, "--trials", "1", *EVERY_EPOCH, *tracking, space="good.yaml") == 0
    assert tune(root, "--trials", "2", "--startup-trials", "1", "--warmup-epochs", "0",
                *EVERY_EPOCH, *tracking, space="hopeless.yaml", output="--log-format=json") == 0
    good, pruned = study_of(root).trials
    assert good.state == TrialState.COMPLETE and pruned.state == TrialState.PRUNED
    return good, pruned


def valid_curve(trial: FrozenTrial) -> list[tuple[int, float]]:
    """The validation MRRs a trial's tracked run should hold: those reported to the pruner,
    and the score at the last epoch (3) of a complete trial."""
    final = [(3, trial.value)] if trial.state == TrialState.COMPLETE else []
    return [*sorted(trial.intermediate_values.items()), *final]


def test_tensorboard_keeps_each_trials_curves_and_values_beside_the_others(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    good, pruned = tune_a_good_then_a_pruned_trial(workspace, "-p", "tracking=tensorboard")
    log_dir = workspace / "checkpoints" / "tune" / "tensorboard"
    (summary,) = [record for record in map(json.loads, capsys.readouterr().err.splitlines())
                  if record.get("event") == "tuning finished"]
    assert summary["tracking"] == f"tensorboard: {log_dir}"  # where to point TensorBoard
    assert sorted(path.name for path in log_dir.iterdir() if path.is_dir()) == \
        ["trial_0", "trial_1"]
    assert not (workspace / "checkpoints" / "tune" / "trial_1").exists()  # curves outlive it
    for trial in (good, pruned):
        events = EventAccumulator(str(log_dir / f"trial_{trial.number}"),
                                  size_guidance={"scalars": 0})
        events.Reload()
        curve = [(event.step, event.value) for event in events.Scalars("valid/mrr")]
        assert curve == [(step, pytest.approx(value)) for step, value in valid_curve(trial)]
        assert [event.step for event in events.Scalars("epoch/loss")] == \
            [1, 2, 3][:len(trial.intermediate_values) + (trial == good)]
        if trial == pruned:  # judged by nothing: not a session of the HParams tab
            with pytest.raises(KeyError, match="hparams"):
                events.PluginTagToContent(metadata.PLUGIN_NAME)
            continue
        sessions = events.PluginTagToContent(metadata.PLUGIN_NAME)
        start = plugin_data_pb2.HParamsPluginData.FromString(
            sessions[metadata.SESSION_START_INFO_TAG]).session_start_info
        assert set(start.hparams) == {"lr"}  # the values drawn, from good.yaml's space
        assert start.hparams["lr"].number_value == pytest.approx(0.3)
        assert events.Scalars("valid/hits_at_10")[-1].step == 3
    # The study's own curves, at the top of the trials' folders: each complete trial's score
    # and the best so far, by trial number, over both runs of the command.
    study = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    study.Reload()
    assert [(e.step, e.value) for e in study.Scalars("tune/valid_mrr")] == \
        [(0, pytest.approx(good.value))]
    assert [(e.step, e.value) for e in study.Scalars("tune/best_valid_mrr")] == \
        [(0, pytest.approx(good.value)), (1, pytest.approx(good.value))]


def test_mlflow_has_a_run_a_trial_with_its_values_and_outcome(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = f"sqlite:///{workspace / 'mlflow.db'}"
    good, pruned = tune_a_good_then_a_pruned_trial(
        workspace, "-p", "tracking=mlflow", "-p", f"tracking_path={uri}")
    client = MlflowClient(tracking_uri=uri)
    runs = {run.info.run_name: run for run in client.search_runs(
        [client.get_experiment_by_name("tessera").experiment_id])}
    assert sorted(runs) == ["trial_0", "trial_1", "tune"]  # one study run over both commands
    assert runs["trial_0"].info.status == "FINISHED"
    assert runs["trial_1"].info.status == "KILLED"  # stopped by the pruner
    study_run = runs["tune"]
    assert study_run.info.status == "FINISHED"
    best = sorted((metric.step, metric.value) for metric in client.get_metric_history(
        study_run.info.run_id, "tune/best_valid_mrr"))
    assert best == [(0, pytest.approx(good.value)), (1, pytest.approx(good.value))]
    for trial in (good, pruned):
        run = runs[f"trial_{trial.number}"]
        assert run.data.tags[PARENT_RUN_TAG] == study_run.info.run_id  # nested in the study's
        assert float(run.data.params["lr"]) == trial.params["lr"]
        curve = sorted((metric.step, metric.value) for metric
                       in client.get_metric_history(run.info.run_id, "valid/mrr"))
        assert curve == [(step, pytest.approx(value)) for step, value in valid_curve(trial)]
        assert "epoch/loss" in run.data.metrics


def test_a_study_database_on_a_full_disk_is_one_line_and_the_study_goes_on(
        workspace: Path) -> None:
    """The study's database cannot be written (a file size limit below its size fails its
    writes as a full disk would): exit 75 naming it; the same command, with room again,
    finishes the study."""
    assert tune(workspace, "--trials", "1") == 0
    database = workspace / "checkpoints" / "tune" / "study.db"
    limit = 16 * 1024  # of about 110 kB: SQLite writes beyond this offset fail

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-m", "tessera", "tune", str(workspace / "config.yaml"), "-p",
               f"edge_paths={workspace / 'train'}", "--valid", str(workspace / "test"),
               "--space", str(workspace / "space.yaml"), "--trials", "3", "--quiet"]
    full = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit_file_size)
    lines = full.stderr.strip().splitlines()
    assert full.returncode == EXIT_TRANSIENT, full.stderr
    assert len(lines) == 1 and str(database) in lines[0], full.stderr
    assert tune(workspace, "--trials", "3") == 0
    finished = [t for t in study_of(workspace).trials if t.state == TrialState.COMPLETE]
    assert len(finished) == 3
