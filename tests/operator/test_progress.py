"""Reading a trainer's JSON log into progress: the lines `tessera.progress.Reporter` writes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.planted import write_planted_graph

import tessera.progress
from tessera.log_records import parse_record
from tessera.progress import Reporter
from tessera_operator.progress import (
    TrainingProgress,
    log_read_failure,
    parse_progress,
    run_fraction,
)


def trainer_log(monkeypatch: pytest.MonkeyPatch, *, finish: bool) -> list[str]:
    """A log written the way the training coordinator reports: 3 epochs of 100 edges."""
    monkeypatch.setattr(tessera.progress, "JSON_INTERVAL", 0.0)  # every update is a line
    stream = io.StringIO()
    reporter = Reporter("json", stream)
    with reporter.task("train", total=300, unit="edges") as task:
        for epoch, loss in ((1, 0.9), (2, 0.5), (3, 0.25)):
            task.advance(100, epoch=f"{epoch}/3", bucket="(0, 0)", loss=loss, mrr=loss / 2)
            if not finish and epoch == 2:
                return stream.getvalue().splitlines()
    reporter.event("training finished", edges=300, seconds=1.5, edges_per_s=200,
                   checkpoint_version=3, checkpoint="s3://bucket/ckpt")
    return stream.getvalue().splitlines()


def test_a_running_trainers_log(monkeypatch: pytest.MonkeyPatch) -> None:
    progress = parse_progress(trainer_log(monkeypatch, finish=False))
    assert (progress.epoch, progress.num_epochs) == (2, 3)
    assert (progress.edges_done, progress.edges_total) == (200, 300)
    assert progress.fraction_done == pytest.approx(2 / 3)
    assert progress.loss == 0.5 and progress.metrics == {"mrr": 0.25}
    assert progress.edges_per_second is not None and progress.edges_per_second > 0
    assert progress.checkpoint_version is None and not progress.finished
    assert progress.time is not None


def test_a_finished_trainers_log(monkeypatch: pytest.MonkeyPatch) -> None:
    progress = parse_progress(trainer_log(monkeypatch, finish=True))
    assert progress.finished and progress.fraction_done == 1.0
    assert (progress.epoch, progress.loss, progress.checkpoint_version) == (3, 0.25, 3)
    assert progress.edges_per_second == 200.0  # the summary's rate wins over the running one
    assert progress.metrics == {"mrr": 0.125}


@pytest.mark.slow
def test_what_a_real_training_run_prints_is_what_the_operator_reads(tmp_path: Path) -> None:
    # The contract end to end: `tessera train --log-format json`, as a trainer pod runs it
    # (2 epochs of one bucket, 2 edge chunks each: 4 checkpoints), folded by the operator.
    graph = write_planted_graph(tmp_path / "graph", num_partitions=1, num_edges=2000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=2, num_edge_chunks=2)))
    run = subprocess.run([sys.executable, "-m", "tessera", "train", str(config),
                          "--log-format", "json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    first = next(parse_record(line) for line in lines if '"progress"' in line)
    started = parse_progress([json.dumps(first)])
    assert (started.epoch, started.num_epochs, started.buckets_total) == (1, 2, 4)
    assert started.edges_done and started.edges_total and started.loss is not None
    assert started.estimated_completion is not None and not started.finished
    progress = parse_progress(lines)
    assert progress.finished and progress.fraction_done == 1.0
    assert (progress.epoch, progress.num_epochs) == (2, 2)
    assert (progress.checkpoint_version, progress.chunks_done, progress.chunks_total) == (4, 4, 4)
    assert progress.edges_total == started.edges_total
    assert progress.edges_per_second and progress.edges_per_second > 0
    assert progress.loss is not None and progress.time is not None


def test_later_records_override_earlier_ones_and_noise_is_skipped() -> None:
    lines = [
        '{"progress": "train", "done": 10, "total": 100, "rate": 5.0, "epoch": "1/4"}',
        "WARNING: something a library printed",
        '{"progress": "import", "done": 99, "total": 100}',
        "{not json",
        "[1, 2]",
        '{"progress": "train", "done": 50, "total": 100, "rate": "fast", "loss": NaN}',
        '{"event": "bucket trained", "stats": {"count": 5, "metrics": {"loss": 0.7}}, '
        '"eval_stats_after": {"mrr": 0.4, "hits@10": 0.8, "mean_rank": 3.5, "auc": 0.9}}',
        '{"event": "note", "epoch": true, "buckets_done": 6, "buckets_total": 8}',
    ]
    progress = parse_progress(lines)
    assert (progress.edges_done, progress.edges_total) == (50, 100)
    assert progress.edges_per_second == 5.0  # "fast" is not a rate
    assert progress.epoch == 1 and progress.num_epochs == 4
    assert progress.loss == 0.7  # NaN is no loss; the bucket's nested loss is
    assert progress.metrics == {"mrr": 0.4, "hitsAt10": 0.8, "meanRank": 3.5, "auc": 0.9}
    assert (progress.buckets_done, progress.buckets_total) == (6, 8)


@pytest.mark.parametrize(("line", "record"), [
    ('{"a": 1}', {"a": 1}),
    ('  {"a": 1}  ', {"a": 1}),
    ('"text"', None),
    ("[]", None),
    ("tessera train: error: x", None),
    ('{"a": ', None),
])
def test_json_record(line: str, record: dict[str, int] | None) -> None:
    assert parse_record(line) == record


def test_an_empty_log_says_nothing() -> None:
    assert parse_progress([]) == TrainingProgress()
    assert TrainingProgress().fraction_done is None
    assert parse_progress([json.dumps({"progress": "train", "done": 5, "total": 0})]
                          ).fraction_done is None


def test_a_summary_with_the_last_evaluation() -> None:
    progress = parse_progress([
        '{"event": "training finished", "edges": 900, "seconds": 3.0, "edges_per_s": 300, '
        '"loss": null, "eval_count": 50, "eval_mrr": 0.61, "eval_hits@1": 0.5, '
        '"eval_hits@10": 0.9, "eval_mean_rank": 2.5, "checkpoint_version": 4, '
        '"checkpoint": "s3://b/c"}'])
    assert progress.finished and progress.checkpoint_version == 4 and progress.loss is None
    assert progress.metrics == {"mrr": 0.61, "hitsAt1": 0.5, "hitsAt10": 0.9, "meanRank": 2.5}


def commit(time: float, chunks: int, total: int = 8, epoch: int | None = None) -> str:
    return json.dumps({"time": time, "event": "checkpoint committed",
                       "checkpoint_version": chunks, "epoch": epoch or chunks,
                       "chunks_done": chunks, "chunks_total": total})


def record(time: float, done: float, eta: float | None, epoch: str = "1/8") -> str:
    return json.dumps({"time": time, "progress": "train", "done": done, "total": 800,
                       "rate": 10.0, "eta_s": eta, "epoch": epoch})


@pytest.mark.parametrize(("lines", "completion"), [
    ([], None),
    ([record(100.0, 100, 70.0)], 170.0),  # the trainer's own estimate
    ([record(100.0, 100, None)], None),  # too early for one
    ([commit(100.0, 1)], None),  # one commit measures no rate
    ([commit(100.0, 1), commit(110.0, 2)], 170.0),  # 1 chunk in 10 s, 6 to go
    ([record(100.0, 100, 500.0), commit(105.0, 1), commit(110.0, 2)], 140.0),  # fresher
    ([commit(105.0, 1), commit(110.0, 2), record(111.0, 200, 100.0)], 211.0),  # fresher
    ([commit(100.0, 1), commit(100.0, 1)], None),  # no time passed, no rate
], ids=["nothing", "record", "record without eta", "one commit", "two commits",
        "commits after a record", "record after commits", "repeated commit"])
def test_when_the_run_should_finish(lines: list[str], completion: float | None) -> None:
    assert parse_progress(lines).estimated_completion == completion


def test_commits_say_how_much_of_the_whole_run_is_done() -> None:
    progress = parse_progress([record(100.0, 10, None, "1/4"), commit(110.0, 3, total=12,
                                                                      epoch=1)])
    assert (progress.chunks_done, progress.chunks_total, progress.epoch) == (3, 12, 1)
    assert progress.checkpoint_version == 3 and progress.time == 110.0


@pytest.mark.parametrize(("edges", "chunks", "epoch", "fraction"), [
    (None, (None, None), (None, None), None),
    (0.25, (None, None), (None, 8), 0.25),
    # 5/8 with 12%: the epoch says at least 4 of 8 epochs are done
    (0.12, (None, None), (5, 8), 0.5),
    (0.12, (5, 8), (5, 8), 5 / 8),  # the commit of epoch 5's only chunk
    (0.70, (5, 8), (6, 8), 0.70),  # mid-chunk, the trainer's count is ahead
    # a resumed process counts its own part only: 10% of the last half of the run
    (0.10, (4, 8), (5, 8), 0.5),
    (None, (3, 0), (None, None), None),
    (1.5, (None, None), (None, None), 1.0),
], ids=["nothing", "edges", "epoch floor", "commit", "edges ahead", "resumed",
        "no chunk total", "bounded"])
def test_the_share_of_the_run_is_the_most_known_to_be_done(
        edges: float | None, chunks: tuple[int | None, int | None],
        epoch: tuple[int | None, int | None], fraction: float | None) -> None:
    assert run_fraction(edges, *chunks, *epoch) == (
        None if fraction is None else pytest.approx(fraction))


@pytest.mark.parametrize(("status", "error", "says"), [
    (503, "ApiError", "pod log read failed (HTTP 503)"),
    (500, "ApiError", "pod log read failed (HTTP 500)"),
    (403, "ApiError", "pod log read refused (HTTP 403): the operator's role needs get on "
                      "pods/log"),
    (None, "ClientConnectorError", "pod log read failed (ClientConnectorError)"),
])
def test_why_a_log_read_failed(status: int | None, error: str, says: str) -> None:
    assert log_read_failure(status, error) == says
    assert TrainingProgress.unreadable(says) == TrainingProgress(unavailable=says)
