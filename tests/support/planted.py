"""A small graph with planted communities, written in Tessera's (PBG's) on-disk format.

Entities fall into communities and almost every edge joins two members of one community, so
a model that learned anything ranks an edge's true endpoint far above a random one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tessera.storage.edges import write_bucket
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory


@dataclass(frozen=True)
class PlantedGraph:
    root: Path
    num_entities: int
    num_partitions: int

    def config(self, **overrides: Any) -> dict[str, Any]:
        config = {
            "entities": {"node": {"num_partitions": self.num_partitions}},
            "relations": [{"name": "link", "lhs": "node", "rhs": "node",
                           "operator": "translation"}],
            "dimension": 16, "comparator": "dot", "loss_fn": "softmax", "lr": 0.1,
            "num_epochs": 8, "batch_size": 200, "num_batch_negs": 50, "num_uniform_negs": 50,
            "eval_fraction": 0.0, "workers": 1, "hogwild_delay": 0, "global_emb": False,
            "entity_path": str(self.root / "entities"),
            "edge_paths": [str(self.root / "train")],
            "checkpoint_path": str(self.root / "checkpoints"),
        }
        config.update(overrides)
        return config


def write_planted_graph(root: Path, num_partitions: int, num_entities: int = 400,
                        num_communities: int = 8, num_edges: int = 8000,
                        seed: int = 0) -> PlantedGraph:
    """Write `train` and `test` edge sets (test: 5% of the edges) and the entity counts.

    Entity i lives in partition i % P at offset i // P, so every bucket gets edges.
    """
    rng = np.random.default_rng(seed)
    community = rng.integers(0, num_communities, num_entities)
    members = [np.flatnonzero(community == c) for c in range(num_communities)]
    lhs = rng.integers(0, num_entities, num_edges)
    rhs = np.array([rng.choice(members[community[u]]) for u in lhs])
    noise = rng.random(num_edges) < 0.05  # a few edges across communities
    rhs[noise] = rng.integers(0, num_entities, int(noise.sum()))
    is_test = rng.random(num_edges) < 0.05
    entities = Directory(str(root / "entities"))
    for part in range(num_partitions):
        write_entity_count(entities, "node", part, len(range(part, num_entities, num_partitions)))
    for name, mask in (("train", ~is_test), ("test", is_test)):
        _write_buckets(Directory(str(root / name)), lhs[mask], rhs[mask], num_partitions)
    return PlantedGraph(root=root, num_entities=num_entities, num_partitions=num_partitions)


def _write_buckets(directory: Directory, lhs: np.ndarray, rhs: np.ndarray,
                   num_partitions: int) -> None:
    for lhs_part in range(num_partitions):
        for rhs_part in range(num_partitions):
            mask = (lhs % num_partitions == lhs_part) & (rhs % num_partitions == rhs_part)
            write_bucket(directory, lhs_part, rhs_part, np.zeros(int(mask.sum()), np.int64),
                         lhs[mask] // num_partitions, rhs[mask] // num_partitions)
