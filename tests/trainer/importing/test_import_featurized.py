"""Importing featurized entity types into PBG's featurized layout, read back as PBG reads it."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from tessera.cli import main
from tessera.errors import BadInputError, ConfigError
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter
from tessera.storage.entity_features import read_entity_features
from tessera.storage.fs import Directory

DOCS = {"d1": ["red", "big"], "d2": ["blue"], "d3": ["red", "small", "blue"], "d4": ["big"]}
EDGES = [("d1", "t1"), ("d2", "t2"), ("d3", "t1"), ("d1", "t3"), ("d4", "t2"), ("d3", "t3")]


def write_inputs(tmp_path: Path, docs: dict[str, list[str]] = DOCS,
                 edges: list[tuple[str, str]] = EDGES) -> tuple[str, str]:
    edge_file, features_file = tmp_path / "edges.tsv", tmp_path / "doc_words.tsv"
    edge_file.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in edges))
    features_file.write_text("".join(f"{doc}\t{word}\n" for doc, words in docs.items()
                                     for word in words))
    return str(edge_file), str(features_file)


def doc_config(make_config, **overrides):
    return make_config(entities={"doc": {"num_partitions": 1, "featurized": True},
                                 "topic": {"num_partitions": 2}},
                       relations=[{"name": "about", "lhs": "doc", "rhs": "topic"}], **overrides)


def pbg_read_bucket(path: Path) -> dict[str, np.ndarray]:
    """Read a bucket as PBG's FileEdgeStorage does: format_version checked, `read_direct`
    into int64 arrays, the ragged `lhsd` pair cut by its offsets, and (EntityList's
    `to_tensor_list`) a featurized side's ids all -1. Plus Tessera's `lhsd_entities`."""
    with h5py.File(path, "r") as file:
        assert file.attrs.get("format_version", None) == 1
        columns = {}
        for key in ("lhs", "rhs", "rel", "lhsd_offsets", "lhsd_data", "lhsd_entities"):
            dataset = file[key]
            assert dataset.ndim == 1 and dataset.dtype == np.int64
            columns[key] = np.empty(dataset.shape, dtype=np.int64)
            if len(dataset):
                dataset.read_direct(columns[key])
        assert "rhsd_offsets" not in file and "rhsd_data" not in file
    assert (columns["lhs"] == -1).all()
    return columns


def test_featurized_import_writes_pbg_featurized_layout(make_config, tmp_path: Path) -> None:
    config = doc_config(make_config)
    edges_tsv, features_tsv = write_inputs(tmp_path)
    import_edges(config, [edges_tsv], ImportOptions(entity_features={"doc": features_tsv}),
                 Reporter("quiet"))
    entity_dir = Path(config.entity_path)
    # PBG's table of a featurized type has one row per feature: count and names are features'.
    words = ["red", "big", "blue", "small"]
    assert (entity_dir / "entity_count_doc_0.txt").read_text().strip() == str(len(words))
    assert json.loads((entity_dir / "entity_names_doc_0.json").read_text()) == words
    entities = read_entity_features(Directory(config.entity_path), "doc", len(words))
    assert entities.names == list(DOCS)
    topics = [json.loads((entity_dir / f"entity_names_topic_{part}.json").read_text())
              for part in range(2)]
    seen = []
    for rhs_part in range(2):
        bucket = pbg_read_bucket(Path(config.edge_paths[0]) / f"edges_0_{rhs_part}.h5")
        offsets, data = bucket["lhsd_offsets"], bucket["lhsd_data"]
        assert len(offsets) == len(bucket["rel"]) + 1 and offsets[0] == 0
        assert offsets[-1] == len(data) and np.all(np.diff(offsets) >= 0)
        for i in range(len(bucket["rel"])):
            doc = entities.names[bucket["lhsd_entities"][i]]
            assert [words[f] for f in data[offsets[i]:offsets[i + 1]]] == DOCS[doc]
            seen.append((doc, topics[rhs_part][bucket["rhs"][i]]))
    assert sorted(seen) == sorted(EDGES)


def test_an_entity_without_features_is_refused_and_nothing_is_left(make_config,
                                                                    tmp_path: Path) -> None:
    config = doc_config(make_config)
    edges_tsv, features_tsv = write_inputs(
        tmp_path, docs={doc: words for doc, words in DOCS.items() if doc != "d4"})
    with pytest.raises(BadInputError, match=r"doc_words.tsv: entity 'd4' of featurized type "
                                            r"'doc' .* has no features"):
        import_edges(config, [edges_tsv], ImportOptions(entity_features={"doc": features_tsv}),
                     Reporter("quiet"))
    for path in (config.entity_path, config.edge_paths[0]):
        assert not Path(path).exists() or not list(Path(path).iterdir())


@pytest.mark.parametrize(("entities", "features", "error", "message"), [
    ({"doc": {"num_partitions": 1, "featurized": True}, "topic": {"num_partitions": 2}}, {},
     BadInputError, "entity type 'doc' is featurized: give its features with --features doc="),
    ({"doc": {"num_partitions": 2, "featurized": True}, "topic": {"num_partitions": 2}},
     {"doc": "f.tsv"}, ConfigError, "entities.doc.num_partitions: is 2, but a featurized type"),
    ({"doc": {"num_partitions": 1}, "topic": {"num_partitions": 2}}, {"doc": "f.tsv"},
     ConfigError, "entities.doc.featurized: is false but --features gives features for it"),
    ({"doc": {"num_partitions": 1, "featurized": True}, "topic": {"num_partitions": 2}},
     {"page": "f.tsv"}, BadInputError, "--features page=...: unknown entity type 'page'"),
])
def test_featurized_import_requests_are_checked_first(make_config, tmp_path: Path, entities,
                                                      features, error, message) -> None:
    config = make_config(entities=entities,
                         relations=[{"name": "about", "lhs": "doc", "rhs": "topic"}])
    edges_tsv, _ = write_inputs(tmp_path)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(".", r"\.")):
        import_edges(config, [edges_tsv], ImportOptions(entity_features=features),
                     Reporter("quiet"))
    assert not Path(config.entity_path).exists()


def test_relations_must_agree_on_a_featurized_side(make_config, tmp_path: Path) -> None:
    config = make_config(
        entities={"doc": {"num_partitions": 1, "featurized": True},
                  "user": {"num_partitions": 1}, "topic": {"num_partitions": 1}},
        relations=[{"name": "about", "lhs": "doc", "rhs": "topic"},
                   {"name": "likes", "lhs": "user", "rhs": "topic"}])
    edges_tsv, features_tsv = write_inputs(tmp_path)
    with pytest.raises(ConfigError, match=r"relations\[0\]\.lhs: is featurized but other"):
        import_edges(config, [edges_tsv], ImportOptions(rel_col=2,
                                                        entity_features={"doc": features_tsv}),
                     Reporter("quiet"))


def test_the_import_command_takes_features_per_type(make_config, tmp_path: Path) -> None:
    config = doc_config(make_config)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config.to_dict()))
    edges_tsv, features_tsv = write_inputs(tmp_path)
    assert main(["import", str(config_file), edges_tsv, "--features", f"doc={features_tsv}",
                 "--quiet"]) == 0
    entities = read_entity_features(Directory(config.entity_path), "doc", 4)
    assert entities.names == list(DOCS)


def test_a_featurized_import_does_not_extend_a_dictionary(make_config, tmp_path: Path) -> None:
    # Its entity files name features, so extending them as entity names would mix the two.
    config = doc_config(make_config)
    edges_tsv, features_tsv = write_inputs(tmp_path)
    options = ImportOptions(entity_features={"doc": features_tsv})
    import_edges(config, [edges_tsv], options, Reporter("quiet"))
    names = (Path(config.entity_path) / "entity_names_doc_0.json").read_text()
    with pytest.raises(BadInputError, match=r"--features: a featurized import cannot extend"):
        import_edges(config, [edges_tsv], options, Reporter("quiet"))
    assert (Path(config.entity_path) / "entity_names_doc_0.json").read_text() == names
    import_edges(config, [edges_tsv],
                 ImportOptions(entity_features={"doc": features_tsv}, replace_dictionary=True),
                 Reporter("quiet"))
    assert (Path(config.entity_path) / "entity_names_doc_0.json").read_text() == names
