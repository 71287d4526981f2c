"""Featurized entities end to end: an entity is the mean of its features' embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.edges import open_bucket_writer
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory
from tessera.training.coordinator import train


def test_training_on_featurized_entities_moves_feature_embeddings(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    num_users, num_features, num_edges = 50, 20, 2000
    # Each user has two features; the rhs side (items) is plain.
    write_entity_count(Directory(str(tmp_path / "entities")), "user", 0, num_features)
    write_entity_count(Directory(str(tmp_path / "entities")), "item", 0, 30)
    user_features = rng.integers(0, num_features, (num_users, 2))
    users = rng.integers(0, num_users, num_edges)
    items = (users * 7) % 30  # a planted user -> item map
    offsets = np.arange(0, 2 * num_edges + 1, 2)
    with open_bucket_writer(Directory(str(tmp_path / "edges")), 0, 0) as writer:
        writer.append(np.zeros(num_edges, np.int64), np.full(num_edges, -1), items,
                      lhs_features=(offsets, user_features[users].reshape(-1)))
    config = parse_config({
        "entities": {"user": {"num_partitions": 1, "featurized": True},
                     "item": {"num_partitions": 1}},
        "relations": [{"name": "bought", "lhs": "user", "rhs": "item"}],
        "dimension": 8, "comparator": "dot", "loss_fn": "softmax", "num_epochs": 5,
        "batch_size": 100, "num_batch_negs": 20, "num_uniform_negs": 0, "workers": 1,
        "eval_fraction": 0.1, "hogwild_delay": 0,
        "entity_path": str(tmp_path / "entities"), "edge_paths": [str(tmp_path / "edges")],
        "checkpoint_path": str(tmp_path / "checkpoints")})
    train(config, Reporter("quiet"))
    store = CheckpointStore(Directory(config.checkpoint_path))
    features, _ = store.read_embeddings("user", 0)
    assert features.shape == (num_features, 8)
    assert np.abs(features).max() > 10 * config.init_scale  # the feature rows were trained
    stats = store.read_stats()
    assert stats[-1]["eval_stats_after"]["mrr"] > stats[0]["eval_stats_before"]["mrr"]
    assert json.loads((tmp_path / "checkpoints" / "config.json").read_text())[
        "entities"]["user"]["featurized"] is True
