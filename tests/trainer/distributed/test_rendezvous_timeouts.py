"""A role whose peers never come stops with exit code 75 and says whom it waited for."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cluster_support import write_config
from support.planted import write_planted_graph

from tessera.distributed.local_cluster import free_port
from tessera.errors import EXIT_TRANSIENT


def run_role(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    finished = subprocess.run([sys.executable, "-m", "tessera", *args, "--log-format", "json",
                               "--rendezvous-timeout", "2"], capture_output=True, text=True,
                              timeout=60)
    return finished, time.monotonic() - started


def test_a_trainer_without_a_lock_server_names_the_address_it_tried(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=200)
    config = write_config(tmp_path / "config.json", graph.config(num_machines=2))
    address = f"tcp://127.0.0.1:{free_port()}"
    finished, seconds = run_role("train", str(config), "--rank", "1", "--init-method", address)
    assert finished.returncode == EXIT_TRANSIENT
    assert "tessera train: error: the lock server's rendezvous at 127.0.0.1:" in finished.stderr
    assert address.removeprefix("tcp://") in finished.stderr
    assert seconds < 30


def test_a_lock_server_names_the_roles_that_never_joined(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=200)
    config = write_config(tmp_path / "config.json",
                          graph.config(num_machines=2, num_partition_servers=1))
    finished, seconds = run_role("lock-server", str(config), "--init-method",
                                 f"tcp://127.0.0.1:{free_port()}")
    assert finished.returncode == EXIT_TRANSIENT
    assert "lock-server waited 2 s at the rendezvous 127.0.0.1:" in finished.stderr
    assert "but partition-server-0, trainer-0, trainer-1 never joined" in finished.stderr
    assert "[W" not in finished.stderr  # no C++ warnings, only the error
    assert seconds < 30
