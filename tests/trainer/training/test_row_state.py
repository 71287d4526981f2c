"""A partition's Adagrad sums as the checkpoint stores them (PBG's optimizer state dict)."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import torch

from tessera.storage import CheckpointStore, Directory, embeddings_file
from tessera.storage.checkpoint import OPTIMIZER_STATE_DATASET
from tessera.training.partitions import load_row_state, save_row_state


def write_partition(store: CheckpointStore, table: torch.Tensor, sums: torch.Tensor) -> None:
    store.write_embeddings(1, "node", 0, table.numpy(), save_row_state(sums, lr=0.1))


def read_partition(store: CheckpointStore, rows: int, dimension: int,
                   out: np.ndarray | None = None) -> tuple[np.ndarray, torch.Tensor | None]:
    out = np.empty((rows, dimension), dtype=np.float32) if out is None else out
    return store.read_embeddings("node", 0, 1, out=out,
                                 read_state=lambda file: load_row_state(file, rows, "file"))


def saved_state(tmp_path: Path) -> bytes:
    with h5py.File(tmp_path / embeddings_file("node", 0, 1)) as file:
        return bytes(file[OPTIMIZER_STATE_DATASET][()].tobytes())


def test_sums_round_trip_through_a_checkpoint_file(tmp_path: Path) -> None:
    store = CheckpointStore(Directory(str(tmp_path)))
    table, sums = torch.rand(1000, 8), torch.rand(1000)
    write_partition(store, table, sums)
    values, loaded = read_partition(store, 1000, 8)
    np.testing.assert_array_equal(values, table.numpy())
    assert loaded is not None
    torch.testing.assert_close(loaded, sums)
    # The dataset is what torch.save writes (PBG reads it with torch.load): the sums and a
    # small header around them, nothing else.
    blob = saved_state(tmp_path)
    assert sums.nbytes < len(blob) < sums.nbytes + 2048
    state = torch.load(io.BytesIO(blob), weights_only=True)
    torch.testing.assert_close(state["state"][0]["sum"], sums)
    assert state["param_groups"][0]["lr"] == 0.1


def test_a_state_of_another_shape_is_not_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(Directory(str(tmp_path)))
    write_partition(store, torch.rand(1000, 8), torch.rand(999))
    assert read_partition(store, 1000, 8)[1] is None


def test_a_view_is_saved_without_the_rest_of_its_storage(tmp_path: Path) -> None:
    store = CheckpointStore(Directory(str(tmp_path)))
    table = torch.rand(4, 1000)
    view = table[2]
    write_partition(store, torch.rand(1000, 8), view)
    loaded = read_partition(store, 1000, 8)[1]
    assert loaded is not None
    torch.testing.assert_close(loaded, view)
    assert len(saved_state(tmp_path)) < view.nbytes + 2048


def test_a_partition_is_written_and_read_without_a_copy_of_its_state(tmp_path: Path) -> None:
    """Neither the sums nor the table pass through a buffer of their size on the way (the
    sums were saved into a BytesIO, and read back as an array and then as bytes: megabytes
    beside both of a bucket's partitions). tracemalloc sees Python's and numpy's buffers."""
    store = CheckpointStore(Directory(str(tmp_path)))
    table, sums = torch.rand(1_000_000, 2), torch.rand(1_000_000)  # 8 MB, 4 MB
    out = np.empty((1_000_000, 2), dtype=np.float32)
    tracemalloc.start()
    try:
        write_partition(store, table, sums)
        _, written_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        values, loaded = read_partition(store, 1_000_000, 2, out)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert loaded is not None and values is out
    torch.testing.assert_close(loaded, sums)
    np.testing.assert_array_equal(out, table.numpy())
    assert written_peak < sums.nbytes // 4
    assert read_peak < sums.nbytes // 4
