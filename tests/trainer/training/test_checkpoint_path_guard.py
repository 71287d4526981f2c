"""What `tessera train` does with a checkpoint path it finds: it never deletes the complete
checkpoint, and never writes where another live run writes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.storage.lease import EXPIRY_S, HEARTBEAT_INTERVAL_S, LEASE_FILE, LeaseRecord

TRAIN_TIMEOUT_S = 120


def tessera_train(config_path: Path, *params: str,
                  log_format: str = "--quiet") -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tessera", "train", str(config_path), log_format]
    for param in params:
        command += ["-p", param]
    return subprocess.run(command, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)


def small_run(tmp_path: Path, **overrides: object) -> tuple[PlantedGraph, Path]:
    graph = write_planted_graph(tmp_path, 2, num_entities=200, num_edges=2000)
    config_path = tmp_path / "config.json"
    config = graph.config(num_epochs=1, num_edge_chunks=2, dimension=8)
    config_path.write_text(json.dumps({**config, **overrides}))
    return graph, config_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def test_a_version_file_naming_missing_files_keeps_the_complete_checkpoint(
        tmp_path: Path) -> None:
    graph, config_path = small_run(tmp_path)
    assert tessera_train(config_path).returncode == 0
    checkpoints = Path(graph.config()["checkpoint_path"])
    assert (checkpoints / "checkpoint_version.txt").read_text() == "2\n"
    (checkpoints / "checkpoint_version.txt").write_text("3\n")  # a hand edit gone wrong
    before = snapshot(checkpoints)

    failed = tessera_train(config_path, "num_epochs=2")

    assert failed.returncode == EXIT_BAD_INPUT
    assert failed.stderr == (
        f"tessera train: error: {checkpoints}/checkpoint_version.txt: names version 3, but "
        "its file(s) model.v3.h5, embeddings_node_0.v3.h5, embeddings_node_1.v3.h5 are "
        "missing; complete version(s) here: 2. Nothing was deleted: put the missing file(s) "
        "back, or write 2 into checkpoint_version.txt to resume from version 2\n")
    assert snapshot(checkpoints) == before  # every file of version 2, byte for byte

    (checkpoints / "checkpoint_version.txt").write_text("2\n")  # as the message says
    resumed = tessera_train(config_path, "num_epochs=2")
    assert resumed.returncode == 0, resumed.stderr
    assert (checkpoints / "checkpoint_version.txt").read_text() == "4\n"  # epoch 2 only: resumed


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str],
               timeout: float = TRAIN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the run ended first: {process.communicate()}"
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.01)


def committed_version(checkpoints: Path) -> int:
    try:
        return int((checkpoints / "checkpoint_version.txt").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def start_train(config_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tessera", "train", str(config_path), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_a_second_run_on_a_checkpoint_path_in_use_is_refused_and_the_first_finishes(
        tmp_path: Path) -> None:
    graph, config_path = small_run(tmp_path, num_epochs=6, num_edge_chunks=4)
    checkpoints = Path(graph.config()["checkpoint_path"])
    first = start_train(config_path, "--quiet")
    try:
        wait_until(lambda: committed_version(checkpoints) >= 1, first)
        lease = json.loads((checkpoints / LEASE_FILE).read_text())
        # Frozen while the second run starts, however fast this machine trains the first.
        os.killpg(first.pid, signal.SIGSTOP)
        second = tessera_train(config_path)
        os.killpg(first.pid, signal.SIGCONT)

        assert second.returncode == EXIT_TRANSIENT
        assert second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith(
            f"tessera train: error: {checkpoints}/{LEASE_FILE}: the checkpoint path is in use "
            f"by tessera train (pid {first.pid} on host {socket.gethostname()}) since "
            f"{lease['started']}, last heartbeat ")
        assert "wait for that run to end or stop it" in second.stderr
        assert first.wait(timeout=TRAIN_TIMEOUT_S) == 0, first.communicate()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert committed_version(checkpoints) == 6 * 4  # one version per chunk, none lost
    assert sorted(p.name for p in checkpoints.iterdir() if ".v" in p.name) == [
        "embeddings_node_0.v24.h5", "embeddings_node_1.v24.h5", "model.v24.h5"]
    assert not (checkpoints / LEASE_FILE).exists()  # released at the end


def test_the_rerun_of_a_killed_run_takes_its_lease_over_at_once(tmp_path: Path) -> None:
    graph, config_path = small_run(tmp_path, num_epochs=4, num_edge_chunks=4)
    checkpoints = Path(graph.config()["checkpoint_path"])
    killed = start_train(config_path, "--quiet")
    wait_until(lambda: committed_version(checkpoints) >= 2, killed)
    os.killpg(killed.pid, signal.SIGKILL)  # the trainer and its workers
    killed.wait()
    assert json.loads((checkpoints / LEASE_FILE).read_text())["pid"] == killed.pid

    began = time.monotonic()
    rerun = tessera_train(config_path, log_format="--log-format=json")
    assert rerun.returncode == 0, rerun.stderr
    assert time.monotonic() - began < EXPIRY_S  # not waiting for the lease to expire
    events = [json.loads(line) for line in rerun.stderr.splitlines()]  # the log
    takeover = [e for e in events if e.get("event") == "took over the checkpoint lease of a "
                                                      "stopped run"]
    assert len(takeover) == 1
    assert takeover[0]["previous"].endswith(f"its process {killed.pid} on this host is gone")
    assert committed_version(checkpoints) == 4 * 4


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_lease_from_another_host_blocks_training_until_it_expires_but_not_eval(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    overrides: dict[str, object] = {}
    if backend == "s3":
        s3_dir = request.getfixturevalue("s3_dir")
        overrides = {"checkpoint_path": s3_dir.url, "storage_options": s3_dir.storage_options}
    graph, config_path = small_run(tmp_path, **overrides)
    assert tessera_train(config_path).returncode == 0
    store = CheckpointStore(Directory(str(overrides.get("checkpoint_path",
                                                         graph.config()["checkpoint_path"])),
                                      overrides.get("storage_options")))  # type: ignore[arg-type]
    now = datetime.now(timezone.utc).replace(microsecond=0)
    elsewhere = LeaseRecord("t0", "tessera train", "trainer-0.old-node", 1, now, now,
                            now + timedelta(seconds=EXPIRY_S))
    store.directory.write_text(LEASE_FILE, elsewhere.to_json())

    refused = tessera_train(config_path, "num_epochs=2")
    assert refused.returncode == EXIT_TRANSIENT
    assert refused.stderr == (f"tessera train: error: {store.directory.url}/{LEASE_FILE}: the "
                              f"checkpoint path is in use by {elsewhere.describe()}; wait for "
                              "that run to end or stop it (a stopped run's lease is taken over "
                              "at once on its own host, elsewhere once it expires)\n")
    assert store.current_version() == 2
    evaluated = subprocess.run([sys.executable, "-m", "tessera", "eval", str(config_path),
                                "--quiet"], capture_output=True, text=True,
                               timeout=TRAIN_TIMEOUT_S)  # reading needs no lease
    assert evaluated.returncode == 0, evaluated.stderr

    expired = LeaseRecord("t0", "tessera train", "trainer-0.old-node", 1,
                          now - timedelta(hours=2), now - timedelta(hours=1),
                          now - timedelta(hours=1) + timedelta(seconds=EXPIRY_S))
    store.directory.write_text(LEASE_FILE, expired.to_json())
    resumed = tessera_train(config_path, "num_epochs=2")
    assert resumed.returncode == 0, resumed.stderr
    assert store.current_version() == 4
    assert LEASE_FILE not in store.directory.listdir()


@pytest.mark.slow
def test_a_run_whose_lease_was_taken_over_stops_at_its_next_heartbeat(tmp_path: Path) -> None:
    graph, config_path = small_run(tmp_path, num_epochs=500)
    checkpoints = Path(graph.config()["checkpoint_path"])
    run = start_train(config_path, "--quiet")
    try:
        wait_until(lambda: committed_version(checkpoints) >= 1, run)
        now = datetime.now(timezone.utc).replace(microsecond=0)
        taker = LeaseRecord("t1", "tessera train", "trainer-0.new-node", 1, now, now,
                            now + timedelta(seconds=EXPIRY_S))
        Directory(str(checkpoints)).write_text(LEASE_FILE, taker.to_json())
        _, stderr = run.communicate(timeout=HEARTBEAT_INTERVAL_S * 3)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == EXIT_TRANSIENT
    assert stderr == (f"tessera train: error: {checkpoints}/{LEASE_FILE}: the lease on this "
                      f"checkpoint path was taken over by {taker.describe()}; stopping, so "
                      "that two runs never write one checkpoint\n")
    assert (checkpoints / LEASE_FILE).read_text() == taker.to_json()  # left to its holder
    version = committed_version(checkpoints)
    assert CheckpointStore(Directory(str(checkpoints))).read_metadata(version)
