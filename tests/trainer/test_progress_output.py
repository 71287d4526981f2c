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


def test_human_rates_and_sizes_read_in_units() -> None:
    """`11.4k edges/s` and `4.4 MB/s`, as people read them; JSON keeps the plain numbers."""
    stream = Pipe()
    reporter = Reporter("human", stream)
    reporter.event("partition traffic", bytes_received=4_400_000, bytes_per_s=4_412_345.6,
                   edges_per_s=11_360.5, seconds=12345.6)
    reporter.summary("training finished", {"edges_per_s": 11_360, "loss": 0.01234})
    assert stream.getvalue().splitlines() == [
        "partition traffic  bytes_received=4.4 MB  4.4 MB/s  11.4k edges/s  seconds=12,346",
        "training finished", "  edges_per_s  11.4k edges/s", "  loss         0.01234"]
    stream = Pipe()
    Reporter("json", stream).event("partition traffic", edges_per_s=11_360.5)
    assert json.loads(stream.getvalue())["edges_per_s"] == 11_360.5


def test_a_result_printed_on_stdout_is_not_repeated_in_human_output() -> None:
    for mode in ("human", "json"):
        stream = Pipe()
        reporter = Reporter(mode, stream)  # type: ignore[arg-type]
        reporter.fields_printed_as_result.add("evaluation finished")
        reporter.event("evaluation finished", mrr=0.5)
        assert ("mrr" in stream.getvalue()) == (mode == "json")


def test_the_eta_leaves_out_the_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 s of start-up, then 100 edges a second: after 20 s of work the ETA is the 60 s
    left, not the 90 s that the rate over the whole task (start-up included) would give."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    task = Reporter("quiet", Pipe()).task("train", total=8000, unit="edges").__enter__()
    clock[0] = 10.0
    for _ in range(20):
        clock[0] += 1.0
        task.advance(100)
    assert task.eta() == pytest.approx(60.0, rel=0.06)
    assert task.rate == pytest.approx(2000 / 30)  # the summary's rate keeps the start-up
