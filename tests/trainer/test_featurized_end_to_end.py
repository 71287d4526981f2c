"""Featurized entities end to end: import with their features, train, filtered eval, export.

Documents are bags of words (featurized, left-hand side) about topics (plain, two
partitions). The filtered ranks are recomputed here by brute force from the checkpoint's word
embeddings, so the evaluation's own path (entity table from features, entity ids from the
buckets, filtering) is checked against an independent computation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tessera.config import ConfigSchema, parse_config
from tessera.errors import FormatError
from tessera.evaluation.command import evaluate_checkpoint
from tessera.exporting import export_checkpoint
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.edges import open_bucket_writer, read_bucket, read_featurized_entity_ids
from tessera.storage.entities import read_entity_names
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
NUM_DOCS, NUM_WORDS, NUM_TOPICS = 120, 24, 6


def planted_docs() -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Each document has three distinct words; its topic follows from its first word."""
    rng = np.random.default_rng(3)
    docs: dict[str, list[str]] = {}
    bags: set[tuple[int, ...]] = set()
    while len(docs) < NUM_DOCS:
        bag = tuple(sorted(rng.choice(NUM_WORDS, 3, replace=False).tolist()))
        if bag not in bags:
            bags.add(bag)
            docs[f"doc{len(docs)}"] = [f"w{word}" for word in bag]
    edges = [(doc, f"topic{int(words[0][1:]) % NUM_TOPICS}") for doc, words in docs.items()]
    return docs, edges


def write_text(directory: Directory, name: str, text: str) -> str:
    with directory.writing(name) as path:
        Path(path).write_text(text)
    return directory.url_of(name)


def docs_config(root: str, **overrides: Any) -> ConfigSchema:
    return parse_config({
        "entities": {"doc": {"num_partitions": 1, "featurized": True},
                     "topic": {"num_partitions": 2}},
        "relations": [{"name": "about", "lhs": "doc", "rhs": "topic"}],
        "dimension": 8, "comparator": "dot", "global_emb": False, "loss_fn": "softmax",
        "num_epochs": 8, "batch_size": 40, "num_batch_negs": 20, "num_uniform_negs": 0,
        "workers": 1, "eval_fraction": 0, "hogwild_delay": 0, "lr": 0.1,
        "entity_path": f"{root}/entities", "edge_paths": [f"{root}/edges"],
        "checkpoint_path": f"{root}/checkpoints", **overrides})


def import_and_train(config: ConfigSchema, inputs: Directory) -> tuple[dict, list]:
    docs, edges = planted_docs()
    edges_url = write_text(inputs, "edges.tsv", "".join(f"{d}\t{t}\n" for d, t in edges))
    features_url = write_text(inputs, "words.tsv", "".join(
        f"{doc}\t{word}\n" for doc, words in docs.items() for word in words))
    import_edges(config, [edges_url], ImportOptions(entity_features={"doc": features_url}),
                 QUIET)
    train(config, QUIET)
    return docs, edges


def brute_force_filtered_mrr(config: ConfigSchema, docs: dict[str, list[str]],
                             edges: list[tuple[str, str]]) -> float:
    """Both sides of every edge ranked against all entities, the other true edges left out;
    ties count against the edge, as Tessera's ranks do."""
    store = CheckpointStore(Directory(config.checkpoint_path, config.storage_options))
    version = store.current_version()
    entity_dir = Directory(config.entity_path, config.storage_options)
    words = read_entity_names(entity_dir, "doc", 0)
    word_rows, _ = store.read_embeddings("doc", 0, version)
    doc_names = list(docs)
    doc_rows = np.stack([word_rows[[words.index(w) for w in docs[d]]].mean(0)
                         for d in doc_names])
    topic_names, topic_rows = [], []
    for part in range(2):
        topic_names += read_entity_names(entity_dir, "topic", part)
        topic_rows.append(store.read_embeddings("topic", part, version)[0])
    scores = doc_rows @ np.concatenate(topic_rows).T  # [docs, topics]: dot, no operator
    known = {(doc_names.index(d), topic_names.index(t)) for d, t in edges}
    reciprocal = []
    for d, t in known:
        rhs_rivals = [u for u in range(len(topic_names)) if (d, u) not in known]
        lhs_rivals = [e for e in range(len(doc_names)) if (e, t) not in known]
        reciprocal.append(1 / (1 + sum(scores[d, u] >= scores[d, t] for u in rhs_rivals)))
        reciprocal.append(1 / (1 + sum(scores[e, t] >= scores[d, t] for e in lhs_rivals)))
    return float(np.mean(reciprocal))


def test_featurized_entities_import_train_evaluate_filtered_and_export(tmp_path: Path) -> None:
    config = docs_config(str(tmp_path / "run"))
    docs, edges = import_and_train(config, Directory(str(tmp_path / "in")))
    result = evaluate_checkpoint(config, QUIET, filtered=True)
    assert result["count"] == 2 * len(edges)
    assert result["mrr"] == pytest.approx(brute_force_filtered_mrr(config, docs, edges),
                                          rel=1e-5)
    assert result["mrr"] > 0.35  # random ranks give about 0.23: the topics were learned

    written = export_checkpoint(config, str(tmp_path / "export"), QUIET)
    assert {Path(url).name for url in written} >= {"embeddings_doc.tsv",
                                                    "feature_embeddings_doc.tsv"}
    store = CheckpointStore(Directory(config.checkpoint_path))
    word_rows, _ = store.read_embeddings("doc", 0, store.current_version())
    words = read_entity_names(Directory(config.entity_path), "doc", 0)
    exported_words = _read_tsv(tmp_path / "export" / "feature_embeddings_doc.tsv")
    assert list(exported_words) == words
    np.testing.assert_allclose(np.stack(list(exported_words.values())), word_rows, rtol=1e-6)
    exported_docs = _read_tsv(tmp_path / "export" / "embeddings_doc.tsv")
    assert list(exported_docs) == list(docs)
    for doc, vector in exported_docs.items():
        expected = word_rows[[words.index(w) for w in docs[doc]]].mean(0)
        np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-7)


def _read_tsv(path: Path) -> dict[str, np.ndarray]:
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    return {row[0]: np.array([float(v) for v in row[1:]]) for row in rows}


@pytest.mark.parametrize(("entities", "message"), [
    (None, r"edges_0_1\.h5: the featurized lhs side has no 'lhsd_entities'"),
    ("shifted", r"edges_0_1\.h5: lhs row 0 \(id \d+\) does not name an entity of 'doc' "
                r"with that row's features"),
])
def test_filtered_eval_refuses_featurized_buckets_without_true_entity_ids(
        tmp_path: Path, entities: str | None, message: str) -> None:
    """A bucket that does not say which entity each featurized edge names (as a converter of
    one's own writes it), or says it wrongly, is refused, naming the file: not ranked wrongly."""
    config = docs_config(str(tmp_path / "run"), num_epochs=1)
    import_and_train(config, Directory(str(tmp_path / "in")))
    edge_dir = Directory(config.edge_paths[0])
    bucket = read_bucket(edge_dir, 0, 1)
    assert bucket.lhs_offsets is not None and bucket.lhs_data is not None
    ids = read_featurized_entity_ids(edge_dir, 0, 1, "lhs")
    assert ids is not None and len(bucket) > 1
    with open_bucket_writer(edge_dir, 0, 1) as writer:
        writer.append(bucket.rel, bucket.lhs, bucket.rhs,
                      lhs_features=(bucket.lhs_offsets, bucket.lhs_data),
                      lhs_entities=None if entities is None else (ids + 1) % NUM_DOCS)
    with pytest.raises(FormatError, match=message):
        evaluate_checkpoint(config, QUIET, filtered=True)


@pytest.mark.slow
def test_featurized_entities_on_s3(tmp_path: Path, s3_dir: Any) -> None:
    config = docs_config(s3_dir.url + "/run", storage_options=s3_dir.storage_options,
                         num_epochs=4)
    docs, edges = import_and_train(config, Directory(s3_dir.url + "/in",
                                                     s3_dir.storage_options))
    result = evaluate_checkpoint(config, QUIET, filtered=True)
    assert result["mrr"] == pytest.approx(brute_force_filtered_mrr(config, docs, edges),
                                          rel=1e-5)
    export_checkpoint(config, str(tmp_path / "export"), QUIET)
    exported = (tmp_path / "export" / "embeddings_doc.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in exported] == list(docs)
    assert json.loads(json.dumps(result))["mode"] == "filtered"
