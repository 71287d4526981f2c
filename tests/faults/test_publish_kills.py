"""Kills at exact moments of the checkpoint's multi-step publish: nothing lost, nothing twice.

A commit writes its journal, config.json and the version file, deletes the older version,
appends the chunk's statistics to training_stats.json and, at the end of a kept epoch, copies
the version into `epoch_N/`. One sequence of runs on one checkpoint path is killed (SIGKILL of
the process group) once between every two of those steps; each next run must resume right
after the newest complete version, and when the sequence has finished every chunk has exactly
one set of statistics, every kept epoch a complete copy, and nothing half-done is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import h5py
import pytest
from support.kills import first_commit
from support.planted import write_planted_graph

NUM_PARTITIONS = 2
NUM_CHUNKS = 2
NUM_EPOCHS = 6
FS = "tessera.storage.fs:Directory"
STORE = "tessera.storage.checkpoint:CheckpointStore"
# (method, its first argument, which call, before or after it): one kill per run, in order.
KILLS = [
    (f"{FS}.write_text", "checkpoint_version.txt", 1, "before"),  # a first commit, unfinished
    (f"{STORE}.append_stats", "*", 1, "before"),  # committed, statistics not yet appended
    (f"{FS}.delete", "commit_journal.json", 1, "before"),  # appended, journal not yet deleted
    (f"{FS}.copy", "*.h5", 1, "after"),  # in the middle of the copy into epoch_N/
    (f"{FS}.write_text", "checkpoint_version.txt", 1, "after"),  # the older version not deleted
    (f"{FS}.delete", "*.h5", 1, "after"),  # a deletion cut short
    (f"{FS}.write_text", "config.json", 1, "after"),  # between config.json and the version
]
RUN_TIMEOUT_S = 120


def committed_version(checkpoints: Path) -> int:
    path = checkpoints / "checkpoint_version.txt"
    return int(path.read_text()) if path.exists() else 0


def complete_versions(checkpoints: Path) -> list[int]:
    """The versions with every file, newest first."""
    names = {path.name for path in checkpoints.glob("*.h5")}
    versions = {int(name.rsplit(".v", 1)[1][:-3]) for name in names if ".v" in name}
    return sorted((v for v in versions if {f"model.v{v}.h5"} | {
        f"embeddings_node_{part}.v{v}.h5" for part in range(NUM_PARTITIONS)} <= names),
        reverse=True)


def read_every_dataset(folder: Path, version: int) -> None:
    for name in ["model", *(f"embeddings_node_{part}" for part in range(NUM_PARTITIONS))]:
        with h5py.File(folder / f"{name}.v{version}.h5", "r") as file:
            file.visititems(lambda _, item: item[()] if isinstance(item, h5py.Dataset) else None)


def run(config_path: Path, kill: tuple[str, str, int, str] | None) -> tuple[int, str]:
    command = ["train", str(config_path), "--log-format", "json"]
    if kill is None:
        argv = [sys.executable, "-m", "tessera", *command]
    else:
        argv = [sys.executable, "-m", "support.crash_at", *map(str, kill), "--", *command]
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    process = subprocess.run(argv, capture_output=True, text=True, env=env,
                             timeout=RUN_TIMEOUT_S, start_new_session=True)
    return process.returncode, process.stdout + process.stderr


@pytest.mark.timeout(600)
def test_kills_between_the_steps_of_a_commit_lose_and_repeat_nothing(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, NUM_PARTITIONS, num_edges=4000)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(graph.config(
        num_epochs=NUM_EPOCHS, num_edge_chunks=NUM_CHUNKS,
        checkpoint_preservation_interval=1)))
    checkpoints = Path(graph.config()["checkpoint_path"])

    for kill in KILLS:
        resumable = (complete_versions(checkpoints) or [0])[0]
        code, log = run(config_path, kill)
        assert code == -9, f"{kill} was never reached, or the run failed: {log[-2000:]}"
        commit = first_commit(log)
        if commit is not None:  # it resumed right after the newest complete version
            assert commit[0] == resumable + 1, (kill, commit, resumable)
        committed = committed_version(checkpoints)
        if committed:
            read_every_dataset(checkpoints, committed)

    code, log = run(config_path, None)
    assert code == 0, log[-2000:]
    positions = NUM_EPOCHS * NUM_CHUNKS
    assert committed_version(checkpoints) == positions
    stats = [json.loads(line) for line in
             (checkpoints / "training_stats.json").read_text().splitlines()]
    buckets = Counter((r["epoch_idx"], r["edge_chunk_idx"], r["lhs_partition"],
                       r["rhs_partition"]) for r in stats)
    assert len(buckets) == positions * NUM_PARTITIONS ** 2  # none lost
    assert set(buckets.values()) == {1}  # none twice
    for epoch in range(1, NUM_EPOCHS + 1):
        snapshot = checkpoints / f"epoch_{epoch}"
        assert committed_version(snapshot) == epoch * NUM_CHUNKS, epoch
        read_every_dataset(snapshot, epoch * NUM_CHUNKS)
    leftovers = [p.name for p in checkpoints.iterdir()
                 if p.name.endswith(".tmp") or p.name == "commit_journal.json"]
    assert leftovers == []
    assert complete_versions(checkpoints) == [positions]  # the older versions deleted
