"""The sampled-negatives protocol of `tessera eval`, pinned on graphs whose ranks are known.

Every entity gets the same embedding, so every edge, true or corrupted, scores the same and a
rank is 1 + the number of negatives counted (ties count against the positive, as in PBG).
What is counted is then a matter of protocol alone: PBG's offline evaluation corrupts each
side with the other edges of its chunk of `num_batch_negs` edges plus `num_uniform_negs`
entities drawn with replacement (the `eval_num_*` counts are for the evaluation during
training); Tessera does not count a negative that is the true entity itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tessera.config import parse_config
from tessera.evaluation.command import evaluate_checkpoint
from tessera.progress import Reporter
from tessera.storage.edges import write_bucket
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
NUM_ENTITIES = 6
# Four edges, one chunk: entity 0 twice on the left, entity 1 twice on the right.
FOUR_EDGES = [(0, 1), (0, 2), (3, 4), (5, 1)]


def config(root: Path, edge_set: str, **overrides: Any) -> Any:
    return parse_config({
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": 2, "comparator": "dot", "loss_fn": "softmax", "global_emb": False,
        "num_epochs": 1, "batch_size": 4, "num_batch_negs": 4, "num_uniform_negs": 0,
        # Ignored by `tessera eval`, as by torchbiggraph_eval: had they been used, the chunks
        # would hold 2 edges and 7 uniform negatives would be added.
        "eval_num_batch_negs": 2, "eval_num_uniform_negs": 7,
        "eval_fraction": 0, "workers": 1, "hogwild_delay": 0,
        "entity_path": str(root / "entities"), "edge_paths": [str(root / edge_set)],
        "checkpoint_path": str(root / "checkpoints"), **overrides})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint in which all six entities have the embedding (1, 1)."""
    root = tmp_path_factory.mktemp("protocol")
    write_entity_count(Directory(str(root / "entities")), "node", 0, NUM_ENTITIES)
    many = np.random.default_rng(0).integers(0, NUM_ENTITIES, (2, 600))
    for name, (lhs, rhs) in (("four", np.array(FOUR_EDGES).T), ("many", many)):
        write_bucket(Directory(str(root / name)), 0, 0, np.zeros(len(lhs), np.int64), lhs, rhs)
    train(config(root, "four"), QUIET)
    with h5py.File(root / "checkpoints" / "embeddings_node_0.v1.h5", "r+") as file:
        file["embeddings"][...] = 1.0
        del file["embeddings"].attrs["crc32"]  # changed on purpose
    return root


def test_batch_negatives_are_the_chunk_s_other_edges_ties_counting_against(root: Path) -> None:
    metrics = evaluate_checkpoint(config(root, "four"), QUIET)
    # lhs side: (0,1) and (0,2) see 3 and 5 (the other 0 is the true entity: not counted),
    # (3,4) and (5,1) see 0, 0 and 5 or 3: ranks 3, 3, 4, 4. rhs side: (0,1) and (5,1) see
    # 2 and 4, (0,2) and (3,4) see three others: ranks 3, 4, 4, 3.
    assert metrics["count"] == 8
    assert metrics["mean_rank"] == pytest.approx(3.5)
    assert metrics["mrr"] == pytest.approx((4 / 3 + 4 / 4) / 8)
    assert metrics["hits@1"] == 0 and metrics["hits@10"] == 1
    assert metrics["auc"] == pytest.approx(0.5)  # all ties, each counting one half
    assert metrics["ranked_against"].startswith(
        "each edge's lhs and rhs against up to 3 batch + 0 uniform sampled negatives")


def test_uniform_negatives_repeat_entities_and_never_count_the_true_one(root: Path) -> None:
    metrics = evaluate_checkpoint(config(root, "many", batch_size=600, num_batch_negs=0,
                                         num_uniform_negs=60), QUIET)
    # 60 draws from 6 entities, 5/6 of them another entity: expected rank 1 + 60 * 5/6 = 51,
    # where ranking against each entity once would give 6 (and counting the true entity's
    # draws too, as PBG does, 61).
    assert metrics["count"] == 1200
    assert metrics["mean_rank"] == pytest.approx(51, abs=2)
    assert metrics["ranked_against"].endswith(
        "with at most 6 entities per partition each wrong entity is counted about 10 times, "
        "so ranks are about 10 times those against each entity once")


def test_the_filtered_protocol_says_what_it_ranked_against(root: Path) -> None:
    metrics = evaluate_checkpoint(config(root, "four"), QUIET, filtered=True)
    # 6 candidates less the true entity, less the other true one where there is one (half
    # of the rows): ranks 6 and 5, half each.
    assert metrics["mean_rank"] == pytest.approx(5.5)
    assert metrics["ranked_against"] == (
        f"each edge's lhs and rhs against every entity of its type, other true edges (of "
        f"{root / 'four'}) not counted (filtered)")
