"""SIGKILL `tessera train` at random moments: the checkpoint stays readable and a restart finishes.

The embedding tables are made large relative to the edges, so that writing a checkpoint takes
a good share of the run and several kills land in the middle of one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from support.kills import wait_for, writing_a_file
from support.planted import write_planted_graph

from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory

NUM_ENTITIES = 60_000
DIMENSION = 64
NUM_PARTITIONS = 2
NUM_EPOCHS = 3
NUM_CHUNKS = 4
RUN_TIMEOUT_S = 120.0


def check_committed_checkpoint_is_readable(checkpoints: Path) -> int:
    """Open every file of the committed version with h5py; return the version (0: none)."""
    store = CheckpointStore(Directory(str(checkpoints)))
    version = store.current_version()
    if version == 0:
        return 0
    config = json.loads((checkpoints / "config.json").read_text())
    assert config["dimension"] == DIMENSION
    for part in range(NUM_PARTITIONS):
        with h5py.File(checkpoints / f"embeddings_node_{part}.v{version}.h5", "r") as file:
            assert file["embeddings"].shape == (NUM_ENTITIES // NUM_PARTITIONS, DIMENSION)
            assert file["embeddings"][-1].shape == (DIMENSION,)  # the last row is there
    with h5py.File(checkpoints / f"model.v{version}.h5", "r") as file:
        assert file["model/relations/0/operator/rhs/translation"].shape == (DIMENSION,)
    return version


def planted_training_run(tmp_path: Path) -> tuple[list[str], Path, CheckpointStore]:
    """The train command of a planted graph's run, its checkpoint folder and store."""
    graph = write_planted_graph(tmp_path, NUM_PARTITIONS, num_entities=NUM_ENTITIES,
                                num_communities=50, num_edges=40_000)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(graph.config(
        dimension=DIMENSION, num_epochs=NUM_EPOCHS, num_edge_chunks=NUM_CHUNKS)))
    command = [sys.executable, "-m", "tessera", "train", str(config_path), "--quiet"]
    checkpoints = Path(graph.config()["checkpoint_path"])
    return command, checkpoints, CheckpointStore(Directory(str(checkpoints)))


@pytest.mark.slow
def test_sigkill_never_leaves_an_unreadable_checkpoint(tmp_path: Path) -> None:
    command, checkpoints, store = planted_training_run(tmp_path)
    rng = random.Random(1234)
    versions = [0]
    kills_during_writes = 0
    for attempt in range(6):
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        if attempt % 2 == 0:  # the moment a checkpoint file is being written
            alive = wait_for(lambda: writing_a_file(checkpoints), process, RUN_TIMEOUT_S)
        else:  # a random moment after the run has committed something new
            # Only the version is read here: the run deletes older files as it goes.
            alive = wait_for(lambda last=versions[-1]: store.current_version() > last,
                             process, RUN_TIMEOUT_S)
            time.sleep(rng.uniform(0.0, 0.5))
        if not alive or process.poll() is not None:
            break
        during_write = writing_a_file(checkpoints)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        kills_during_writes += during_write
        versions.append(check_committed_checkpoint_is_readable(checkpoints))
    assert kills_during_writes >= 2, "no kill landed while a checkpoint was being written"
    assert versions == sorted(versions), f"a restart lost committed progress: {versions}"
    assert versions[-1] > 0, f"no run got as far as a checkpoint: {versions}"
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr
    final = check_committed_checkpoint_is_readable(checkpoints)
    assert final == NUM_EPOCHS * NUM_CHUNKS  # one version per chunk position, none skipped
    metadata = CheckpointStore(Directory(str(checkpoints))).read_metadata()
    assert (metadata["iteration/epoch_idx"], metadata["iteration/edge_chunk_idx"]) == (
        NUM_EPOCHS - 1, NUM_CHUNKS - 1)
    leftovers = [p.name for p in checkpoints.iterdir()
                 if p.name.endswith(".tmp") or (".v" in p.name and f".v{final}." not in p.name)]
    assert leftovers == []


def reading_a_partition(pid: int, checkpoints: Path) -> bool:
    """Whether the process has a committed or written partition file of `checkpoints` open
    (a temporary file being written does not count)."""
    try:
        paths = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:  # the process or one of its files went away meanwhile
        return False
    return any(Path(path).parent == checkpoints and Path(path).name.startswith("embeddings_")
               and path.endswith(".h5") for path in paths)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux's /proc")
def test_sigkill_while_the_next_bucket_is_read_ahead(tmp_path: Path) -> None:
    """Once a run has committed, every partition it reads is read ahead by the reader thread
    (two partitions: each chunk touches both, so there is nothing to carry over): a kill
    then leaves the committed checkpoint readable, and a restart finishes the run."""
    command, checkpoints, store = planted_training_run(tmp_path)
    environment = {**os.environ, "TESSERA_PREFETCH": "1"}
    versions = [0]
    for _ in range(3):
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                                   env=environment)
        alive = wait_for(lambda last=versions[-1]: store.current_version() > last, process,
                         RUN_TIMEOUT_S) and wait_for(
            lambda pid=process.pid: reading_a_partition(pid, checkpoints), process,
            RUN_TIMEOUT_S)
        if not alive:
            break
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        versions.append(check_committed_checkpoint_is_readable(checkpoints))
    assert len(versions) == 4, f"a run finished before a read ahead was caught: {versions}"
    assert versions == sorted(versions) and versions[-1] > 0, versions
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600,
                              env=environment)
    assert finished.returncode == 0, finished.stderr
    assert check_committed_checkpoint_is_readable(checkpoints) == NUM_EPOCHS * NUM_CHUNKS
