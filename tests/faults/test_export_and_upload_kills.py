"""Kills during an export's publish, and the temporary files a killed command leaves.

An export stages its files in a hidden folder of the output and moves them into place; a
kill between two moves (no clean-up runs) must not leave the output half-exported for good:
the next export into it finishes the moves, and removes the staging folder of an export
killed before its moves. A run killed while it uploads a checkpoint file to object storage
leaves a local copy of that file in the temporary folder: readable by its owner only, and
removed by the next run.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT
from tessera.storage.entities import write_entity_names
from tessera.storage.fs import UPLOAD_PREFIX, Directory

FS = "tessera.storage.fs:Directory"
TESTS = str(Path(__file__).parents[1])


def killed_run(kill: tuple[str, str, int, str], *command: str,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {}),
                   "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    process = subprocess.run([sys.executable, "-m", "support.crash_at", *map(str, kill), "--",
                              *command], capture_output=True, text=True, env=environment,
                             timeout=120, start_new_session=True)
    assert process.returncode == -9, f"{kill} never reached: {process.stderr[-2000:]}"
    return process


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A trained checkpoint, its config, and a reference export of it."""
    root = tmp_path_factory.mktemp("graph")
    graph: PlantedGraph = write_planted_graph(root, 2, num_edges=1000)
    entities = Directory(str(root / "entities"))
    for part in range(2):
        write_entity_names(entities, "node", part, [f"n{i}" for i in range(part, 400, 2)])
    config = root / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=1)))
    assert main(["train", str(config), "--quiet"]) == 0
    assert main(["export", str(config), str(root / "reference"), "--format", "npy",
                 "--quiet"]) == 0
    return config, root / "reference"


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


@pytest.mark.parametrize("kill", [
    (f"{FS}.write_text", ".tessera-export.json", 1, "before"),  # staged, nothing moved
    (f"{FS}.move", "*", 1, "before"),  # the list of moves written, none made
    (f"{FS}.move", "*", 1, "after"),  # one file in place
    (f"{FS}.move", "*", 2, "after"),  # two of three
])
def test_the_next_export_finishes_or_clears_a_killed_one(
        trained: tuple[Path, Path], tmp_path: Path, kill: tuple[str, str, int, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    config, reference = trained
    output = tmp_path / "out"
    killed_run(kill, "export", str(config), str(output), "--format", "npy", "--quiet")
    code = main(["export", str(config), str(output), "--format", "npy", "--quiet"])
    if kill[1] == ".tessera-export.json":  # killed before its moves began: it never was
        assert code == 0
    else:  # its moves were finished: the same export's files are all in place
        assert code == EXIT_BAD_INPUT and "already exists" in capsys.readouterr().err
    assert contents(output) == contents(reference)  # staging and journal gone too


def test_a_killed_upload_leaves_a_private_copy_that_the_next_run_removes(
        tmp_path: Path, s3_dir: Any) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=1000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(
        num_epochs=1, checkpoint_path=f"{s3_dir.url}/ckpt",
        storage_options=s3_dir.storage_options)))
    temp = tmp_path / "tmp"
    temp.mkdir()
    killed_run((f"{FS}._call", "*model.v1.h5", 1, "before"), "train", str(config), "--quiet",
               env={"TMPDIR": str(temp)})
    (left,) = [path for path in temp.iterdir() if path.name.startswith(UPLOAD_PREFIX)]
    assert stat.S_IMODE(left.stat().st_mode) == 0o600  # a checkpoint is no one else's
    process = subprocess.run([sys.executable, "-m", "tessera", "train", str(config), "--quiet"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "TMPDIR": str(temp)})
    assert process.returncode == 0, process.stderr
    assert not left.exists()
