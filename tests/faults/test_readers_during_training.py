"""Readers of a checkpoint that a training run keeps committing to read one version.

`tessera eval`, `export` and `neighbors` read the committed version's files one after the
other; a commit meanwhile deletes them. A reader must then read the newer version from the
start, never fail on a healthy checkpoint ("version N is incomplete"), never mix two.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.kills import wait_for
from support.planted import write_planted_graph

from tessera.cli import main
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory


def test_a_commit_during_a_read_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=1000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=1, num_edge_chunks=2)))
    assert main(["train", str(config), "--quiet"]) == 0
    checkpoints = Path(graph.config()["checkpoint_path"])
    store = CheckpointStore(Directory(str(checkpoints)))
    read_embeddings = CheckpointStore.read_embeddings

    def commit_then_read(self: CheckpointStore, *args: Any, **kwargs: Any) -> Any:
        """The first read finds that a training run has just committed version 3."""
        if store.current_version() == 2:
            for path in checkpoints.glob("*.v2.h5"):
                shutil.copy(path, checkpoints / path.name.replace(".v2.", ".v3."))
            store.commit(3, store.read_config())
        return read_embeddings(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointStore, "read_embeddings", commit_then_read)
    capsys.readouterr()
    assert main(["eval", str(config), "--log-format", "json"]) == 0
    captured = capsys.readouterr()
    finished = [json.loads(line) for line in (captured.out + captured.err).splitlines()
                if '"evaluation finished"' in line]
    assert finished and finished[-1]["checkpoint_version"] == 3


@pytest.mark.timeout(300)
def test_eval_while_training_commits(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=4000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=400, num_edge_chunks=4)))
    checkpoints = Path(graph.config()["checkpoint_path"])
    training = subprocess.Popen([sys.executable, "-m", "tessera", "train", str(config),
                                 "--quiet"], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (checkpoints / "checkpoint_version.txt").exists(), training, 60)
        test_edges = ["-p", f"edge_paths={tmp_path / 'test'}"]  # a short read, as users do
        codes = [main(["eval", str(config), *test_edges, "--quiet"]) for _ in range(20)]
        assert training.poll() is None, "training ended before the readers did"
    finally:
        training.kill()
        training.wait()
    assert codes == [0] * len(codes)
