"""Progress output: JSON lines for machines, aligned text for people, nothing when quiet."""

from __future__ import annotations

import io
import json

import pytest

from tessera import progress
from tessera.progress import Reporter


class Pipe(io.StringIO):
    """An output stream that is not a terminal (as in a pod)."""

    def isatty(self) -> bool:
        return False


def test_auto_mode_writes_json_lines_when_not_on_a_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "JSON_INTERVAL", 0.0)
    stream = Pipe()
    reporter = Reporter("auto", stream)
    with reporter.task("train", total=100, unit="edges") as task:
        task.advance(40, epoch="1/2")
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert records[0]["progress"] == "train" and records[0]["done"] == 40
    assert records[0]["total"] == 100 and records[0]["epoch"] == "1/2"
    assert records[0]["eta_s"] is not None and records[0]["rate"] > 0
    assert records[-1]["event"] == "train done" and records[-1]["edges"] == 40


def test_human_summary_is_an_aligned_table() -> None:
    stream = Pipe()
    Reporter("human", stream).summary("training finished", {"edges": 1234567, "mrr": 0.5})
    assert stream.getvalue().splitlines() == [
        "training finished", "  edges  1,234,567", "  mrr    0.5"]


def test_quiet_prints_nothing() -> None:
    stream = Pipe()
    reporter = Reporter("quiet", stream)
    reporter.event("imported", edges=3)
    reporter.summary("done", {"edges": 3})
    with reporter.task("train", total=10) as task:
        task.advance(10)
    assert stream.getvalue() == ""
