"""What `tessera eval` and `tessera export` do with a checkpoint that does not fit the config,
and with output places that cannot take their output: exit 65 with one line naming the file,
no traceback, and no output half-written.

One small graph (users like items; two entity types, items in two partitions) is imported and
trained once through the CLI; each test works on its own copy, from inside it, so that the
config's relative paths point at the copy.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import h5py
import numpy as np
import pytest

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT

CONFIG = {
    "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 2}},
    "relations": [{"name": "likes", "lhs": "user", "rhs": "item", "operator": "diagonal"}],
    "dimension": 8, "comparator": "dot", "loss_fn": "softmax", "lr": 0.1, "num_epochs": 1,
    "batch_size": 50, "num_batch_negs": 10, "num_uniform_negs": 10, "eval_fraction": 0,
    "workers": 1, "hogwild_delay": 0, "global_emb": False,
    "entity_path": "entities", "edge_paths": ["edges"], "checkpoint_path": "checkpoints",
}
EXPORTED = {"tsv": ["embeddings_item.tsv", "embeddings_user.tsv"],
            "h5": ["embeddings_item.h5", "embeddings_user.h5"],
            "npy": ["embeddings_item.npy", "embeddings_user.npy", "names_item.txt",
                    "names_user.txt"]}


@pytest.fixture(scope="module")
def trained_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trained")
    edges = [f"u{user}\tlikes\ti{(user * 7 + k) % 20}" for user in range(30) for k in range(4)]
    (root / "likes.tsv").write_text("\n".join(edges) + "\n")
    (root / "config.json").write_text(json.dumps(CONFIG))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert main(["import", "config.json", "likes.tsv", "--rel-col", "1", "--rhs-col", "2",
                     "--quiet"]) == 0
        assert main(["train", "config.json", "--quiet"]) == 0
    assert (root / "checkpoints" / "embeddings_item_1.v1.h5").exists()
    return root


@pytest.fixture
def graph(trained_graph: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the trained graph, which is also the working directory."""
    root = tmp_path / "graph"
    shutil.copytree(trained_graph, root)
    monkeypatch.chdir(root)
    return root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit code and stderr of one command, run as the `tessera` entry point runs it."""
    code = main([*args, "--quiet"])
    return code, capsys.readouterr().err


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


def rewrite_embeddings(path: Path, shape: tuple[int, int]) -> None:
    """Replace a checkpoint partition's embeddings with zeros of another shape, in place."""
    with h5py.File(path, "r+") as file:
        del file["embeddings"]
        file.create_dataset("embeddings", data=np.zeros(shape, np.float32))


# A checkpoint that does not fit the entity counts or the config's dimension.

COMMANDS = {"export": ["export", "config.json", "out"],
            "eval": ["eval", "config.json"],
            "eval --filtered": ["eval", "config.json", "--filtered"]}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_partition_with_too_few_rows_is_named(command: str, graph: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    partition = graph / "checkpoints" / "embeddings_item_1.v1.h5"
    rows = int((graph / "entities" / "entity_count_item_1.txt").read_text())
    rewrite_embeddings(partition, (rows - 3, 8))
    code, err = run(capsys, *COMMANDS[command])
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, f"checkpoints/embeddings_item_1.v1.h5: 'embeddings' has shape "
                               f"({rows - 3}, 8), expected ({rows}, 8)", "use matching")
    assert not (graph / "out").exists()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_partition_of_another_dimension_is_named(command: str, graph: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    partition = graph / "checkpoints" / "embeddings_item_1.v1.h5"
    rows = int((graph / "entities" / "entity_count_item_1.txt").read_text())
    rewrite_embeddings(partition, (rows, 4))
    code, err = run(capsys, *COMMANDS[command])
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, f"checkpoints/embeddings_item_1.v1.h5: 'embeddings' has shape "
                               f"({rows}, 4), expected ({rows}, 8)",
                          "trained with dimension 4; set dimension 4")
    assert not (graph / "out").exists()


# The model file of a checkpoint, or of init_path, made for another config.

CHANGES = {
    "dimension": (["-p", "dimension=16"],
                  "relations/0/operator/rhs/diagonal has shape (8,) in the file, (16,) in this "
                  "config"),
    "operator": (["-p", "relations.0.operator=translation"],
                 "relations/0/operator/rhs/translation (8,) is not in the file; "
                 "relations/0/operator/rhs/diagonal (8,) is in the file but not in this config"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_resuming_under_a_changed_config_says_what_changed(
        change: str, graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overrides, difference = CHANGES[change]
    code, err = run(capsys, "train", "config.json", "-p", "num_epochs=2", *overrides)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, "checkpoints/model.v1.h5: does not fit this config: ",
                          difference, "restore that config", "set a new checkpoint_path")
    assert "init_path" not in err


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_init_path_of_another_config_says_what_changed(
        change: str, graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overrides, difference = CHANGES[change]
    code, err = run(capsys, "train", "config.json", "-p", "init_path=checkpoints",
                    "-p", "checkpoint_path=fresh", *overrides)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, "checkpoints/model.v1.h5: does not fit this config: ",
                          difference, "drop init_path")
    assert "set a new checkpoint_path" not in err


# Exports appear whole or not at all.

@pytest.mark.parametrize("output_format", list(EXPORTED))
def test_an_export_that_fails_leaves_no_output(output_format: str, graph: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The second entity type's last partition is truncated: the first type's file was
    complete by then, and must not appear."""
    partition = graph / "checkpoints" / "embeddings_item_1.v1.h5"
    partition.write_bytes(partition.read_bytes()[:1000])
    code, err = run(capsys, "export", "config.json", "out", "--format", output_format,
                    "--entity-types", "user", "item")
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, "embeddings_item_1.v1.h5: not a readable HDF5 file")
    assert not (graph / "out").exists()


def test_an_export_that_fails_leaves_an_existing_folder_as_it_was(
        graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (graph / "out").mkdir()
    (graph / "out" / "notes.txt").write_text("mine")
    partition = graph / "checkpoints" / "embeddings_item_1.v1.h5"
    partition.write_bytes(partition.read_bytes()[:1000])
    code, _ = run(capsys, "export", "config.json", "out")
    assert code == EXIT_BAD_INPUT
    assert [p.name for p in (graph / "out").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("output_format", list(EXPORTED))
def test_an_export_publishes_exactly_its_files(output_format: str, graph: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (graph / "out").mkdir()
    (graph / "out" / "notes.txt").write_text("mine")
    code, err = run(capsys, "export", "config.json", "out", "--format", output_format)
    assert code == 0, err
    files = sorted(p.name for p in (graph / "out").iterdir())
    assert files == sorted([*EXPORTED[output_format], "notes.txt", "relation_parameters.tsv"])


def test_an_export_refuses_existing_files_unless_told_to_overwrite(
        graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "export", "config.json", "out")[0] == 0
    embeddings = graph / "out" / "embeddings_user.tsv"
    embeddings.write_text("older export\n")
    code, err = run(capsys, "export", "config.json", "out")
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, "out/embeddings_user.tsv: already exists (3 of the output "
                               "files do); pass --overwrite")
    assert embeddings.read_text() == "older export\n"
    assert run(capsys, "export", "config.json", "out", "--overwrite")[0] == 0
    assert len(embeddings.read_text().splitlines()) == 30


def test_an_export_onto_a_file_is_refused(graph: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (graph / "out.tsv").write_text("keep me\n")
    code, err = run(capsys, "export", "config.json", "out.tsv")
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, "out.tsv: is a file, and the output is a directory")
    assert (graph / "out.tsv").read_text() == "keep me\n"


# Where `eval --output` writes.

def test_eval_output_creates_its_folder(graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "eval", "config.json", "--output", "results/run-1/metrics.json")
    assert code == 0, err
    metrics = json.loads((graph / "results" / "run-1" / "metrics.json").read_text())
    assert metrics["mode"] == "raw" and metrics["count"] == 2 * 120


def test_eval_output_into_a_pipe_is_written_into_it(graph: Path) -> None:
    """A pipe (as /dev/stdout may be) is written into: renaming a file onto it, as a file is
    published, would put a file in its place."""
    os.mkfifo(graph / "pipe")
    # Opened for reading first and without waiting, so that the command's open for writing
    # does not wait either; the metrics fit in the pipe's buffer until they are read.
    reader = os.open(graph / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert main(["eval", "config.json", "--output", "pipe", "--quiet"]) == 0
        written = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert json.loads(written)["count"] == 2 * 120
    assert stat.S_ISFIFO((graph / "pipe").lstat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_eval_output_onto_a_full_device_is_one_line_and_leaves_the_device(
        graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mknod(graph / "full", stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full's numbers
    code, err = run(capsys, "eval", "config.json", "--output", "full")
    assert code == EXIT_TRANSIENT
    assert_one_line_error(err, "full: no space left on device")
    assert stat.S_ISCHR((graph / "full").lstat().st_mode)


def test_eval_output_through_a_link_replaces_the_file_it_points_at(
        graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (graph / "run-1.json").write_text("{}\n")
    (graph / "latest.json").symlink_to("run-1.json")
    code, err = run(capsys, "eval", "config.json", "--output", "latest.json")
    assert code == 0, err
    assert (graph / "latest.json").is_symlink()
    assert json.loads((graph / "run-1.json").read_text())["count"] == 2 * 120


@pytest.mark.parametrize(("output", "problem"), [
    ("checkpoints", "checkpoints: is a directory; name a file such as"),
    ("config.json/metrics.json", "config.json: is a file, so metrics.json cannot be written"),
])
def test_eval_output_at_an_impossible_place_is_refused(
        output: str, problem: str, graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "eval", "config.json", "--output", output)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err, problem)
