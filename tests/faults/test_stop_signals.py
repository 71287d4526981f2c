"""Ctrl-C and SIGTERM stop `tessera train` with one line, its lease released, nothing lost.

Ctrl-C reaches the whole process group (the trainer and its Hogwild worker processes);
SIGTERM is what a pod's deletion or `kill` sends to the trainer; thread workers stop at their
next batch. Either way: exit 128 + the
signal, one line on stderr and no traceback (not one per worker), the checkpoint lease
released (the next run starts at once, on any host), the committed version readable and
resumed by the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.kills import wait_for
from support.planted import write_planted_graph


@pytest.mark.parametrize(("stop", "to_group", "code", "workers"), [
    (signal.SIGINT, True, 130, "processes"), (signal.SIGTERM, False, 143, "processes"),
    (signal.SIGTERM, True, 143, "processes"), (signal.SIGTERM, False, 143, "threads")])
def test_a_stopped_run_says_one_line_and_releases_its_lease(
        tmp_path: Path, stop: signal.Signals, to_group: bool, code: int, workers: str) -> None:
    graph = write_planted_graph(tmp_path, 2, num_entities=2000, num_edges=12_000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=50, num_edge_chunks=2, workers=2)))
    checkpoints = Path(graph.config()["checkpoint_path"])
    command = [sys.executable, "-m", "tessera", "train", str(config), "--quiet"]
    env = {**os.environ, "TESSERA_HOGWILD": workers}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        assert wait_for(lambda: (checkpoints / "checkpoint_version.txt").exists(), process, 60)
        if to_group:
            os.killpg(process.pid, stop)
        else:
            process.send_signal(stop)
        _, error = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == code, error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1, error
    assert not (checkpoints / "training_lease.json").exists()
    version = int((checkpoints / "checkpoint_version.txt").read_text())
    more = subprocess.run([*command, "-p", "num_epochs=1", "--log-format", "json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert more.returncode == 0, more.stderr  # no lease in the way, the checkpoint readable
    assert int((checkpoints / "checkpoint_version.txt").read_text()) >= version
