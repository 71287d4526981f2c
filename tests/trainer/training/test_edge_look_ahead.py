"""With look-ahead, the next bucket's edges are read and shuffled by a background thread while
the current bucket trains, and the model trained is exactly the one trained without it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.training import bucket_trainer
from tessera.training.coordinator import train

EPOCHS, PARTITIONS = 2, 2


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    return write_planted_graph(tmp_path_factory.mktemp("graph"), PARTITIONS, num_edges=3000)


def train_recording_readers(graph: PlantedGraph, name: str, look_ahead: bool,
                            monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Path]:
    """Train one worker (so that the run is deterministic); return the threads that read
    the chunks' edges and the checkpoint folder."""
    monkeypatch.setenv("TESSERA_PREFETCH", "1" if look_ahead else "0")
    readers: list[str] = []
    read = bucket_trainer.read_training_edges

    def recording(*args: Any, **kwargs: Any) -> Any:
        readers.append(threading.current_thread().name)
        return read(*args, **kwargs)

    monkeypatch.setattr(bucket_trainer, "read_training_edges", recording)
    checkpoints = graph.root / name
    train(parse_config(graph.config(num_epochs=EPOCHS, checkpoint_path=str(checkpoints),
                                    loss_fn="ranking")), Reporter("quiet"))
    return readers, checkpoints


def embeddings(checkpoints: Path) -> list[np.ndarray]:
    arrays = []
    for part in range(PARTITIONS):
        with h5py.File(checkpoints / f"embeddings_node_{part}.v{EPOCHS}.h5") as file:
            arrays.append(file["embeddings"][...])
    return arrays


def test_the_next_chunk_is_read_in_the_background_and_trains_the_same_model(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    readers, ahead = train_recording_readers(graph, "ahead", True, monkeypatch)
    buckets = EPOCHS * PARTITIONS ** 2
    # The first bucket is read when it is needed, every later one (the next epoch's too)
    # while the one before it trains.
    assert len(readers) == buckets
    assert readers.count("MainThread") == 1
    assert sum(name.startswith("tessera-edge-reader") for name in readers) == buckets - 1
    readers, inline = train_recording_readers(graph, "inline", False, monkeypatch)
    assert readers == ["MainThread"] * buckets
    for with_look_ahead, without in zip(embeddings(ahead), embeddings(inline)):
        np.testing.assert_array_equal(with_look_ahead, without)
