"""The SIGKILL campaign: kill `tessera train` and its Hogwild workers at random moments.

One run sequence on one checkpoint path: each run is killed (the whole process group, as a
node failure or the OOM killer would) at a seeded random moment: while a checkpoint file is
being written, while a commit replaces config.json and the version file, just after a commit,
or at any time from start-up on (lease, clean-up, loading).
After every kill, the committed version must open with h5py alone, and the next run must
resume right after it (the position of its first commit, in its log), never from scratch.
The sequence then finishes, with one version per chunk position: none lost, none repeated.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import pytest
from support.kills import first_commit, wait_for, writing_a_file
from support.planted import write_planted_graph

KILLS = 24
SEED = 15
NUM_PARTITIONS = 2
NUM_CHUNKS = 8
FIRST_EPOCHS = 6
MORE_EPOCHS = 3  # added whenever a run finishes before its kill came
RUN_TIMEOUT_S = 60.0
COMMIT_FILES = (".checkpoint_version.txt.",)  # its temporary name while it is written


@dataclass
class Figures:
    kills: int = 0
    kills_during_writes: int = 0
    unreadable_checkpoints: int = 0
    failed_resumes: int = 0
    resumes_checked: int = 0
    problems: list[str] = field(default_factory=list)


def committed_version(checkpoints: Path) -> int:
    path = checkpoints / "checkpoint_version.txt"
    return int(path.read_text()) if path.exists() else 0


def open_with_h5py_alone(checkpoints: Path, version: int) -> tuple[int, int] | None:
    """Read every dataset of every file of `version`; its (epoch, chunk), None if unreadable."""
    names = [f"embeddings_node_{part}.v{version}.h5" for part in range(NUM_PARTITIONS)]
    try:
        for name in [*names, f"model.v{version}.h5"]:
            with h5py.File(checkpoints / name, "r") as file:
                file.visititems(lambda _, item: item[()] if isinstance(item, h5py.Dataset)
                                else None)
                position = (int(file.attrs["iteration/epoch_idx"]),
                            int(file.attrs["iteration/edge_chunk_idx"]))
        json.loads((checkpoints / "config.json").read_text())
    except (OSError, KeyError, ValueError):
        return None
    return position


def following(position: tuple[int, int] | None) -> tuple[int, int]:
    """The chunk position after `position` (after None: the very first)."""
    if position is None:
        return 0, 0
    epoch, chunk = position
    return (epoch, chunk + 1) if chunk + 1 < NUM_CHUNKS else (epoch + 1, 0)


def kill_at_a_random_moment(process: subprocess.Popen[str], checkpoints: Path,
                            rng: random.Random) -> bool | None:
    """Kill the run's process group; whether a file was being written (None: it ended first)."""
    moment = rng.choice(["during a write", "during a commit", "after a commit", "any time"])
    if moment == "during a write":
        alive = wait_for(lambda: writing_a_file(checkpoints), process, RUN_TIMEOUT_S)
    elif moment == "during a commit":  # the version file being replaced
        alive = wait_for(lambda: writing_a_file(checkpoints, COMMIT_FILES), process,
                         RUN_TIMEOUT_S)
    elif moment == "after a commit":
        start = committed_version(checkpoints)
        alive = wait_for(lambda: committed_version(checkpoints) > start, process,
                         RUN_TIMEOUT_S)
        time.sleep(rng.uniform(0.0, 0.3))
    else:
        time.sleep(rng.uniform(0.0, 4.0))
        alive = True
    if not alive or process.poll() is not None:
        return None
    during_write = writing_a_file(checkpoints)
    os.killpg(process.pid, signal.SIGKILL)
    return during_write


def check_resume(log: str, version: int, position: tuple[int, int] | None,
                 figures: Figures) -> None:
    """The run that started on committed `version` (at `position`) resumed right after it."""
    commit = first_commit(log)
    if commit is None:
        return  # killed before it committed anything: nothing to judge
    figures.resumes_checked += 1
    if commit != (version + 1, following(position)):
        figures.failed_resumes += 1
        figures.problems.append(f"started on version {version} at {position}, first commit "
                                f"{commit}")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigkill_campaign(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, NUM_PARTITIONS, num_entities=20_000,
                                num_communities=40, num_edges=16_000)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(graph.config(
        dimension=32, num_edge_chunks=NUM_CHUNKS, workers=2, batch_size=100)))
    checkpoints = Path(graph.config()["checkpoint_path"])
    rng = random.Random(SEED)
    figures = Figures()
    epochs = FIRST_EPOCHS
    began = time.monotonic()

    def start_run() -> tuple[subprocess.Popen[str], int, tuple[int, int] | None]:
        version = committed_version(checkpoints)
        position = open_with_h5py_alone(checkpoints, version) if version else None
        process = subprocess.Popen(
            [sys.executable, "-m", "tessera", "train", str(config_path), "--log-format",
             "json", "-p", f"num_epochs={epochs}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # its own process group: the trainer and its workers
        return process, version, position

    while figures.kills < KILLS:
        process, version, position = start_run()
        during_write = kill_at_a_random_moment(process, checkpoints, rng)
        _, log = process.communicate(timeout=RUN_TIMEOUT_S)
        check_resume(log, version, position, figures)
        if during_write is None:  # it ended by itself: finished, or failed
            if process.returncode != 0:
                figures.failed_resumes += 1
                figures.problems.append(f"a run exited {process.returncode}: {log[-500:]}")
            epochs += MORE_EPOCHS  # a longer run continues the same sequence
            continue
        figures.kills += 1
        figures.kills_during_writes += during_write
        newest = committed_version(checkpoints)
        if newest and open_with_h5py_alone(checkpoints, newest) is None:
            figures.unreadable_checkpoints += 1
            figures.problems.append(f"version {newest} unreadable after kill {figures.kills}")

    process, version, position = start_run()
    _, log = process.communicate(timeout=RUN_TIMEOUT_S * 3)
    check_resume(log, version, position, figures)
    print(f"\nSIGKILL campaign: {figures.kills} kills ({figures.kills_during_writes} during a "
          f"checkpoint write), {figures.unreadable_checkpoints} unreadable checkpoints, "
          f"{figures.failed_resumes} failed resumes of {figures.resumes_checked} checked, "
          f"{epochs} epochs x {NUM_CHUNKS} chunks, {time.monotonic() - began:.0f} s")
    assert process.returncode == 0, log[-2000:]
    assert figures.problems == []
    assert figures.kills_during_writes >= 3
    final = committed_version(checkpoints)
    assert final == epochs * NUM_CHUNKS  # one version per chunk position: none lost or redone
    assert open_with_h5py_alone(checkpoints, final) == (epochs - 1, NUM_CHUNKS - 1)
