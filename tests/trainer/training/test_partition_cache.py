"""Partitions kept in memory when swapped out (`partition_cache_gb`): the same checkpoints as
writing each one out, with fewer writes, and the cache's budget respected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from support.planted import write_planted_graph

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.training.coordinator import train

NUM_PARTITIONS = 4
NUM_ENTITIES = 400  # write_planted_graph's default
DIMENSION = 16
# One partition: its float32 table and its float32 Adagrad sums.
PARTITION_GB = NUM_ENTITIES // NUM_PARTITIONS * (DIMENSION + 1) * 4 / 1e9


def trained(root: Path, monkeypatch: pytest.MonkeyPatch,
            **overrides: Any) -> tuple[list[np.ndarray], int]:
    """The last checkpoint's tables and Adagrad sums, and how many partition writes made it."""
    writes = 0
    write = CheckpointStore.write_embeddings

    def counted_write(store: CheckpointStore, *args: Any, **kwargs: Any) -> None:
        nonlocal writes
        writes += 1
        write(store, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointStore, "write_embeddings", counted_write)
        graph = write_planted_graph(root, NUM_PARTITIONS, num_entities=NUM_ENTITIES,
                                    num_edges=3000)
        config = parse_config(graph.config(num_epochs=2, num_edge_chunks=2, dimension=DIMENSION,
                                           **overrides))
        assert train(config, Reporter("quiet")).checkpoint_version == 4
    tables = []
    for part in range(NUM_PARTITIONS):
        with h5py.File(root / "checkpoints" / f"embeddings_node_{part}.v4.h5") as file:
            assert file["embeddings"].shape == (NUM_ENTITIES // NUM_PARTITIONS, DIMENSION)
            tables += [file["embeddings"][...], file["optimizer/state_dict"][...]]
    return tables, writes


@pytest.mark.parametrize("background_io", [False, True])
def test_cached_partitions_train_exactly_as_written_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background_io: bool) -> None:
    """Bit for bit the same checkpoint whether swapped-out partitions are written, all kept,
    or kept one at a time (the least recently used written to make room); with all kept,
    each chunk writes each partition once, at its checkpoint."""
    written, writes_uncached = trained(tmp_path / "written", monkeypatch,
                                       background_io=background_io)
    kept, writes_kept = trained(tmp_path / "kept", monkeypatch, background_io=background_io,
                                partition_cache_gb=NUM_PARTITIONS * PARTITION_GB)
    one_kept, writes_one = trained(tmp_path / "one", monkeypatch, background_io=background_io,
                                   partition_cache_gb=1.5 * PARTITION_GB)
    for expected, found_kept, found_one in zip(written, kept, one_kept, strict=True):
        np.testing.assert_array_equal(found_kept, expected)
        np.testing.assert_array_equal(found_one, expected)
    chunks = 4
    assert writes_kept == chunks * NUM_PARTITIONS
    assert writes_kept < writes_one < writes_uncached


def test_the_cache_holds_no_more_than_its_budget(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache smaller than one partition keeps none: every swap is written, as without it."""
    _, writes_uncached = trained(tmp_path / "written", monkeypatch)
    _, writes_small = trained(tmp_path / "small", monkeypatch,
                              partition_cache_gb=0.5 * PARTITION_GB)
    assert writes_small == writes_uncached
