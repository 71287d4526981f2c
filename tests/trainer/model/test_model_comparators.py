"""Comparators: known scores, chunked outputs equal to pair-by-pair scoring, bias, gradients."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable

import pytest
import torch

from tessera.config.schema import ComparatorName
from tessera.model.comparators import COMPARATORS, BiasedComparator, make_comparator

NAMES = sorted(COMPARATORS)

# The score of one prepared pair, written out independently of the batched implementation.
PAIR_SCORES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "dot": lambda a, b: (a * b).sum(),
    "cos": lambda a, b: (a * b).sum(),
    "l2": lambda a, b: -(a - b).pow(2).sum().sqrt(),
    "squared_l2": lambda a, b: -(a - b).pow(2).sum(),
    "l1": lambda a, b: -(a - b).abs().sum(),
}

# lhs = [1, 2], rhs = [3, 4]: dot 11; cos 11 / (sqrt(5) * 5); l2 -sqrt(8); squared_l2 -8;
# l1 -4.
KNOWN = {"dot": 11.0, "cos": 11 / (math.sqrt(5) * 5), "l2": -math.sqrt(8), "squared_l2": -8.0,
         "l1": -4.0}


def random_inputs(seed: int, dim: int = 4, requires_grad: bool = False) -> list[torch.Tensor]:
    """lhs_pos, rhs_pos [2 chunks, 3, dim], lhs_neg [2, 4, dim], rhs_neg [2, 5, dim]."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [(2, 3, dim), (2, 3, dim), (2, 4, dim), (2, 5, dim)]
    return [torch.randn(shape, generator=generator, requires_grad=requires_grad)
            for shape in shapes]


def test_registry_holds_exactly_the_config_comparators() -> None:
    assert set(COMPARATORS) == set(typing.get_args(ComparatorName))
    assert set(PAIR_SCORES) == set(COMPARATORS)


@pytest.mark.parametrize("name", NAMES)
def test_known_value(name: str) -> None:
    comparator = COMPARATORS[name]()
    lhs = comparator.prepare(torch.tensor([[[1.0, 2.0]]]))
    rhs = comparator.prepare(torch.tensor([[[3.0, 4.0]]]))
    pos, lhs_neg, rhs_neg = comparator(lhs, rhs, lhs, rhs)
    assert pos.item() == pytest.approx(KNOWN[name], rel=1e-6)
    assert lhs_neg.item() == pytest.approx(KNOWN[name], rel=1e-5)
    assert rhs_neg.item() == pytest.approx(KNOWN[name], rel=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_batched_scores_equal_pair_by_pair_scores(name: str) -> None:
    comparator = COMPARATORS[name]()
    lhs_pos, rhs_pos, lhs_neg, rhs_neg = (comparator.prepare(t) for t in random_inputs(0))
    pos, lhs_scores, rhs_scores = comparator(lhs_pos, rhs_pos, lhs_neg, rhs_neg)
    assert pos.shape == (2, 3) and lhs_scores.shape == (2, 3, 4) and rhs_scores.shape == (2, 3, 5)
    pair = PAIR_SCORES[name]
    for c in range(2):
        for i in range(3):
            assert pos[c, i] == pytest.approx(pair(lhs_pos[c, i], rhs_pos[c, i]).item(), abs=1e-5)
            for j in range(4):
                # Edge i of chunk c with its left-hand side replaced by negative j.
                expected = pair(lhs_neg[c, j], rhs_pos[c, i]).item()
                assert lhs_scores[c, i, j] == pytest.approx(expected, abs=1e-5)
            for j in range(5):
                expected = pair(lhs_pos[c, i], rhs_neg[c, j]).item()
                assert rhs_scores[c, i, j] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_those_of_pair_by_pair_scores(name: str) -> None:
    """The batched products (and `cdist`'s backward, for l1) against autograd through the
    pair-by-pair definition."""
    inputs = random_inputs(3, requires_grad=True)
    comparator = COMPARATORS[name]()
    lhs_pos, rhs_pos, lhs_neg, rhs_neg = (comparator.prepare(t) for t in inputs)
    generator = torch.Generator().manual_seed(4)
    weights = [torch.randn(shape, generator=generator) for shape in ((2, 3), (2, 3, 4),
                                                                      (2, 3, 5))]
    pos, lhs_scores, rhs_scores = comparator(lhs_pos, rhs_pos, lhs_neg, rhs_neg)
    batched = torch.autograd.grad(
        sum((s * w).sum() for s, w in zip((pos, lhs_scores, rhs_scores), weights)), inputs,
        retain_graph=True)  # `prepare`'s part of the graph serves the reference too
    pair = PAIR_SCORES[name]
    reference = torch.stack([pair(lhs_pos[c, i], rhs_pos[c, i]) for c in range(2)
                             for i in range(3)]).view(2, 3)
    lhs_reference = torch.stack([pair(lhs_neg[c, j], rhs_pos[c, i]) for c in range(2)
                                 for i in range(3) for j in range(4)]).view(2, 3, 4)
    rhs_reference = torch.stack([pair(lhs_pos[c, i], rhs_neg[c, j]) for c in range(2)
                                 for i in range(3) for j in range(5)]).view(2, 3, 5)
    expected = torch.autograd.grad(
        sum((s * w).sum() for s, w in zip((reference, lhs_reference, rhs_reference), weights)),
        inputs)
    for got, want in zip(batched, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_biased_scores_add_both_first_coordinates(name: str) -> None:
    biased = BiasedComparator(COMPARATORS[name]())
    base = COMPARATORS[name]()
    lhs_pos, rhs_pos, lhs_neg, rhs_neg = (biased.prepare(t) for t in random_inputs(1, dim=5))
    pos, lhs_scores, rhs_scores = biased(lhs_pos, rhs_pos, lhs_neg, rhs_neg)
    base_pos, base_lhs, base_rhs = base(lhs_pos[..., 1:], rhs_pos[..., 1:], lhs_neg[..., 1:],
                                        rhs_neg[..., 1:])
    c, i, j = 1, 2, 3
    assert pos[c, i] == pytest.approx(
        (base_pos[c, i] + lhs_pos[c, i, 0] + rhs_pos[c, i, 0]).item(), abs=1e-5)
    assert lhs_scores[c, i, j] == pytest.approx(
        (base_lhs[c, i, j] + lhs_neg[c, j, 0] + rhs_pos[c, i, 0]).item(), abs=1e-5)
    assert rhs_scores[c, i, j] == pytest.approx(
        (base_rhs[c, i, j] + lhs_pos[c, i, 0] + rhs_neg[c, j, 0]).item(), abs=1e-5)


def test_biased_dot_known_value_and_prepare_keeps_the_bias() -> None:
    biased = make_comparator("dot", bias=True)
    lhs, rhs = torch.tensor([[[0.5, 1.0, 2.0]]]), torch.tensor([[[-0.25, 3.0, 4.0]]])
    assert biased(lhs, rhs, lhs, rhs)[0].item() == pytest.approx(11.25)
    prepared = make_comparator("cos", bias=True).prepare(torch.tensor([7.0, 3.0, 4.0]))
    assert prepared.tolist() == pytest.approx([7.0, 0.6, 0.8])


def test_cos_prepare_gives_unit_norm_and_keeps_zero_embeddings_finite() -> None:
    comparator = COMPARATORS["cos"]()
    prepared = comparator.prepare(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
    assert torch.allclose(prepared, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_are_finite_even_between_identical_embeddings(name: str) -> None:
    comparator = COMPARATORS[name]()
    lhs_pos, _, lhs_neg, rhs_neg = random_inputs(2, requires_grad=True)
    # The l2 distance of an entity to itself is 0, where a bare sqrt has an infinite slope.
    same = lhs_pos.detach().clone().requires_grad_()
    prepared = [comparator.prepare(t) for t in (lhs_pos, same, lhs_neg, rhs_neg)]
    pos, lhs_scores, rhs_scores = comparator(*prepared)
    (pos.sum() + lhs_scores.sum() + rhs_scores.sum()).backward()
    for tensor in (lhs_pos, same, lhs_neg, rhs_neg):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()
    assert lhs_neg.grad.abs().sum() > 0 and rhs_neg.grad.abs().sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_prepare_vjp_equals_autograd(name: str) -> None:
    comparator = COMPARATORS[name]()
    generator = torch.Generator().manual_seed(7)
    embs = torch.randn(2, 3, 4, generator=generator)
    embs[0, 0] = 0.0  # an all-zero embedding stays finite under cos
    embs.requires_grad_()
    upstream = torch.randn(2, 3, 4, generator=generator)
    prepared = comparator.prepare(embs)
    (prepared * upstream).sum().backward()
    grad = comparator.prepare_vjp(embs.detach(), prepared.detach(), upstream)
    torch.testing.assert_close(grad, embs.grad)


def test_inner_product_comparators_are_those_the_closed_form_handles() -> None:
    assert {n for n in NAMES if COMPARATORS[n].inner_product} == {"cos", "dot"}
    assert not BiasedComparator(COMPARATORS["dot"]()).inner_product
