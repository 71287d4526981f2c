"""An import into the entity_path of a running training: the run never commits a mix.

The import publishes a grown dictionary and new buckets while `tessera train` trains on the
old ones; the run stops before its next commit, exit 65, one line naming entity_path and what
to do, and its last checkpoint still matches the entities it was trained on.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from support.kills import wait_for
from support.workspace import CONFIG, IMPORT, write_config

from tessera.cli import main


def write_edges(path: Path, count: int, num_names: int, rng: random.Random) -> None:
    path.write_text("".join(f"e{rng.randrange(num_names)}\tlikes\te{rng.randrange(num_names)}\n"
                            for _ in range(count)))


@pytest.mark.parametrize(("num_names", "flags"), [
    (4000, []),  # grown: new ids beyond the run's tables, seen as its buckets are read
    (500, ["--replace-dictionary"]),  # shrunk: every id fits, seen before the next commit
])
def test_training_stops_before_committing_edges_of_another_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_names: int,
        flags: list[str]) -> None:
    rng = random.Random(0)
    write_edges(tmp_path / "train.tsv", 20_000, 2000, rng)
    write_edges(tmp_path / "test.tsv", 100, 2000, rng)
    write_config(tmp_path, {**CONFIG, "num_epochs": 500, "num_edge_chunks": 1})
    monkeypatch.chdir(tmp_path)
    assert main([*IMPORT, "--quiet"]) == 0
    counts = [int((tmp_path / f"entities/entity_count_node_{part}.txt").read_text())
              for part in range(2)]
    training = subprocess.Popen([sys.executable, "-m", "tessera", "train", "config.yaml",
                                 "-p", "edge_paths=edges/train", "--quiet"],
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        version_file = tmp_path / "ckpt/checkpoint_version.txt"
        assert wait_for(version_file.exists, training, 60)
        write_edges(tmp_path / "more.tsv", 20_000, num_names, rng)
        shutil.copy(tmp_path / "test.tsv", tmp_path / "more_test.tsv")
        assert main(["import", "config.yaml", "more.tsv", "more_test.tsv", "--rel-col", "1",
                     "--rhs-col", "2", "--quiet", *flags]) == 0
        _, error = training.communicate(timeout=60)
    finally:
        training.kill()
        training.wait()
    assert training.returncode == 65, error
    assert len(error.strip().splitlines()) == 1, error
    assert "an import changed the entities while this run trained" in error, error
    version = int(version_file.read_text())
    for part in range(2):  # the checkpoint holds the old import's entities, whole
        with h5py.File(tmp_path / f"ckpt/embeddings_node_{part}.v{version}.h5") as file:
            assert file["embeddings"].shape[0] == counts[part]
    assert json.loads((tmp_path / "ckpt/config.json").read_text())["entity_path"] == "entities"
