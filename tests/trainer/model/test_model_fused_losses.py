"""`EmbeddingModel.training_loss` (each side's corruptions through `fused_losses`) gives the
loss and gradients of `forward` followed by `backward()`, for every config it serves:
dynamic relations with each operator, regularizers, featurized entities, each loss, each kind
of negatives. Every case runs with the compiled kernels and with the torch code.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tessera import kernels
from tessera.edgelist import EdgeList, EntityList
from tessera.model import DYNAMIC_OPERATORS, LOSSES, EmbeddingModel
from tessera.model.rows import TouchedRows

DIM = 6
NUM_RELATIONS = 4


@pytest.fixture(autouse=True, params=["kernels", "torch"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.param == "kernels" and not kernels.AVAILABLE:
        pytest.skip("tessera._kernels is not built")
    monkeypatch.setattr(kernels, "AVAILABLE", request.param == "kernels")
    yield


def random_model(make_config, operator: str, num_relations: int = NUM_RELATIONS,
                 **overrides: Any) -> EmbeddingModel:
    """A model whose parameters are all moved away from their (often neutral) initial value."""
    relation = {"name": "r", "lhs": "node", "rhs": "node", "operator": operator}
    relation.update(overrides.pop("relation", {}))
    model = EmbeddingModel(make_config(relations=[relation], dimension=DIM, **overrides),
                           num_relations)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model


def random_edges(num_edges: int, num_rows: int, num_relations: int = NUM_RELATIONS) -> EdgeList:
    generator = torch.Generator().manual_seed(4)
    return EdgeList.from_ids(torch.randint(num_relations, (num_edges,), generator=generator),
                             torch.randint(num_rows, (num_edges,), generator=generator),
                             torch.randint(num_rows, (num_edges,), generator=generator))


def gradients(touched: list[TouchedRows]) -> list[torch.Tensor]:
    """Each table's summed row gradients, dense."""
    dense = []
    for entry in touched:
        total = torch.zeros_like(entry.table)
        total.index_add_(0, entry.rows, entry.embeddings.grad)
        dense.append(total)
    return dense


def assert_fused_equals_autograd(model: EmbeddingModel, edges: EdgeList,
                                 lhs: torch.Tensor, rhs: torch.Tensor, **counts: int) -> None:
    results = []
    for fused in (False, True):
        model.zero_grad(set_to_none=True)
        score = model.training_loss if fused else model
        result = score(edges, lhs, rhs, generator=torch.Generator().manual_seed(5), **counts)
        result.loss.backward()
        params = {name: p.grad.clone() for name, p in model.named_parameters()
                  if p.grad is not None}
        results.append((float(result.loss.detach()), result.regularization,
                        gradients(result.touched), params))
    (ref_loss, ref_reg, ref_rows, ref_params), (loss, reg, rows, params) = results
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert reg == pytest.approx(ref_reg, rel=1e-5)
    assert not ref_loss or any(grad.abs().sum() > 0 for grad in ref_rows)  # a real check
    for expected, got in zip(ref_rows, rows, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert params.keys() == ref_params.keys()
    for name, expected in ref_params.items():
        torch.testing.assert_close(params[name], expected, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("operator", "comparator", "loss"), list(itertools.product(
    sorted(DYNAMIC_OPERATORS), ["cos", "dot"], sorted(LOSSES))))
def test_dynamic_relations_for_every_operator_comparator_and_loss(
        make_config, operator: str, comparator: str, loss: str) -> None:
    model = random_model(make_config, operator, dynamic_relations=True, comparator=comparator,
                         loss_fn=loss, margin=0.3)
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    # 11 edges in chunks of 3: the last chunk is padded.
    assert_fused_equals_autograd(model, random_edges(11, 9), table, table,
                                 num_batch_negs=3, num_uniform_negs=2)


SETUPS = {
    "FB15k-style": ({"dynamic_relations": True, "global_emb": False,
                     "regularization_coef": 1e-3, "loss_fn": "softmax"},
                    {"num_batch_negs": 4, "num_uniform_negs": 5}),
    "regularizer, one relation": ({"regularization_coef": 0.1},
                                  {"num_batch_negs": 3, "num_uniform_negs": 2}),
    "left side disabled": ({"dynamic_relations": True, "disable_lhs_negs": True},
                           {"num_batch_negs": 3, "num_uniform_negs": 2}),
    "uniform only": ({"dynamic_relations": True}, {"num_batch_negs": 0, "num_uniform_negs": 4}),
    "batch only": ({"dynamic_relations": True}, {"num_batch_negs": 5, "num_uniform_negs": 0}),
    "no negatives": ({"dynamic_relations": True}, {"num_batch_negs": 0,
                                                   "num_uniform_negs": 0}),
    "all_negs": ({"dynamic_relations": True, "relation": {"all_negs": True}},
                 {"num_batch_negs": 3, "num_uniform_negs": 2}),
    "max_norm, weight": ({"dynamic_relations": True, "max_norm": 0.5,
                          "relation": {"weight": 2.5}},
                         {"num_batch_negs": 3, "num_uniform_negs": 2}),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_every_kind_of_negatives_and_regularizer(make_config, setup: str, loss: str) -> None:
    overrides, counts = SETUPS[setup]
    num_relations = NUM_RELATIONS if overrides.get("dynamic_relations") else 1
    model = random_model(make_config, "complex_diagonal", num_relations,
                         **{"loss_fn": loss, **overrides})
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    assert_fused_equals_autograd(model, random_edges(11, 9, num_relations), table.clone(),
                                 table.clone(), **counts)


def test_featurized_entities(make_config) -> None:
    entities = {"doc": {"num_partitions": 1, "featurized": True}, "tag": {"num_partitions": 1}}
    relations = [{"name": "tagged", "lhs": "doc", "rhs": "tag", "operator": "diagonal"}]
    model = EmbeddingModel(make_config(entities=entities, relations=relations, dimension=DIM,
                                       loss_fn="softmax"), 1)
    features = torch.randn(11, DIM, generator=torch.Generator().manual_seed(6))
    tags = torch.randn(6, DIM, generator=torch.Generator().manual_seed(7))
    docs = EntityList.from_features(torch.tensor([0, 2, 3, 6, 8]),
                                    torch.tensor([0, 5, 2, 5, 5, 3, 1, 9]))
    batch = EdgeList(rel=torch.zeros(4, dtype=torch.long), lhs=docs,
                     rhs=EntityList.from_ids(torch.tensor([1, 1, 3, 0])))
    assert_fused_equals_autograd(model, batch, features, tags, num_batch_negs=3,
                                 num_uniform_negs=2)


def test_the_fused_path_keeps_no_scores(make_config) -> None:
    """What makes it faster: autograd holds no [C, S, M] tensor but the one it needs."""
    model = random_model(make_config, "complex_diagonal", dynamic_relations=True,
                         loss_fn="softmax")
    table = torch.randn(50, DIM, generator=torch.Generator().manual_seed(6))
    score_copies = []
    for score in (model, model.training_loss):
        saved: list[tuple[int, ...]] = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t, saved=saved: saved.append(tuple(t.shape)) or t, lambda t: t):
            score(random_edges(40, 50), table, table, num_batch_negs=10, num_uniform_negs=10,
                  generator=torch.Generator().manual_seed(5))
        # [C, S, M] scores, or [N, 1 + M] with the positive (softmax)
        score_copies.append(sum(1 for shape in saved
                                if shape[-2:] == (10, 20) or shape[-1] == 21))
    assert score_copies[1] < score_copies[0]


def test_the_softmax_loss_takes_the_compiled_kernel(make_config, monkeypatch: pytest.MonkeyPatch,
                                                    request: pytest.FixtureRequest) -> None:
    """So that the comparisons above hold the kernel, not only the torch code, to autograd."""
    calls = []
    real = kernels.softmax_loss
    monkeypatch.setattr(kernels, "softmax_loss", lambda *args: calls.append(1) or real(*args))
    model = random_model(make_config, "complex_diagonal", dynamic_relations=True,
                         loss_fn="softmax")
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    model.training_loss(random_edges(11, 9), table, table, num_batch_negs=3,
                        num_uniform_negs=2).loss.backward()
    assert bool(calls) == kernels.AVAILABLE
