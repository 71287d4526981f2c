"""Reading the next bucket's partitions while the current one trains: same results, bounded
memory, and reads that never wait for what they could have read ahead."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from support.planted import write_planted_graph

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training.coordinator import train
from tessera.training.partitions import Partition, PartitionHolder, PartitionLoader

QUIET = Reporter("quiet")
NUM_PARTITIONS = 8


class RecordedLoads:
    """Which threads load partitions, and the most partitions alive at once (each load's
    table is followed by a weak reference until nothing holds it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: set[str] = set()
        self.alive: list[weakref.ref[torch.Tensor]] = []
        self.most_alive = 0
        self.lock = threading.Lock()
        load = PartitionLoader.load

        def recorded_load(loader: PartitionLoader, *args: object, **kwargs: object) -> Partition:
            partition = load(loader, *args, **kwargs)
            with self.lock:
                self.threads.add(threading.current_thread().name.split("_")[0])
                self.alive = [ref for ref in self.alive if ref() is not None]
                self.alive.append(weakref.ref(partition.embeddings))
                self.most_alive = max(self.most_alive, len(self.alive))
            return partition

        monkeypatch.setattr(PartitionLoader, "load", recorded_load)


def trained_tables(root: Path, look_ahead: bool, monkeypatch: pytest.MonkeyPatch,
                   **overrides: object) -> tuple[list[np.ndarray], RecordedLoads]:
    monkeypatch.setenv("TESSERA_PREFETCH", "1" if look_ahead else "0")
    loads = RecordedLoads(monkeypatch)
    graph = write_planted_graph(root, NUM_PARTITIONS, num_edges=4000)
    config = parse_config(graph.config(num_epochs=2, num_edge_chunks=2, **overrides))
    summary = train(config, QUIET)
    assert summary.checkpoint_version == 4
    monkeypatch.undo()
    checkpoints = graph.root / "checkpoints"
    tables = []
    for part in range(NUM_PARTITIONS):
        with h5py.File(checkpoints / f"embeddings_node_{part}.v4.h5") as file:
            tables.append(file["embeddings"][...])
            tables.append(file["optimizer/state_dict"][...])
    return tables, loads


@pytest.mark.parametrize("background_io", [False, True])
def test_look_ahead_trains_exactly_as_loading_on_demand(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background_io: bool) -> None:
    """Same seeds, same checkpoint, bit for bit; the reads moved to the reader thread, and
    memory held at most the current bucket's partitions and the next one's (2 + 2), and with
    background_io the one being written."""
    on_demand, loads = trained_tables(tmp_path / "on-demand", False, monkeypatch,
                                      background_io=background_io)
    assert loads.threads == {"MainThread"}
    ahead, loads = trained_tables(tmp_path / "ahead", True, monkeypatch,
                                  background_io=background_io)
    assert "tessera-partition-reader" in loads.threads
    assert loads.most_alive <= 4 + background_io  # + the one being written
    for expected, found in zip(on_demand, ahead, strict=True):
        np.testing.assert_array_equal(found, expected)


def test_the_bucket_after_the_first_waits_for_no_read(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With look-ahead only the very first bucket reads in the foreground: the others'
    partitions were read while the bucket before them trained (the last bucket of a chunk
    reads the next chunk's first)."""
    foreground: list[str] = []
    load = PartitionLoader.load

    def recorded_load(loader: PartitionLoader, *args: object, **kwargs: object) -> Partition:
        foreground.extend([threading.current_thread().name] * (
            threading.current_thread() is threading.main_thread()))
        return load(loader, *args, **kwargs)

    monkeypatch.setattr(PartitionLoader, "load", recorded_load)
    monkeypatch.setenv("TESSERA_PREFETCH", "1")
    graph = write_planted_graph(tmp_path / "again", 2, num_edges=2000)
    train(parse_config(graph.config(num_epochs=3, num_edge_chunks=2)), QUIET)
    # The first bucket's partitions, and write_all's carry-over of none (2 partitions: every
    # chunk position touches both).
    assert len(foreground) <= 2


def test_a_partition_read_ahead_for_nothing_is_dropped(tmp_path: Path) -> None:
    """If the next bucket is not the one read ahead for, its partitions are not kept."""
    graph = write_planted_graph(tmp_path, 4, num_edges=2000)
    config = parse_config(graph.config())
    counts = {"node": [100] * 4}
    holder = PartitionHolder(config, counts, CheckpointStore(Directory(config.checkpoint_path)),
                             None, committed_version=0)
    metadata = {"iteration/epoch_idx": 0}
    first = holder.hold([("node", 0)], metadata)
    holder.prefetch([("node", 0), ("node", 1), ("node", 2)])
    assert set(holder.prefetched) == {("node", 1), ("node", 2)}  # the held one is not read
    read_ahead = holder.prefetched[("node", 2)].result()
    held = holder.hold([("node", 0), ("node", 2)], metadata)
    assert held[("node", 0)] is first[("node", 0)]
    assert held[("node", 2)] is read_ahead
    assert holder.prefetched == {} and set(holder.in_memory) == {("node", 0), ("node", 2)}


def test_a_holder_on_a_device_reads_every_partition_ahead_and_keeps_them(
        tmp_path: Path) -> None:
    """Holding the whole model (`holder_device`), the holder reads all partitions ahead at
    the first look-ahead, the next bucket's first, and keeps those no bucket wants yet."""
    graph = write_planted_graph(tmp_path, 4, num_edges=2000)
    config = parse_config(graph.config())
    holder = PartitionHolder(config, {"node": [100] * 4},
                             CheckpointStore(Directory(config.checkpoint_path)), None,
                             committed_version=0, device=torch.device("cpu"))
    metadata = {"iteration/epoch_idx": 0}
    holder.hold([("node", 0)], metadata)
    holder.prefetch([("node", 0), ("node", 3)])
    assert list(holder.prefetched) == [("node", 3), ("node", 1), ("node", 2)]
    read_ahead = {key: future.result() for key, future in holder.prefetched.items()}
    holder.hold([("node", 0), ("node", 3)], metadata)
    assert set(holder.prefetched) == {("node", 1), ("node", 2)}  # kept, not dropped
    held = holder.hold([("node", 1), ("node", 2)], metadata)
    assert all(held[key] is read_ahead[key] for key in held)
    assert set(holder.cached) == {("node", 0), ("node", 3)}  # left, kept, not written
    assert holder.written_to_next == set()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_partitions_held_for_a_gpu_are_read_into_pinned_memory(tmp_path: Path) -> None:
    """The GPU copies them without staging: the reader thread made the pinned copy."""
    graph = write_planted_graph(tmp_path, 4, num_edges=2000)
    config = parse_config(graph.config())
    holder = PartitionHolder(config, {"node": [100] * 4},
                             CheckpointStore(Directory(config.checkpoint_path)), None,
                             committed_version=0, pinned=True)
    held = holder.hold([("node", 0)], {})
    holder.prefetch([("node", 1)])
    held.update(holder.hold([("node", 0), ("node", 1)], {}))
    assert all(p.embeddings.is_pinned() and p.adagrad_sum.is_pinned() for p in held.values())
