"""A checkpoint whose version file was lost (or says 0) is resumed, never deleted.

A folder loses `checkpoint_version.txt` in an interrupted sync, a restore, or a copy of the
`*.h5` files alone; a version file can be truncated or hand-edited. In each case the complete
versions must survive: `tessera train` resumes from the newest complete one, and a reader
that cannot tell which version counts stops with one line that names the file and the fix.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.planted import write_planted_graph

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT

NUM_CHUNKS = 2
FIRST_EPOCHS = 2
VERSION_FILE = "checkpoint_version.txt"


def lose_the_file(checkpoints: Path) -> None:
    (checkpoints / VERSION_FILE).unlink()


def write_zero(checkpoints: Path) -> None:
    (checkpoints / VERSION_FILE).write_text("0\n")


def keep_only_h5(checkpoints: Path) -> None:
    for path in checkpoints.iterdir():
        if not path.name.endswith(".h5"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


@pytest.fixture
def trained(tmp_path: Path) -> tuple[Path, Path]:
    graph = write_planted_graph(tmp_path, 2, num_edges=2000)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(num_epochs=FIRST_EPOCHS,
                                              num_edge_chunks=NUM_CHUNKS)))
    assert main(["train", str(config), "--quiet"]) == 0
    return config, Path(graph.config()["checkpoint_path"])


def h5_files(checkpoints: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each file's identity and bytes: a file deleted and trained again (to the same bytes:
    training is seeded) is another file."""
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns, path.read_bytes())
            for path in checkpoints.glob("*.h5")}


@pytest.mark.parametrize("damage", [lose_the_file, write_zero, keep_only_h5])
def test_train_resumes_from_the_newest_complete_version(
        trained: tuple[Path, Path], damage: Callable[[Path], None]) -> None:
    config, checkpoints = trained
    newest = FIRST_EPOCHS * NUM_CHUNKS
    before = h5_files(checkpoints)
    damage(checkpoints)
    assert main(["train", str(config), "--quiet"]) == 0  # nothing left to train
    assert h5_files(checkpoints) == before  # not one byte deleted or rewritten
    assert (checkpoints / VERSION_FILE).read_text().strip() == str(newest)
    assert main(["train", str(config), "--quiet", "-p", f"num_epochs={FIRST_EPOCHS + 1}"]) == 0
    assert (checkpoints / VERSION_FILE).read_text().strip() == str(newest + NUM_CHUNKS)


def test_a_version_file_that_is_not_a_number_stops_train_and_deletes_nothing(
        trained: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, checkpoints = trained
    before = h5_files(checkpoints)
    (checkpoints / VERSION_FILE).write_text("")  # truncated by a sync
    assert main(["train", str(config), "--quiet"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and VERSION_FILE in error, error
    assert h5_files(checkpoints) == before


@pytest.mark.parametrize("command", [["eval"], ["export", "out"], ["neighbors", "0"]])
def test_a_reader_names_the_version_file_and_the_fix(
        trained: tuple[Path, Path], command: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    config, checkpoints = trained
    before = h5_files(checkpoints)
    lose_the_file(checkpoints)
    code = main([command[0], str(config), *command[1:], "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT, error
    assert len(error.splitlines()) == 1, error
    assert VERSION_FILE in error and str(FIRST_EPOCHS * NUM_CHUNKS) in error, error
    assert h5_files(checkpoints) == before
