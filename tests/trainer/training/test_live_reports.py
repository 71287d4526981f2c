"""One progress thread per run: each block's report is called while it runs, never after."""

from __future__ import annotations

import threading
import time

from tessera.training.trained_edges import LiveReports


def test_each_block_is_reported_while_it_runs_and_not_after() -> None:
    calls = {"first": 0, "second": 0}
    with LiveReports(0.005) as live:
        for name in calls:
            with live.during(lambda name=name: calls.__setitem__(name, calls[name] + 1)):
                time.sleep(0.1)
            after_block = dict(calls)
        time.sleep(0.05)  # between blocks: nothing reported
        assert calls == after_block
    assert calls["first"] > 0 and calls["second"] > 0
    assert [t for t in threading.enumerate() if t.name == "tessera-progress"] == []


def test_a_block_whose_report_fails_is_no_longer_reported() -> None:
    """A closed terminal (OSError) ends the block's live line, not the next block's."""
    calls = {"failing": 0, "next": 0}

    def failing() -> None:
        calls["failing"] += 1
        raise OSError("the terminal went away")

    with LiveReports(0.005) as live:
        with live.during(failing):
            time.sleep(0.1)
        with live.during(lambda: calls.__setitem__("next", calls["next"] + 1)):
            time.sleep(0.1)
    assert calls["failing"] == 1
    assert calls["next"] > 0
