"""Losses: known values, sums over edges, weights, and masked (-inf) negatives."""

from __future__ import annotations

import math
import typing

import pytest
import torch

from tessera.config.schema import LossName
from tessera.model.losses import LOSSES, make_loss


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


# pos = 1, negatives 0.5 and 2, margin 0.1, written out by hand.
KNOWN = {
    "ranking": max(0.0, 0.1 - 1 + 0.5) + max(0.0, 0.1 - 1 + 2),
    "logistic": softplus(-1.0) + (softplus(0.5) + softplus(2.0)) / 2,
    "softmax": math.log(math.exp(1) + math.exp(0.5) + math.exp(2)) - 1,
}
NAMES = sorted(LOSSES)


@pytest.fixture(params=NAMES)
def loss_fn(request: pytest.FixtureRequest, make_config):
    return make_loss(make_config(loss_fn=request.param, margin=0.1))


def scores(seed: int, num_edges: int = 4, num_negs: int = 3) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    pos = torch.randn(num_edges, generator=generator, requires_grad=True)
    neg = torch.randn(num_edges, num_negs, generator=generator, requires_grad=True)
    return pos, neg


def test_registry_holds_exactly_the_config_losses() -> None:
    assert set(LOSSES) == set(typing.get_args(LossName))
    assert set(KNOWN) == set(LOSSES)


@pytest.mark.parametrize("name", NAMES)
def test_known_value(name: str, make_config) -> None:
    loss_fn = make_loss(make_config(loss_fn=name, margin=0.1))
    loss = loss_fn(torch.tensor([1.0]), torch.tensor([[0.5, 2.0]]))
    assert loss.item() == pytest.approx(KNOWN[name], rel=1e-6)


def test_losses_are_summed_over_edges_not_averaged(loss_fn) -> None:
    pos, neg = scores(0)
    single = loss_fn(pos, neg)
    doubled = loss_fn(torch.cat([pos, pos]), torch.cat([neg, neg]))
    assert doubled.item() == pytest.approx(2 * single.item(), rel=1e-6)


def test_weights_scale_each_edge(loss_fn) -> None:
    pos, neg = scores(1, num_edges=2)
    assert loss_fn(pos, neg, 3.0).item() == pytest.approx(3 * loss_fn(pos, neg).item(), rel=1e-6)
    per_edge = loss_fn(pos, neg, torch.tensor([2.0, 0.0]))
    assert per_edge.item() == pytest.approx(2 * loss_fn(pos[:1], neg[:1]).item(), rel=1e-6)


def test_gradients_raise_positives_and_lower_negatives(loss_fn) -> None:
    pos = torch.zeros(3, requires_grad=True)
    neg = torch.zeros(3, 2, requires_grad=True)
    loss_fn(pos, neg).backward()
    assert (pos.grad < 0).all() and (neg.grad > 0).all()


def test_a_masked_negative_counts_as_scored_infinitely_low(loss_fn) -> None:
    pos, neg = scores(2)
    masked = neg.detach().clone()
    masked[:, 1] = float("-inf")
    masked[3, :] = float("-inf")  # a row whose negatives are all masked
    very_low = masked.clone()
    very_low[torch.isinf(very_low)] = -1e4
    masked.requires_grad_()
    loss = loss_fn(pos, masked)
    assert loss.item() == pytest.approx(loss_fn(pos, very_low).item(), rel=1e-6)
    loss.backward()
    assert torch.isfinite(pos.grad).all() and torch.isfinite(masked.grad).all()
    assert (masked.grad[:, 1] == 0).all() and (masked.grad[3] == 0).all()


def test_masking_a_negative_equals_dropping_it_for_ranking_and_softmax(make_config) -> None:
    pos, neg = scores(3)
    masked = torch.cat([neg, torch.full((4, 1), float("-inf"))], dim=1)
    for name in ("ranking", "softmax"):
        loss_fn = make_loss(make_config(loss_fn=name))
        assert loss_fn(pos, masked).item() == pytest.approx(loss_fn(pos, neg).item(), rel=1e-6)


def test_no_negatives_leaves_only_the_logistic_positive_term(make_config) -> None:
    pos = torch.tensor([0.0, 2.0])
    empty = torch.empty(2, 0)
    assert make_loss(make_config(loss_fn="ranking"))(pos, empty).item() == 0
    assert make_loss(make_config(loss_fn="softmax"))(pos, empty).item() == 0
    assert make_loss(make_config(loss_fn="logistic"))(pos, empty).item() == pytest.approx(
        softplus(0.0) + softplus(-2.0))


def test_closed_form_gradients_equal_autograd_with_masked_negatives(loss_fn) -> None:
    pos, neg = scores(6, num_edges=5, num_negs=4)
    masked = neg.detach().clone()
    masked[0, 1] = masked[3, 0] = masked[3, 2] = float("-inf")
    masked.requires_grad_()
    loss_fn(pos, masked).backward()
    loss, pos_grad, neg_grad = loss_fn.value_and_gradients(pos.detach(), masked.detach().clone())
    assert loss.item() == pytest.approx(loss_fn(pos, masked).item(), rel=1e-6)
    torch.testing.assert_close(pos_grad, pos.grad)
    torch.testing.assert_close(neg_grad, masked.grad)
    assert neg_grad[0, 1] == neg_grad[3, 0] == 0.0
