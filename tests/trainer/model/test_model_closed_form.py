"""The closed-form gradients equal autograd's, for everything that takes the fast path.

Each case scores one random batch twice from the same seed: through `EmbeddingModel.forward`
and `backward()` (the reference), and through `closed_form_gradients`. The loss, every table
row's summed gradient and every parameter's gradient must agree. Every case runs twice: with
the compiled kernels (`tessera._kernels`) on one thread, as a Hogwild worker runs them (so
that PBG's default setup takes `kernels.ranking_chunks`), and with the torch code they
replace.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from model_support import dense

from tessera import kernels
from tessera.edgelist import EdgeList
from tessera.model import LOSSES, OPERATORS, EmbeddingModel
from tessera.model.closed_form import closed_form_gradients, supports_closed_form
from tessera.model.gradients import batch_gradients
from tessera.model.rows import RowGradients

INNER_PRODUCT_COMPARATORS = ["cos", "dot"]
DIM = 6


@pytest.fixture(autouse=True, params=["kernels", "torch"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[str]:
    if request.param == "kernels" and not kernels.AVAILABLE:
        pytest.skip("tessera._kernels is not built")
    monkeypatch.setattr(kernels, "AVAILABLE", request.param == "kernels")
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if request.param == "kernels" else threads)
    yield request.param
    torch.set_num_threads(threads)


def random_model(make_config, operator: str = "translation", **overrides: Any
                 ) -> EmbeddingModel:
    """A model with every parameter moved away from its (often neutral) initial value."""
    relation = {"name": "r", "lhs": "node", "rhs": "node", "operator": operator}
    relation.update(overrides.pop("relation", {}))
    entities = overrides.pop("entities", None)
    config = make_config(relations=[relation] if entities is None else [
        {**relation, "lhs": "user", "rhs": "item"}], entities=entities, dimension=DIM,
        **overrides)
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model


def random_edges(num_edges: int, lhs_rows: int, rhs_rows: int) -> EdgeList:
    generator = torch.Generator().manual_seed(4)
    return EdgeList.from_ids(torch.zeros(num_edges, dtype=torch.long),
                             torch.randint(lhs_rows, (num_edges,), generator=generator),
                             torch.randint(rhs_rows, (num_edges,), generator=generator))


def both_ways(model: EmbeddingModel, edges: EdgeList, lhs: torch.Tensor, rhs: torch.Tensor,
              **counts: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(loss, row gradients per table, parameter gradients) by autograd, then closed form."""
    results = []
    for closed_form in (False, True):
        model.zero_grad(set_to_none=True)
        generator = torch.Generator().manual_seed(5)
        if closed_form:
            loss, rows = closed_form_gradients(model, edges, lhs, rhs, generator=generator,
                                               **counts)
        else:
            result = model(edges, lhs, rhs, generator=generator, **counts)
            result.loss.backward()
            loss = result.loss.detach()
            rows = [RowGradients(t.table, t.rows, t.embeddings.grad) for t in result.touched]
        params = {name: p.grad.clone() for name, p in model.named_parameters()
                  if p.grad is not None}
        results.append((float(loss), [dense(rows, lhs), dense(rows, rhs)], params))
    return results[0], results[1]


def assert_same(reference: tuple[Any, ...], closed: tuple[Any, ...]) -> None:
    ref_loss, ref_rows, ref_params = reference
    loss, rows, params = closed
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for expected, got in zip(ref_rows, rows):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert params.keys() == ref_params.keys()
    for name, expected in ref_params.items():
        torch.testing.assert_close(params[name], expected, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("operator", "comparator", "loss"), list(itertools.product(
    sorted(OPERATORS), INNER_PRODUCT_COMPARATORS, sorted(LOSSES))))
def test_equals_autograd_for_every_operator_comparator_and_loss(
        make_config, operator: str, comparator: str, loss: str) -> None:
    model = random_model(make_config, operator, comparator=comparator, loss_fn=loss, margin=0.3)
    assert supports_closed_form(model)
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    # 11 edges in chunks of 3: the last chunk is padded.
    reference, closed = both_ways(model, random_edges(11, 9, 9), table, table,
                                  num_batch_negs=3, num_uniform_negs=2)
    assert reference[1][0].abs().sum() > 0
    assert_same(reference, closed)


NEGATIVE_SETUPS = {
    "both sides, no padding": ({}, {"num_batch_negs": 4, "num_uniform_negs": 3}),
    "left side disabled": ({"disable_lhs_negs": True}, {"num_batch_negs": 3,
                                                        "num_uniform_negs": 2}),
    "right side disabled": ({"disable_rhs_negs": True}, {"num_batch_negs": 3,
                                                         "num_uniform_negs": 2}),
    "uniform only": ({}, {"num_batch_negs": 0, "num_uniform_negs": 4}),
    "batch only": ({}, {"num_batch_negs": 5, "num_uniform_negs": 0}),
    "no negatives": ({}, {"num_batch_negs": 0, "num_uniform_negs": 0}),
    "all_negs": ({"relation": {"all_negs": True}}, {"num_batch_negs": 3,
                                                    "num_uniform_negs": 2}),
    "global embeddings, max_norm, weight": (
        {"global_emb": True, "max_norm": 0.5, "relation": {"weight": 2.5}},
        {"num_batch_negs": 3, "num_uniform_negs": 2}),
}


@pytest.mark.parametrize("setup", sorted(NEGATIVE_SETUPS))
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_equals_autograd_for_every_kind_of_negatives(make_config, setup: str,
                                                     loss: str) -> None:
    overrides, counts = NEGATIVE_SETUPS[setup]
    model = random_model(make_config, "diagonal", loss_fn=loss, **overrides)
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    reference, closed = both_ways(model, random_edges(11, 9, 9), table.clone(), table.clone(),
                                  **counts)
    assert_same(reference, closed)


def test_equals_autograd_with_a_table_per_side(make_config) -> None:
    model = random_model(make_config, "complex_diagonal", comparator="cos",
                         entities={"user": {"num_partitions": 1}, "item": {"num_partitions": 1}})
    users = torch.randn(7, DIM, generator=torch.Generator().manual_seed(7))
    items = torch.randn(5, DIM, generator=torch.Generator().manual_seed(8))
    reference, closed = both_ways(model, random_edges(10, 7, 5), users, items,
                                  num_batch_negs=4, num_uniform_negs=3)
    assert reference[1][0].abs().sum() > 0 and reference[1][1].abs().sum() > 0
    assert_same(reference, closed)


@pytest.mark.parametrize("overrides", [
    {"comparator": "l2"}, {"comparator": "squared_l2"}, {"comparator": "l1"}, {"bias": True},
    {"regularization_coef": 0.1}, {"dynamic_relations": True},
    {"entities": {"node": {"num_partitions": 1, "featurized": True}}},
])
def test_the_other_configs_train_through_autograd(make_config, overrides: dict[str, Any]
                                                  ) -> None:
    model = EmbeddingModel(make_config(dimension=DIM, **overrides), 1)
    assert not supports_closed_form(model)
    assert supports_closed_form(EmbeddingModel(make_config(dimension=DIM), 1))


def test_batch_gradients_takes_either_path_with_the_same_result(make_config) -> None:
    """The autograd path of `batch_gradients` (a biased comparator) and its closed form (the
    same model without bias, a zero first coordinate and a frozen bias) agree."""
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    table[:, 0] = 0.0
    edges = random_edges(8, 9, 9)
    results = []
    for bias in (True, False):
        model = EmbeddingModel(make_config(dimension=DIM, bias=bias, comparator="dot"), 1)
        gradients = batch_gradients(model, edges, table, table, num_batch_negs=4,
                                    num_uniform_negs=2, generator=torch.Generator().manual_seed(1))
        assert len(gradients.rows) == 1 and gradients.regularization == 0.0
        results.append((gradients.loss, dense(gradients.rows, table)))
    (biased_loss, biased_rows), (plain_loss, plain_rows) = results
    assert biased_loss == pytest.approx(plain_loss, rel=1e-6)
    torch.testing.assert_close(biased_rows[:, 1:], plain_rows[:, 1:])


@pytest.mark.parametrize(("loss", "counts", "threads", "chunked"), [
    ("ranking", {"num_batch_negs": 3, "num_uniform_negs": 2}, 1, True),
    ("ranking", {"num_batch_negs": 3, "num_uniform_negs": 0}, 1, True),
    ("ranking", {"num_batch_negs": 3, "num_uniform_negs": 2}, 2, False),  # torch splits
    ("ranking", {"num_batch_negs": 0, "num_uniform_negs": 2}, 1, False),  # no batch block
    ("softmax", {"num_batch_negs": 3, "num_uniform_negs": 2}, 1, False),
])
def test_ranking_with_batch_negatives_on_one_thread_scores_chunk_by_chunk(
        make_config, monkeypatch: pytest.MonkeyPatch, fast_path: str, loss: str,
        counts: dict[str, int], threads: int, chunked: bool) -> None:
    if fast_path == "kernels" and not kernels.CHUNKED:
        pytest.skip("torch's CPU library exports no BLAS sgemm_ here")
    calls = []
    monkeypatch.setattr(kernels, "ranking_chunks",
                        lambda *args: calls.append(args) or 0.0)  # records, computes nothing
    torch.set_num_threads(threads)
    model = random_model(make_config, loss_fn=loss)
    table = torch.randn(9, DIM, generator=torch.Generator().manual_seed(6))
    closed_form_gradients(model, random_edges(11, 9, 9), table, table,
                          generator=torch.Generator().manual_seed(5), **counts)
    assert len(calls) == (chunked and fast_path == "kernels")
