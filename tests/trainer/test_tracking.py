"""Experiment tracking: a real `tessera train` writes event files that TensorBoard's own
reader reads back (`tracking: tensorboard`), or an MLflow run that MLflow's own client reads
back from a real MLflow store (`tracking: mlflow`), with the numbers of the run's
training_stats.json and JSON log."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.planted import PlantedGraph, write_planted_graph
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tessera.cli import main
from tessera.config.validate import parse_config
from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, TransientError
from tessera.log_records import CHUNK_STATS, event_record
from tessera.mlflow_runs import CHECKPOINT_PATH_TAG, run_parameters, wrapped_stop
from tessera.progress import Reporter
from tessera.stop_signals import Terminated
from tessera.storage.fs import Directory
from tessera.tracking import (
    CurveTracker,
    EpochTotals,
    TensorBoardFiles,
    chunk_scalars,
    summary_writer_class,
    tracking,
)

TRAIN_TIMEOUT_S = 180
CHUNK_TAGS = {"loss", "reg", "edges_per_s", "eval_mrr", "eval_hits_at_1", "eval_hits_at_10",
              "eval_hits_at_50", "eval_mean_rank", "eval_auc", "eval_loss"}


def train(graph: PlantedGraph, tmp_path: Path, *flags: str,
          **overrides: Any) -> list[dict[str, Any]]:
    """`tessera train --log-format json` of `graph` with tracking on (TensorBoard unless
    `tracking` says otherwise); its JSON records."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(
        eval_fraction=0.1, **{"tracking": "tensorboard", **overrides})))
    result = subprocess.run([sys.executable, "-m", "tessera", "train", str(config),
                             "--log-format", "json", *flags], capture_output=True, text=True,
                            timeout=TRAIN_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the event files in `log_dir`, by tag: (step, value)."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


def stats_lines(graph: PlantedGraph) -> list[dict[str, Any]]:
    text = (graph.root / "checkpoints" / "training_stats.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def cumulative_edges(lines: list[dict[str, Any]]) -> list[int]:
    total, steps = 0, []
    for line in lines:
        total += line["stats"]["count"]
        steps.append(total)
    return steps


def assert_chunks_match(curves: dict[str, list[tuple[int, float]]],
                        lines: list[dict[str, Any]]) -> None:
    """One point per training_stats.json line in every chunk curve, at the edges trained so
    far, with the line's figure (TensorBoard keeps float32)."""
    assert {tag.removeprefix("chunk/") for tag in curves if tag.startswith("chunk/")} \
        == CHUNK_TAGS
    expected = {"loss": [line["stats"]["metrics"]["loss"] for line in lines],
                "edges_per_s": [line["stats"]["count"] / line["seconds"] for line in lines],
                "eval_mrr": [line["eval_stats_after"]["mrr"] for line in lines],
                "eval_hits_at_10": [line["eval_stats_after"]["hits@10"] for line in lines]}
    for name, values in expected.items():
        steps = [step for step, _ in curves[f"chunk/{name}"]]
        assert steps == cumulative_edges(lines), name
        assert [value for _, value in curves[f"chunk/{name}"]] == pytest.approx(values,
                                                                                 rel=1e-6)


def test_tensorboard_curves_hold_the_stats_of_the_run_and_of_a_resumed_one(
        tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", num_partitions=2, num_edges=4000)
    records = train(graph, tmp_path, num_epochs=2)
    log_dir = graph.root / "checkpoints" / "tensorboard"  # the default: beside the checkpoints
    curves = scalars(log_dir)
    lines = stats_lines(graph)
    assert len(lines) == 2 * 4  # two epochs of 2x2 buckets
    assert_chunks_match(curves, lines)

    # The JSON log's last figures are the last chunk's.
    finished = next(r for r in records if r.get("event") == "training finished")
    assert finished["loss"] == round(curves["chunk/loss"][-1][1], 5)
    assert finished["eval_mrr"] == round(curves["chunk/eval_mrr"][-1][1], 4)

    # One point per epoch, at its number: the edge-weighted mean of its chunks.
    for epoch in (1, 2):
        in_epoch = [line for line in lines if line["epoch_idx"] == epoch - 1]
        edges = sum(line["stats"]["count"] for line in in_epoch)
        ranked = sum(line["eval_stats_after"]["count"] for line in in_epoch)
        loss = sum(line["stats"]["metrics"]["loss"] * line["stats"]["count"]
                   for line in in_epoch) / edges
        mrr = sum(line["eval_stats_after"]["mrr"] * line["eval_stats_after"]["count"]
                  for line in in_epoch) / ranked
        assert curves["epoch/loss"][epoch - 1] == (epoch, pytest.approx(loss, rel=1e-6))
        assert curves["epoch/eval_mrr"][epoch - 1] == (epoch, pytest.approx(mrr, rel=1e-6))
    assert [step for step, _ in curves["epoch/edges_per_s"]] == [1, 2]
    assert all(value > 0 for _, value in curves["epoch/edges_per_s"])

    # A rerun with one epoch more goes on from the checkpoint: its points continue the curves
    # (in an event file of its own) rather than start again at 0.
    train(graph, tmp_path, num_epochs=3)
    assert len(list(log_dir.iterdir())) == 2
    curves = scalars(log_dir)
    lines = stats_lines(graph)
    assert len(lines) == 3 * 4
    assert_chunks_match(curves, lines)
    assert [step for step, _ in curves["epoch/loss"]] == [1, 2, 3]


def test_a_log_dir_on_s3_gets_the_event_files(tmp_path: Path, s3_dir: Any) -> None:
    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=2000)
    train(graph, tmp_path, num_epochs=2, tracking_path=s3_dir.url,
          storage_options=s3_dir.storage_options)
    remote = Directory(s3_dir.url, s3_dir.storage_options)
    local = Directory(str(tmp_path / "downloaded"))
    names = remote.listdir()
    assert len(names) == 1 and names[0].startswith("events.out.tfevents.")
    remote.copy(names[0], local)
    curves = scalars(tmp_path / "downloaded")
    assert_chunks_match(curves, stats_lines(graph))
    assert not (graph.root / "checkpoints" / "tensorboard").exists()


def test_trainer_0_of_a_distributed_job_writes_every_trainers_chunks(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", num_partitions=4, num_edges=4000)
    train(graph, tmp_path, "--local-cluster", num_epochs=2, num_machines=2)
    log_dir = graph.root / "checkpoints" / "tensorboard"
    assert len(list(log_dir.iterdir())) == 1  # the other trainer writes none
    lines = stats_lines(graph)
    assert len(lines) == 2 * 16
    curves = scalars(log_dir)
    assert_chunks_match(curves, lines)
    assert [step for step, _ in curves["epoch/loss"]] == [1, 2]


def refused_training(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     **overrides: Any) -> tuple[int, str]:
    """`tessera train` of a small graph with `overrides`, expected to stop before any work:
    its exit code and its one error line."""
    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=500)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(**overrides)))
    code = main(["train", str(config), "--quiet"])
    error = capsys.readouterr().err.strip()
    assert "\n" not in error, error
    assert not (graph.root / "checkpoints").exists()  # refused before any work
    return code, error


@pytest.mark.parametrize(("tracker", "module", "extra"), [
    ("tensorboard", "tensorboardX", "tracking"), ("mlflow", "mlflow", "mlflow")])
def test_without_its_package_training_is_refused_naming_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tracker: str, module: str, extra: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails, as if not installed
    code, error = refused_training(tmp_path, capsys, tracking=tracker)
    assert code == EXIT_BAD_INPUT and f"pip install 'tessera[{extra}]'" in error


def test_only_the_committing_trainer_tracks(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer 0 commits, with every trainer's stats; the others have nothing to write and
    need no tensorboardX."""
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=500)
    reporter = Reporter("quiet")
    with tracking(parse_config(graph.config(tracking="tensorboard")), reporter, rank=1):
        assert reporter.listeners == []


def test_writers_of_one_log_dir_opened_within_a_second_keep_each_others_points(
        tmp_path: Path) -> None:
    """A continued study or a resumed run may open its writer within the second of the one
    before: both files stay, and read back in the order written (steps 0 then 1)."""
    for step in (0, 1):
        files = TensorBoardFiles(Directory(str(tmp_path)), summary_writer_class())
        files.write([("tune/best_valid_mrr", 0.5 + step, step)])
        files.close()
    assert len(list(tmp_path.iterdir())) == 2
    assert scalars(tmp_path)["tune/best_valid_mrr"] == [(0, 0.5), (1, 1.5)]


def test_figures_that_are_not_numbers_are_left_out() -> None:
    """A held-out set too small to rank has NaN metrics: no point rather than a NaN one."""
    line = {"stats": {"count": 10, "metrics": {"loss": 2.0, "reg": 0.0}}, "seconds": 0.5,
            "eval_stats_after": {"count": 0, "mrr": float("nan"), "hits@1": float("nan")}}
    assert chunk_scalars(line) == {"loss": 2.0, "reg": 0.0, "edges_per_s": 20.0}
    epoch = EpochTotals()
    epoch.add(line)
    assert set(epoch.scalars(epoch.started + 1.0)) == {"loss", "reg", "edges_per_s"}


def test_an_upload_that_fails_is_logged_and_training_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise TransientError("s3://bucket/tb: storage unreachable; retry")

    monkeypatch.setattr(Directory, "copy", refuse)
    tracker = CurveTracker(TensorBoardFiles(Directory("memory://tessera-tracking-test"),
                                            summary_writer_class()))
    line = {"stats": {"count": 10, "metrics": {"loss": 2.0}}, "seconds": 0.5}
    tracker.record(event_record(CHUNK_STATS, epoch=1, stats=[line], epoch_ended=True))
    tracker.close()
    assert caplog.text.count("tracking files not uploaded") == 2  # the checkpoint's, the end's


# --- MLflow ----------------------------------------------------------------------------------

@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real MLflow tracking store (SQLite, MLflow's own local default), empty."""
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def mlflow_runs(uri: str) -> list[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tessera")
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def mlflow_curves(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric's history of a run, by name: (step, value) in step order."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return {name: sorted((metric.step, metric.value)
                         for metric in client.get_metric_history(run_id, name))
            for name in client.get_run(run_id).data.metrics}


def test_an_mlflow_run_holds_the_curves_and_config_of_the_run_and_of_a_resumed_one(
        tmp_path: Path, mlflow_uri: str) -> None:
    graph = write_planted_graph(tmp_path / "graph", num_partitions=2, num_edges=4000)
    train(graph, tmp_path, num_epochs=2, tracking="mlflow", tracking_path=mlflow_uri)
    (run,) = mlflow_runs(mlflow_uri)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "checkpoints"  # the checkpoint folder's name
    assert run.data.tags[CHECKPOINT_PATH_TAG] == str(graph.root / "checkpoints")
    params = run.data.params
    assert params["num_epochs"] == "2" and params["tracking"] == "mlflow"
    assert json.loads(params["relations"])[0]["name"] == graph.config()["relations"][0]["name"]
    lines = stats_lines(graph)
    assert_chunks_match(mlflow_curves(mlflow_uri, run.info.run_id), lines)
    assert not (graph.root / "checkpoints" / "tensorboard").exists()

    # A rerun with one epoch more goes on in the same run, its points after the first ones.
    train(graph, tmp_path, num_epochs=3, tracking="mlflow", tracking_path=mlflow_uri)
    (resumed,) = mlflow_runs(mlflow_uri)
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert resumed.data.params["num_epochs"] == "2"  # MLflow keeps a parameter's first value
    curves = mlflow_curves(mlflow_uri, run.info.run_id)
    assert_chunks_match(curves, stats_lines(graph))
    assert [step for step, _ in curves["epoch/loss"]] == [1, 2, 3]
    assert all(value > 0 for _, value in curves["epoch/edges_per_s"])

    # Another checkpoint path is another run.
    other = str(graph.root / "other")
    train(graph, tmp_path, num_epochs=1, tracking="mlflow", tracking_path=mlflow_uri,
          checkpoint_path=other)
    assert sorted(r.info.run_name for r in mlflow_runs(mlflow_uri)) == ["checkpoints", "other"]

    # Emptied to train afresh, a path gets a new run, whose curves start again.
    (first_other,) = [r for r in mlflow_runs(mlflow_uri) if r.info.run_name == "other"]
    shutil.rmtree(other)
    train(graph, tmp_path, num_epochs=1, tracking="mlflow", tracking_path=mlflow_uri,
          checkpoint_path=other)
    runs = [r for r in mlflow_runs(mlflow_uri) if r.info.run_name == "other"]
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    for run in runs:
        assert [step for step, _ in mlflow_curves(mlflow_uri, run.info.run_id)["epoch/loss"]] \
            == [1]
    assert first_other.info.run_id in {r.info.run_id for r in runs}


@pytest.mark.parametrize(("stop", "status"), [(RuntimeError("a bucket went missing"), "FAILED"),
                                              (KeyboardInterrupt(), "KILLED"),
                                              (Terminated(), "KILLED")])
def test_an_mlflow_run_ends_with_the_trainings_outcome(tmp_path: Path, mlflow_uri: str,
                                                       stop: BaseException,
                                                       status: str) -> None:
    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=500)
    config = parse_config(graph.config(tracking="mlflow", tracking_path=mlflow_uri))
    reporter = Reporter("quiet")
    line = {"stats": {"count": 10, "metrics": {"loss": 2.0}}, "seconds": 0.5}
    with pytest.raises(type(stop)), tracking(config, reporter):
        reporter.event(CHUNK_STATS, epoch=1, stats=[line], epoch_ended=False)
        raise stop
    (run,) = mlflow_runs(mlflow_uri)
    assert run.info.status == status
    assert mlflow_curves(mlflow_uri, run.info.run_id)["chunk/loss"] == [(10, 2.0)]


def test_an_unreachable_mlflow_server_is_one_line_worth_a_retry_and_no_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a closed port, at once
    code, error = refused_training(tmp_path, capsys, tracking="mlflow",
                                   tracking_path="http://alice:hunter2@127.0.0.1:9")
    assert code == EXIT_TRANSIENT and "tracking_path: MLflow at http://" in error, error
    assert "hunter2" not in error and "retry, or set tracking: none" in error


@pytest.mark.timeout(90)  # MLflow's own retries took about four minutes, silent
def test_an_unreachable_mlflow_server_is_given_up_on_within_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    code, error = refused_training(tmp_path, capsys, tracking="mlflow",
                                   tracking_path="http://127.0.0.1:9")
    assert code == EXIT_TRANSIENT and "retry, or set tracking: none" in error, error


def test_a_stop_while_mlflow_retries_is_a_stop_not_a_failure() -> None:
    # MLflow wraps what its HTTP retries raise, SIGTERM's Terminated included: unwrapped, the
    # command exits 143 as a stop, not 75 as a server to retry.
    try:
        try:
            raise Terminated
        except Terminated as stop:
            raise RuntimeError("API request failed") from stop
    except RuntimeError as wrapped:
        assert isinstance(wrapped_stop(wrapped), Terminated)
    assert wrapped_stop(RuntimeError("API request failed")) is None


def test_an_unknown_tracking_uri_is_bad_input(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, error = refused_training(tmp_path, capsys, tracking="mlflow",
                                   tracking_path="nosuch://x")
    assert code == EXIT_BAD_INPUT and "tracking_path: MLflow at nosuch://x" in error, error


def test_run_parameters_hold_no_secret_and_fit_mlflow() -> None:
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    parameters = run_parameters({
        "lr": 0.1, "checkpoint_path": "s3://bucket/run", "edge_paths": ["ftp://bob:pw@host/e"],
        "storage_options": {"key": "AKIAEXAMPLE", "secret": "s3cr3t",
                            "endpoint_url": "http://127.0.0.1:8333"},
        "relations": [{"name": "r" * 50, "lhs": "a", "rhs": "b"}] * 200})
    assert parameters["lr"] == "0.1" and parameters["checkpoint_path"] == "s3://bucket/run"
    text = json.dumps(parameters)
    assert "AKIAEXAMPLE" not in text and "s3cr3t" not in text and "pw@" not in text
    assert "127.0.0.1:8333" in parameters["storage_options"]
    assert len(parameters["relations"]) == MAX_PARAM_VAL_LENGTH


def test_points_the_mlflow_store_refuses_are_logged_and_training_goes_on(
        tmp_path: Path, mlflow_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    from mlflow import MlflowClient

    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=500)
    config = parse_config(graph.config(tracking="mlflow", tracking_path=mlflow_uri))
    reporter = Reporter("quiet")
    line = {"stats": {"count": 10, "metrics": {"loss": 2.0}}, "seconds": 0.5}
    with tracking(config, reporter):  # ends without an error: the run trained
        (run,) = mlflow_runs(mlflow_uri)
        MlflowClient(tracking_uri=mlflow_uri).delete_run(run.info.run_id)  # the store refuses
        reporter.event(CHUNK_STATS, epoch=1, stats=[line], epoch_ended=True)
    assert "tracking points not logged" in caplog.text
