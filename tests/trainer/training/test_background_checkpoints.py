"""Checkpoints written in the background (`background_io` with every partition in memory):
version N is written from a copy while the next chunk trains, and counts once committed."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.lease import CheckpointLease
from tessera.training import coordinator
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
EPOCHS = 4
WRITER = "tessera-checkpoint"


@pytest.fixture
def graph(tmp_path: Path) -> PlantedGraph:
    return write_planted_graph(tmp_path / "graph", 1, num_edges=2000)


def run_config(graph: PlantedGraph, name: str, **overrides: Any) -> Any:
    return parse_config(graph.config(num_epochs=EPOCHS,
                                     checkpoint_path=str(graph.root / name), **overrides))


def checkpoint_arrays(config: Any) -> list[np.ndarray]:
    store = CheckpointStore.from_config(config)
    version = store.current_version()
    with h5py.File(Path(config.checkpoint_path) / f"embeddings_node_0.v{version}.h5") as file:
        return [file["embeddings"][...], file["optimizer/state_dict"][...]]


def slow_writes_in_the_background(monkeypatch: pytest.MonkeyPatch, events: list[tuple[Any, ...]],
                                  fail_version: int | None = None) -> None:
    """Record who writes which version's embeddings, and when; the background writer takes
    0.2 s a file, and fails with a full disk on `fail_version`."""
    write = CheckpointStore.write_embeddings

    def recorded(store: CheckpointStore, version: int, *args: Any, **kwargs: Any) -> None:
        thread = threading.current_thread().name
        if thread.startswith(WRITER):
            time.sleep(0.2)
            if version == fail_version:
                raise OSError(errno.ENOSPC, "No space left on device")
        write(store, version, *args, **kwargs)
        events.append(("written", version, thread))

    monkeypatch.setattr(CheckpointStore, "write_embeddings", recorded)


def test_a_background_checkpoint_trains_exactly_as_a_foreground_one(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit the same checkpoint, every version committed and announced in order, and
    each version's file written by the writer thread while the next chunk trains."""
    foreground = run_config(graph, "foreground")
    assert train(foreground, QUIET).checkpoint_version == EPOCHS

    events: list[tuple[Any, ...]] = []
    slow_writes_in_the_background(monkeypatch, events)
    hold = coordinator.PartitionHolder.hold

    def recorded_hold(holder: Any, *args: Any, **kwargs: Any) -> Any:
        events.append(("bucket", holder.next_version))
        return hold(holder, *args, **kwargs)

    monkeypatch.setattr(coordinator.PartitionHolder, "hold", recorded_hold)
    committed: list[int] = []
    reporter = Reporter("quiet")
    reporter.listeners.append(lambda record: committed.extend(
        [record["checkpoint_version"]] if record.get("event") == "checkpoint committed"
        else []))
    background = run_config(graph, "background", background_io=True)
    summary = train(background, reporter)

    assert summary.checkpoint_version == EPOCHS
    assert committed == list(range(1, EPOCHS + 1))
    for expected, found in zip(checkpoint_arrays(foreground), checkpoint_arrays(background),
                               strict=True):
        np.testing.assert_array_equal(found, expected)
    writes = [event for event in events if event[0] == "written"]
    assert [version for _, version, _ in writes] == list(range(1, EPOCHS + 1))
    assert all(thread.startswith(WRITER) for _, _, thread in writes)
    for version in range(1, EPOCHS):  # chunk N + 1 started before version N was written
        assert events.index(("bucket", version + 1)) < events.index(
            ("written", version, writes[version - 1][2]))


def test_a_failed_background_write_stops_the_run_at_the_last_committed_version(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while version 2 is written: the run fails with that error, version 1 stays
    the checkpoint, and the next run goes on from it."""
    config = run_config(graph, "full-disk", background_io=True)
    slow_writes_in_the_background(monkeypatch, [], fail_version=2)
    with pytest.raises(OSError, match="No space left"):
        train(config, QUIET)
    assert CheckpointStore.from_config(config).current_version() == 1

    monkeypatch.undo()
    assert train(config, QUIET).checkpoint_version == EPOCHS


def test_a_stopped_run_commits_the_version_it_was_writing(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while version 1 is still being written (the second chunk has begun): the run
    stops, and version 1, a finished chunk, is committed before it lets the lease go."""
    config = run_config(graph, "stopped", background_io=True)
    events: list[tuple[Any, ...]] = []
    slow_writes_in_the_background(monkeypatch, events)
    commit, release = CheckpointStore.commit, CheckpointLease.release

    def recorded_commit(store: CheckpointStore, version: int, *args: Any, **kwargs: Any) -> None:
        commit(store, version, *args, **kwargs)
        events.append(("committed", version))

    def recorded_release(lease: CheckpointLease) -> None:
        events.append(("released",))
        release(lease)

    monkeypatch.setattr(CheckpointStore, "commit", recorded_commit)
    monkeypatch.setattr(CheckpointLease, "release", recorded_release)
    checks = 0

    def stop_at_the_second_chunk() -> None:
        nonlocal checks
        checks += 1
        if checks == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(coordinator, "raise_if_stopped", stop_at_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        train(config, QUIET)
    assert [event for event in events if event[0] != "written"] == [("committed", 1),
                                                                    ("released",)]


def test_partitions_only_in_files_are_checkpointed_in_the_foreground(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With partitions swapped out to files (no cache), a checkpoint needs them all: it is
    written as without background_io, by the training thread."""
    graph = write_planted_graph(tmp_path / "graph", 4, num_edges=2000)
    events: list[tuple[Any, ...]] = []
    slow_writes_in_the_background(monkeypatch, events)
    config = parse_config(graph.config(num_epochs=2, background_io=True))
    assert train(config, QUIET).checkpoint_version == 2
    assert not any(thread.startswith(WRITER) for _, _, thread in events)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_the_device_path_checkpoints_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    """Every partition kept in memory (pinned, for a GPU) and copied at each checkpoint: the
    same model as checkpoints written in the foreground (on a GPU, up to the order of its
    atomic additions)."""
    graph = write_planted_graph(tmp_path / "graph", 2, num_edges=2000)
    on_device: dict[str, Any] = {"num_gpus": 1} if device == "cuda" else {}
    devices = None if device == "cuda" else [torch.device("cpu")]
    tables, events = [], []
    for name, background_io in (("foreground", False), ("background", True)):
        if background_io:
            slow_writes_in_the_background(monkeypatch, events)
        config = run_config(graph, name, partition_cache_gb=1.0, background_io=background_io,
                            **on_device)
        assert train(config, QUIET, devices=devices).checkpoint_version == EPOCHS
        store = CheckpointStore.from_config(config)
        tables.append([store.read_embeddings("node", part)[0] for part in range(2)])
    assert {thread for _, _, thread in events} == {f"{WRITER}_0"}
    for expected, found in zip(*tables, strict=True):
        np.testing.assert_allclose(found, expected, rtol=0 if device == "cpu" else 1e-4,
                                   atol=0 if device == "cpu" else 1e-5)
