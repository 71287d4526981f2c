"""Reading a trainer's JSON log into progress: the lines `tessera.progress.Reporter` writes."""

from __future__ import annotations

import io
import json

import pytest

import tessera.progress
from tessera.progress import Reporter
from tessera_operator.progress import TrainingProgress, json_record, parse_progress


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
    assert json_record(line) == record


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
