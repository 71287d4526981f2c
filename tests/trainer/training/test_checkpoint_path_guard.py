"""What `tessera train` does with a checkpoint path it finds: it never deletes the complete
checkpoint, and never writes where another live run writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.planted import PlantedGraph, write_planted_graph

from tessera.errors import EXIT_BAD_INPUT

TRAIN_TIMEOUT_S = 120


def tessera_train(config_path: Path, *params: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tessera", "train", str(config_path), "--quiet"]
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
