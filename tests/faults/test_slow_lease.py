"""Two runs that take one checkpoint lease while the storage is slow: one wins, the other
exits 75.

The lease is written whole and read back after a settle time; a contender whose write takes
longer than that used to land after the other's read-back, and both believed they held it.
On a local disk contenders now take the lease in turn; on any storage the settle time grows
with the write's own duration; and a run that finds its lease taken over after all ends any
error of its own with exit 75 (retry), not as bad input.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.planted import write_planted_graph

from tessera.config import parse_config
from tessera.errors import EXIT_TRANSIENT, FormatError
from tessera.progress import Reporter
from tessera.storage.fs import Directory
from tessera.storage.lease import LEASE_FILE, CheckpointLease, LeaseHeldError
from tessera.training.coordinator import checkpoint_lease


class SlowDirectory(Directory):
    """A directory whose writes of the lease file take `delay` seconds to land."""

    delay = 0.0

    def write_text(self, name: str, text: str) -> None:
        if name == LEASE_FILE:
            time.sleep(self.delay)
        super().write_text(name, text)


@pytest.mark.parametrize("slow_first", [0.5, 0.0])
def test_of_two_runs_taking_the_lease_on_a_slow_disk_one_wins(tmp_path: Path,
                                                              slow_first: float) -> None:
    slow = SlowDirectory(str(tmp_path))
    slow.delay = slow_first
    fast = Directory(str(tmp_path))
    leases = [CheckpointLease(slow, "tessera train", settle=0.05),
              CheckpointLease(fast, "tessera train", settle=0.05)]
    for index, lease in enumerate(leases):  # two threads stand for runs on two hosts
        lease.host = f"contender-{index}"
    outcomes: list[Any] = [None, None]

    def take(index: int) -> None:
        try:
            outcomes[index] = leases[index].acquire()
        except LeaseHeldError as error:
            outcomes[index] = error

    threads = [threading.Thread(target=take, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [not isinstance(outcome, LeaseHeldError) for outcome in outcomes]
    assert sorted(held) == [False, True], outcomes
    winner = leases[held.index(True)]
    assert json.loads((tmp_path / LEASE_FILE).read_text())["token"] == winner.token


def test_an_error_after_the_lease_was_taken_over_is_transient(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 1, num_edges=100)
    config = parse_config(graph.config())
    with pytest.raises(LeaseHeldError) as stopped, \
            checkpoint_lease(config, "tessera train", Reporter("quiet")) as lease:
        other = CheckpointLease(lease.directory, "tessera train")
        other._write()  # a contender's late write lands: the lease is its now
        raise FormatError("ckpt/model.v3.h5", "missing, so version 3 cannot be committed")
    assert stopped.value.exit_code == EXIT_TRANSIENT
    assert "taken over by tessera train" in str(stopped.value)
