"""Weight averaging (`weight_averaging`): the run's last version holds the mean of the
checkpoints of its last epochs, on every way of training, across a resume in the window and
across a crash between the last checkpoint and the averaged version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.averaging import assert_holds_the_mean_of_its_last_epochs, store_of, tables
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.model import weight_averaging
from tessera.model.weight_averaging import first_averaged_epoch, window_of
from tessera.progress import Reporter
from tessera.training.coordinator import train

NUM_EPOCHS = 4
AVERAGED_EPOCHS = [3, 4]  # weight_averaging 0.5 of 4 epochs: the last two (counted from 1)
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    return write_planted_graph(tmp_path_factory.mktemp("planted"), num_partitions=2,
                               num_edges=3000)


def averaged_config(graph: PlantedGraph, name: str, **overrides: Any) -> dict[str, Any]:
    # Every epoch kept in epoch_N/, so that the mean can be checked against the epochs.
    return graph.config(**{"checkpoint_path": str(graph.root / name), "num_epochs": NUM_EPOCHS,
                           "weight_averaging": 0.5, "checkpoint_preservation_interval": 1,
                           **overrides})


@pytest.mark.parametrize("devices", [[], [torch.device("cpu")]], ids=["hogwild", "device"])
def test_the_last_version_holds_the_mean_of_the_last_epochs(graph: PlantedGraph,
                                                           devices: list[torch.device]) -> None:
    name = f"averaged-{len(devices)}"
    # Two partitions swap in and out of memory within each epoch (no cache): a swapped-out
    # partition is read back from the version being written, which must hold trained values.
    config = parse_config(averaged_config(graph, name, partition_cache_gb=0, workers=2))
    summary = train(config, Reporter("quiet"), devices=devices)
    assert_holds_the_mean_of_its_last_epochs(graph.root / name, AVERAGED_EPOCHS, 2)
    assert summary.checkpoint_version == store_of(graph.root / name).current_version()


def test_means_folded_a_block_at_a_time_are_the_means(graph: PlantedGraph,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Blocks of 7 values: every table is many blocks, the last of them partial.
    monkeypatch.setattr(weight_averaging, "FOLD_BLOCK", 7)
    train(parse_config(averaged_config(graph, "blocks")), Reporter("quiet"))
    assert_holds_the_mean_of_its_last_epochs(graph.root / "blocks", AVERAGED_EPOCHS, 2)


def test_a_run_without_averaging_ends_with_its_last_checkpoint(graph: PlantedGraph) -> None:
    config = parse_config(averaged_config(graph, "plain", weight_averaging=0))
    train(config, Reporter("quiet"))
    store = store_of(graph.root / "plain")
    assert store.current_version() == NUM_EPOCHS
    assert store.read_averaged_model(NUM_EPOCHS) is None
    last_epoch = store_of(graph.root / "plain" / f"epoch_{NUM_EPOCHS}")
    np.testing.assert_array_equal(tables(store, 2)[0], tables(last_epoch, 2)[0])


def run_killed(config_path: Path, nth_commit: int | None) -> subprocess.CompletedProcess[str]:
    """`tessera train`, killed (SIGKILL) just after the `nth_commit`-th commit of the run."""
    command = ["train", str(config_path), "--quiet"]
    argv = [sys.executable, "-m", "tessera", *command] if nth_commit is None else [
        sys.executable, "-m", "support.crash_at",
        "tessera.storage.checkpoint:CheckpointStore.commit", "*", str(nth_commit), "after",
        "--", *command]
    tests = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=RUN_TIMEOUT_S, start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("killed_after_commit", [3, NUM_EPOCHS],
                         ids=["in-the-window", "before-the-averaged-version"])
def test_a_killed_run_resumes_to_the_same_mean(graph: PlantedGraph, tmp_path: Path,
                                               killed_after_commit: int) -> None:
    checkpoints = tmp_path / "checkpoints"
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(averaged_config(graph, "unused",
                                                      checkpoint_path=str(checkpoints))))
    killed = run_killed(config_path, killed_after_commit)
    assert killed.returncode == -9, killed.stderr
    assert store_of(checkpoints).current_version() == killed_after_commit
    resumed = run_killed(config_path, None)
    assert resumed.returncode == 0, resumed.stderr
    assert_holds_the_mean_of_its_last_epochs(checkpoints, AVERAGED_EPOCHS, 2)


def test_the_window_is_the_last_share_of_the_epochs(graph: PlantedGraph) -> None:
    def config(share: float) -> Any:
        return parse_config(graph.config(weight_averaging=share))

    assert first_averaged_epoch(config(0), 100) is None
    assert first_averaged_epoch(config(0.5), 100) == 50
    assert first_averaged_epoch(config(0.001), 100) == 99  # at least the last epoch
    assert first_averaged_epoch(config(1), 100) == 0

    def metadata(epoch: int, path: int, chunk: int) -> dict[str, int]:
        return {"iteration/num_epochs": 4, "iteration/epoch_idx": epoch,
                "iteration/num_edge_paths": 2, "iteration/edge_path_idx": path,
                "iteration/num_edge_chunks": 3, "iteration/edge_chunk_idx": chunk}

    half = config(0.5)
    assert window_of(half, metadata(1, 1, 2)) is None
    windows = [window_of(half, metadata(3, path, chunk)) for path in (0, 1) for chunk in (0, 1, 2)]
    assert all(window is not None and window.first_epoch == 2 for window in windows)
    assert [window.ends_run for window in windows if window] == [False] * 5 + [True]
    assert window_of(config(0), metadata(3, 1, 2)) is None
