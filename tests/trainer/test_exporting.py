"""`tessera export`: every format holds the checkpoint's embeddings in entity-name order."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.errors import BadInputError, ConfigError, FormatError
from tessera.exporting import export_checkpoint
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.entities import write_entity_names
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

QUIET = Reporter("quiet")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    graph = write_planted_graph(tmp_path_factory.mktemp("graph"), 2, num_edges=1000)
    entities = Directory(str(graph.root / "entities"))
    for part in range(2):  # name entity i "n{i}", as an importer would
        write_entity_names(entities, "node", part, [f"n{i}" for i in range(part, 400, 2)])
    train(parse_config(graph.config(num_epochs=1)), QUIET)
    return graph


def expected_embeddings(graph: PlantedGraph) -> np.ndarray:
    store = CheckpointStore(Directory(str(graph.root / "checkpoints")))
    return np.concatenate([store.read_embeddings("node", part)[0] for part in range(2)])


def names_in_partition_order() -> list[str]:
    return [f"n{i}" for part in range(2) for i in range(part, 400, 2)]


def test_tsv_rows_are_name_then_values(trained: PlantedGraph, tmp_path: Path) -> None:
    export_checkpoint(parse_config(trained.config()), str(tmp_path), QUIET)
    rows = [line.split("\t") for line in
            (tmp_path / "embeddings_node.tsv").read_text().splitlines()]
    assert [row[0] for row in rows] == names_in_partition_order()
    values = np.array([[float(v) for v in row[1:]] for row in rows], dtype=np.float32)
    np.testing.assert_array_equal(values, expected_embeddings(trained))
    parameters = (tmp_path / "relation_parameters.tsv").read_text().splitlines()
    assert len(parameters) == 1 and parameters[0].split("\t")[:3] == ["link", "rhs",
                                                                      "translation"]
    assert len(parameters[0].split("\t")) == 3 + 16


def test_rotate_phases_are_exported_as_saved(tmp_path: Path) -> None:
    """Tessera's `rotate` operator: its phases, one row, as the model file holds them."""
    graph = write_planted_graph(tmp_path / "graph", 1, num_edges=500)
    write_entity_names(Directory(str(graph.root / "entities")), "node", 0,
                       [f"n{i}" for i in range(400)])
    config = parse_config(graph.config(num_epochs=1, comparator="l2", relations=[
        {"name": "link", "lhs": "node", "rhs": "node", "operator": "rotate"}]))
    train(config, QUIET)
    export_checkpoint(config, str(tmp_path / "out"), QUIET)
    (row,) = [line.split("\t") for line in
              (tmp_path / "out" / "relation_parameters.tsv").read_text().splitlines()]
    assert row[:3] == ["link", "rhs", "phase"]
    (model,) = (graph.root / "checkpoints").glob("model.v*.h5")
    with h5py.File(model, "r") as file:
        saved = file["model/relations/0/operator/rhs/phase"][...]
    assert saved.shape == (8,) and saved.any()
    np.testing.assert_array_equal(np.array(row[3:], dtype=np.float32), saved)


def test_h5_and_npy_hold_the_same_embeddings(trained: PlantedGraph, tmp_path: Path) -> None:
    config = parse_config(trained.config())
    export_checkpoint(config, str(tmp_path / "h5"), QUIET, output_format="h5")
    export_checkpoint(config, str(tmp_path / "npy"), QUIET, output_format="npy")
    with h5py.File(tmp_path / "h5" / "embeddings_node.h5", "r") as file:
        np.testing.assert_array_equal(file["embeddings"][...], expected_embeddings(trained))
        assert [n.decode() for n in file["names"][...]] == names_in_partition_order()
    np.testing.assert_array_equal(np.load(tmp_path / "npy" / "embeddings_node.npy"),
                                  expected_embeddings(trained))
    names = (tmp_path / "npy" / "names_node.txt").read_text().splitlines()
    assert names == names_in_partition_order()


def test_export_to_object_storage(trained: PlantedGraph, s3_dir: object) -> None:
    config = parse_config({**trained.config(), "storage_options": s3_dir.storage_options})
    written = export_checkpoint(config, s3_dir.url, QUIET)
    target = Directory(s3_dir.url, s3_dir.storage_options)
    assert written == [target.url_of("embeddings_node.tsv"),
                       target.url_of("relation_parameters.tsv")]
    assert target.listdir() == ["embeddings_node.tsv", "relation_parameters.tsv"]
    first_row = target.read_text("embeddings_node.tsv").splitlines()[0].split("\t")
    assert first_row[0] == "n0"
    np.testing.assert_array_equal(np.array(first_row[1:], dtype=np.float32),
                                  expected_embeddings(trained)[0])


def test_a_failed_export_to_object_storage_leaves_nothing(trained: PlantedGraph, tmp_path: Path,
                                                          s3_dir: object) -> None:
    """The model file, read after the embeddings were written, is truncated: the embeddings
    must not appear without their relation parameters."""
    shutil.copytree(trained.root, tmp_path / "graph")
    graph = PlantedGraph(tmp_path / "graph", trained.num_entities, trained.num_partitions)
    (model,) = (graph.root / "checkpoints").glob("model.v*.h5")
    model.write_bytes(model.read_bytes()[:1000])
    config = parse_config({**graph.config(), "storage_options": s3_dir.storage_options})
    with pytest.raises(FormatError, match="not a readable HDF5 file"):
        export_checkpoint(config, s3_dir.url, QUIET)
    target = Directory(s3_dir.url, s3_dir.storage_options)
    left = target.fs.find(target.root, withdirs=True, detail=True)
    assert [path for path, info in left.items() if info["type"] != "directory"] == []
    assert not any(".tessera-staging" in path for path in left)


def test_errors_name_what_is_wrong(trained: PlantedGraph, tmp_path: Path) -> None:
    config = parse_config(trained.config())
    with pytest.raises(ConfigError, match="unknown entity type 'nodes'"):
        export_checkpoint(config, str(tmp_path), QUIET, entity_types=["nodes"])
    empty = parse_config(trained.config(checkpoint_path=str(tmp_path / "none")))
    with pytest.raises(BadInputError, match="no checkpoint to export"):
        export_checkpoint(empty, str(tmp_path), QUIET)


ODD_NAMES = ['say "hi"', '"quoted', "back\\slash", "naïve", "comma,semi;"]


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    """One partition whose first entities have names a CSV import can bring."""
    graph = write_planted_graph(tmp_path_factory.mktemp("odd"), 1, num_edges=500)
    names = ODD_NAMES + [f"n{i}" for i in range(len(ODD_NAMES), 400)]
    write_entity_names(Directory(str(graph.root / "entities")), "node", 0, names)
    train(parse_config(graph.config(num_epochs=1)), QUIET)
    return graph


def test_names_are_written_as_they_are(odd_names: PlantedGraph, tmp_path: Path) -> None:
    """TSV has no quoting: a quote, a backslash or a comma is text, as `tessera import` reads
    it back."""
    config = parse_config(odd_names.config())
    export_checkpoint(config, str(tmp_path / "tsv"), QUIET)
    export_checkpoint(config, str(tmp_path / "npy"), QUIET, output_format="npy")
    rows = [line.split("\t") for line in
            (tmp_path / "tsv" / "embeddings_node.tsv").read_text(encoding="utf-8").splitlines()]
    assert [row[0] for row in rows[:len(ODD_NAMES)]] == ODD_NAMES
    values = np.array([row[1:] for row in rows], dtype=np.float32)
    np.testing.assert_array_equal(values, np.load(tmp_path / "npy" / "embeddings_node.npy"))
    names = (tmp_path / "npy" / "names_node.txt").read_text(encoding="utf-8").splitlines()
    assert names[:len(ODD_NAMES)] == ODD_NAMES and len(names) == len(rows) == 400


@pytest.mark.parametrize(("name", "refused_by"), [("tab\there", ["tsv"]),
                                                  ("two\nlines", ["tsv", "npy"]),
                                                  ("carriage\rreturn", ["tsv", "npy"])])
def test_a_name_a_text_format_would_split_is_refused(odd_names: PlantedGraph, tmp_path: Path,
                                                      name: str, refused_by: list[str]) -> None:
    shutil.copytree(odd_names.root, tmp_path / "graph")
    graph = PlantedGraph(tmp_path / "graph", odd_names.num_entities, odd_names.num_partitions)
    names = [f"n{i}" for i in range(400)]
    names[123] = name
    write_entity_names(Directory(str(graph.root / "entities")), "node", 0, names)
    config = parse_config(graph.config())
    for fmt in ["tsv", "npy", "h5"]:
        output = tmp_path / fmt
        if fmt not in refused_by:
            export_checkpoint(config, str(output), QUIET, output_format=fmt)
            continue
        file = f"{'embeddings' if fmt == 'tsv' else 'names'}_node.{fmt if fmt == 'tsv' else 'txt'}"
        with pytest.raises(BadInputError, match=rf"^{file}: entity {re.escape(repr(name))} "
                                                r"has .*line break.*--format h5"):
            export_checkpoint(config, str(output), QUIET, output_format=fmt)
        assert list(output.rglob("*")) == []  # nothing published, no staging left
    with h5py.File(tmp_path / "h5" / "embeddings_node.h5", "r") as file:
        assert file["names"][123].decode() == name


def test_a_relation_name_with_a_tab_is_refused(odd_names: PlantedGraph, tmp_path: Path) -> None:
    config = parse_config(odd_names.config(relations=[
        {"name": "lin\tk", "lhs": "node", "rhs": "node", "operator": "translation"}]))
    with pytest.raises(BadInputError, match=r"^relation_parameters.tsv: relation 'lin\\tk' "
                                            "has a tab or a line break"):
        export_checkpoint(config, str(tmp_path), QUIET)
