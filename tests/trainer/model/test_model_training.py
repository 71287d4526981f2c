"""A few optimizer steps on a tiny planted graph lift positives above their negatives, for
every operator x comparator x loss, with dynamic relations and with featurized entities.

The graph: user i bought item i (or, with dynamic relations, item i + 3r under relation r).
Ranking accuracy is the share of (edge, negative) pairs, over the other 7 entities of each
side, where the edge scores higher; random embeddings sit near one half.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from model_support import random_table, ranking_accuracy

from tessera.config import ConfigSchema
from tessera.edgelist import EdgeList, EntityList
from tessera.model import COMPARATORS, LOSSES, OPERATORS, EmbeddingModel
from tessera.model.gradients import batch_gradients
from tessera.training.optimizers import RowAdagrad, make_model_optimizer

COMBINATIONS = list(itertools.product(sorted(OPERATORS), sorted(COMPARATORS), sorted(LOSSES)))
BIPARTITE = {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}}


def train(model: EmbeddingModel, edges: EdgeList, lhs_table: torch.Tensor,
          rhs_table: torch.Tensor, steps: int) -> list[float]:
    """Steps of the Tessera recipe: row-wise Adagrad on the used rows, Adagrad on the rest."""
    config: ConfigSchema = model.config
    row_optimizers = {id(table): RowAdagrad(table, config.lr) for table in (lhs_table, rhs_table)}
    model_optimizer = make_model_optimizer(model, config)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        if model_optimizer is not None:
            model_optimizer.zero_grad()
        gradients = batch_gradients(model, edges, lhs_table, rhs_table,
                                    num_batch_negs=config.num_batch_negs,
                                    num_uniform_negs=config.num_uniform_negs,
                                    generator=generator)
        for rows in gradients.rows:
            row_optimizers[id(rows.table)].step(rows.rows, rows.grads)
        if model_optimizer is not None:
            model_optimizer.step()
        losses.append(gradients.loss)
    return losses


@pytest.mark.parametrize(("operator", "comparator", "loss"), COMBINATIONS)
def test_training_ranks_planted_edges_first(make_config, operator: str, comparator: str,
                                            loss: str) -> None:
    relations = [{"name": "bought", "lhs": "user", "rhs": "item", "operator": operator}]
    config = make_config(entities=BIPARTITE, relations=relations, dimension=8, lr=0.1,
                         comparator=comparator, loss_fn=loss, num_batch_negs=8,
                         num_uniform_negs=2)
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(0)
    users, items = random_table(8, generator), random_table(8, generator)
    edges = EdgeList.from_ids(torch.zeros(8, dtype=torch.long), torch.arange(8), torch.arange(8))
    assert ranking_accuracy(model, edges, users, items) < 0.6
    losses = train(model, edges, users, items, steps=20)
    assert losses[-1] < losses[0]
    assert ranking_accuracy(model, edges, users, items) == 1.0


@pytest.mark.parametrize(("operator", "comparator"), [
    ("complex_diagonal", "dot"), ("rotate", "l2"), ("translation", "l1")])  # ComplEx, RotatE,
# TransE-L1
def test_training_with_dynamic_relations_learns_each_relations_own_edges(
        make_config, operator: str, comparator: str) -> None:
    relations = [{"name": "bought", "lhs": "user", "rhs": "item", "operator": operator}]
    config = make_config(entities=BIPARTITE, relations=relations, dimension=8, lr=0.1,
                         comparator=comparator, loss_fn="softmax", dynamic_relations=True,
                         global_emb=False, num_batch_negs=24, num_uniform_negs=0)
    model = EmbeddingModel(config, 3)
    generator = torch.Generator().manual_seed(0)
    users, items = random_table(8, generator), random_table(8, generator)
    rel = torch.arange(3).repeat_interleave(8)
    lhs = torch.arange(8).repeat(3)
    edges = EdgeList.from_ids(rel, lhs, (lhs + 3 * rel) % 8)
    assert ranking_accuracy(model, edges, users, items) < 0.6
    train(model, edges, users, items, steps=60)
    assert ranking_accuracy(model, edges, users, items) > 0.95


def test_training_with_featurized_entities(make_config) -> None:
    entities = {"doc": {"num_partitions": 1, "featurized": True}, "tag": {"num_partitions": 1}}
    relations = [{"name": "tagged", "lhs": "doc", "rhs": "tag"}]
    config = make_config(entities=entities, relations=relations, dimension=8, lr=0.1,
                         comparator="dot", num_batch_negs=8, num_uniform_negs=2)
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(0)
    features, tags = random_table(10, generator), random_table(8, generator)
    # Document i has its own feature i and a feature (8 or 9) shared with half the others.
    data = torch.stack([torch.arange(8), 8 + torch.arange(8) % 2], dim=1).flatten()
    docs = EntityList.from_features(torch.arange(0, 17, 2), data)
    edges = EdgeList(rel=torch.zeros(8, dtype=torch.long), lhs=docs,
                     rhs=EntityList.from_ids(torch.arange(8)))
    assert ranking_accuracy(model, edges, features, tags) < 0.6
    train(model, edges, features, tags, steps=30)
    assert ranking_accuracy(model, edges, features, tags) == 1.0
