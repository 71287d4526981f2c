"""Degree negatives (`num_degree_negs`): drawn in proportion to degree in the bucket's training
edges, from the table being trained, after the uniform ones; the same on every path.

The statistical test draws 200,000 negatives from a graph whose degrees are far from
uniform: their distribution must be within 0.01 (total variation) of the degrees', where
uniform draws are 0.35 away, so that no uniform sampler passes by chance.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from model_support import dense, random_table, ranking_accuracy

from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.model.closed_form import supports_closed_form
from tessera.model.gradients import batch_gradients
from tessera.model.negatives import (
    DegreeNegatives,
    DegreePool,
    choose_negatives,
    degree_negatives,
    degree_pools,
    plan_chunking,
)
from tessera.model.rows import RowGradients

DRAWS = 200_000
BIPARTITE = {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}}


def skewed_edges() -> EdgeList:
    """20 entities; entity e is the left side of e + 1 edges, and every right side is 0."""
    lhs = torch.arange(20).repeat_interleave(torch.arange(1, 21))
    return EdgeList.from_ids(torch.zeros(len(lhs), dtype=torch.long), lhs,
                             torch.zeros(len(lhs), dtype=torch.long))


def total_variation(counts: torch.Tensor, expected: torch.Tensor) -> float:
    return 0.5 * float((counts / counts.sum() - expected / expected.sum()).abs().sum())


def test_draws_follow_degree_on_both_sides_of_a_shared_table() -> None:
    edges = skewed_edges()
    table = torch.zeros(20, 4)
    pools = degree_pools(edges, [("node", 0)], [("node", 0)], lambda key: table)
    degree = torch.bincount(torch.cat([edges.lhs.ids, edges.rhs.ids]), minlength=20).double()
    draws = pools[("node", 0)].draw((DRAWS,), torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=20).double()
    assert total_variation(counts, degree) < 0.01
    assert total_variation(torch.ones(20), degree) > 0.35  # uniform draws would fail


def test_each_table_draws_from_its_own_side_of_a_bucket() -> None:
    """Bucket (0, 1) of a partitioned type: the left table's draws are left-hand entities of
    partition 0 in proportion to their degree there; the right table's, right-hand ones."""
    edges = skewed_edges()
    edges = EdgeList.from_ids(edges.rel, edges.lhs.ids, 19 - edges.lhs.ids % 5)
    tables = {("node", 0): torch.zeros(20, 4), ("node", 1): torch.zeros(20, 4)}
    pools = degree_pools(edges, [("node", 0)], [("node", 1)], tables.__getitem__)
    generator = torch.Generator().manual_seed(1)
    for key, ids in ((("node", 0), edges.lhs.ids), (("node", 1), edges.rhs.ids)):
        counts = torch.bincount(pools[key].draw((DRAWS,), generator), minlength=20).double()
        degree = torch.bincount(ids, minlength=20).double()
        assert total_variation(counts, degree) < 0.01
        assert bool((counts[degree == 0] == 0).all())  # never an entity with no edge here


def test_relations_of_other_types_are_left_out() -> None:
    """Two relation types whose left sides are different entity types: each type's pool
    holds only the edges of the relations with that type on the side."""
    edges = EdgeList.from_ids(torch.tensor([0, 1, 0, 1, 1]), torch.tensor([1, 2, 1, 3, 3]),
                              torch.tensor([0, 0, 1, 1, 0]))
    tables = {key: torch.zeros(5, 2) for key in (("user", 0), ("admin", 0), ("item", 0))}
    pools = degree_pools(edges, [("user", 0), ("admin", 0)], [("item", 0), ("item", 0)],
                         tables.__getitem__)
    assert [column.tolist() for column in pools[("user", 0)].columns] == [[1, 1]]
    assert [column.tolist() for column in pools[("admin", 0)].columns] == [[2, 3, 3]]
    assert [column.tolist() for column in pools[("item", 0)].columns] == [[0, 0, 1, 1, 0]]


def test_degree_negatives_follow_the_uniform_ones_in_each_chunk() -> None:
    chunking = plan_chunking(10, False, 3, 2)
    pool = DegreePool((torch.tensor([7, 7, 9]),))
    options: dict[str, Any] = {"disabled": False, "featurized": False, "all_negs": False,
                               "num_batch_negs": 3, "num_uniform_negs": 2, "num_rows": 5}
    plain = choose_negatives(chunking, generator=torch.Generator().manual_seed(2), **options)
    with_degree = choose_negatives(chunking, generator=torch.Generator().manual_seed(2),
                                   num_degree_negs=4, degree_pool=pool, **options)
    assert plain.extra_rows is not None and with_degree.extra_rows is not None
    assert with_degree.extra_rows.shape == (chunking.num_chunks, 6)
    assert torch.equal(with_degree.extra_rows[:, :2], plain.extra_rows)
    assert set(with_degree.extra_rows[:, 2:].flatten().tolist()) <= {7, 9}
    # Without a pool (no training edge for that table) they are drawn uniformly.
    no_pool = choose_negatives(chunking, generator=torch.Generator().manual_seed(2),
                               num_degree_negs=4, **options)
    assert no_pool.extra_rows is not None and no_pool.extra_rows.shape == (4, 6)
    assert degree_negatives(0, {"k": pool}, "k", "k") is None


@pytest.mark.parametrize("loss", ["ranking", "softmax"])
def test_the_fast_path_equals_autograd_with_degree_negatives(make_config, loss: str) -> None:
    """Closed-form gradients (CPU fast path) against forward + backward, from one seed."""
    config = make_config(dimension=6, comparator="dot", loss_fn=loss,
                         relations=[{"name": "r", "lhs": "node", "rhs": "node",
                                     "operator": "translation"}])
    model = EmbeddingModel(config, 1)
    assert supports_closed_form(model)
    table = torch.randn(9, 6, generator=torch.Generator().manual_seed(6))
    edges = EdgeList.from_ids(torch.zeros(11, dtype=torch.long),
                              torch.randint(9, (11,), generator=torch.Generator().manual_seed(7)),
                              torch.randint(9, (11,), generator=torch.Generator().manual_seed(8)))
    pools = degree_pools(edges, [("node", 0)], [("node", 0)], lambda key: table)
    degree = DegreeNegatives(3, pools[("node", 0)], pools[("node", 0)])
    counts = {"num_batch_negs": 3, "num_uniform_negs": 2, "degree": degree}
    reference = model(edges, table, table, generator=torch.Generator().manual_seed(5), **counts)
    reference.loss.backward()
    assert reference.lhs_neg_scores.shape == (11, 3 + 2 + 3)
    expected = dense([RowGradients(t.table, t.rows, t.embeddings.grad)
                      for t in reference.touched], table)
    expected_params = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    fast = batch_gradients(model, edges, table, table,
                           generator=torch.Generator().manual_seed(5), **counts)
    assert float(fast.loss) == pytest.approx(float(reference.loss.detach()), rel=1e-5)
    torch.testing.assert_close(dense(fast.rows, table), expected, rtol=1e-4, atol=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected_params[name], rtol=1e-4, atol=1e-5)


def test_training_with_degree_negatives_ranks_planted_edges_first(make_config) -> None:
    """Only degree negatives (no batch, no uniform ones): user i bought item i."""
    config = make_config(entities=BIPARTITE, dimension=8, lr=0.1, comparator="dot",
                         loss_fn="softmax", num_batch_negs=0, num_uniform_negs=0,
                         relations=[{"name": "bought", "lhs": "user", "rhs": "item",
                                     "operator": "diagonal"}])
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(0)
    users, items = random_table(8, generator), random_table(8, generator)
    edges = EdgeList.from_ids(torch.zeros(8, dtype=torch.long), torch.arange(8), torch.arange(8))
    tables = {("user", 0): users, ("item", 0): items}
    pools = degree_pools(edges, [("user", 0)], [("item", 0)], tables.__getitem__)
    degree = degree_negatives(6, pools, ("user", 0), ("item", 0))
    assert ranking_accuracy(model, edges, users, items) < 0.6
    optimizers = {id(t): torch.zeros(len(t)) for t in (users, items)}
    losses = []
    for _ in range(40):
        gradients = batch_gradients(model, edges, users, items, num_batch_negs=0,
                                    num_uniform_negs=0, generator=generator, degree=degree)
        for rows in gradients.rows:  # row-wise Adagrad, as training steps
            accumulator = optimizers[id(rows.table)]
            accumulator.index_add_(0, rows.rows, rows.grads.square().mean(1))
            rows.table.index_add_(0, rows.rows, -0.1 * rows.grads
                                  / (accumulator[rows.rows].sqrt().unsqueeze(1) + 1e-10))
        losses.append(float(gradients.loss))
    assert losses[-1] < losses[0]
    assert ranking_accuracy(model, edges, users, items) == 1.0
