"""A distributed job with reciprocal relations and degree negatives: two trainers share the
inverse relation's operator through the parameter server, and each draws its degree
negatives from the bucket it holds."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
from cluster_support import check_no_partition_held_twice, run_cluster, write_config
from support.planted import write_planted_graph

from tessera.config import parse_config
from tessera.evaluation.command import evaluate_checkpoint
from tessera.progress import Reporter


@pytest.mark.slow
def test_two_trainers_learn_with_reciprocal_relations_and_degree_negatives(
        tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", 4, num_edges=4000)
    checkpoints = tmp_path / "checkpoints"
    options = {"reciprocal_relations": True, "num_degree_negs": 10, "num_epochs": 4,
               "checkpoint_path": str(checkpoints)}
    config = write_config(tmp_path / "config.json", graph.config(**options))
    code, logs = run_cluster(config, "--trainers", "2", "--partition-servers", "0")
    assert code == 0, "\n".join(logs.lines[-30:])
    check_no_partition_held_twice(logs)
    test = parse_config(graph.config(edge_paths=[str(graph.root / "test")], **options))
    mrr = evaluate_checkpoint(test, Reporter("quiet"), filtered=True,
                              filter_paths=[str(graph.root / "train"),
                                            str(graph.root / "test")])["mrr"]
    assert mrr > 0.08, mrr  # 400 candidates: random about 0.016
    with h5py.File(checkpoints / "model.v4.h5", "r") as file:
        inverse = file["model/relations/1/operator/rhs/translation"][()]
        assert inverse.shape == (16,) and inverse.any()  # trained by both trainers
