"""Losses: how positive scores are contrasted with their negatives.

Every loss takes `pos_scores [N]`, `neg_scores [N, M]` (negative j of edge i) and a weight (one
number, or one per edge) and returns the weighted *sum* over edges, as PyTorch-BigGraph does,
so that a batch's loss grows with its size and the learning rate means the same as in PBG.

Negatives that must not count (the edge itself, padding) arrive as `-inf`: every loss here
gives them exactly zero loss and zero, finite gradient.

Each loss also writes out its gradients (`value_and_gradients`), for the training fast path
(`closed_form`): the negative scores of a batch are its largest tensor, and differentiating
them in closed form, in place, saves autograd's copies of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from ..config import ConfigSchema

Weight = float | torch.Tensor
# (summed loss, d loss / d pos_scores [N], d loss / d neg_scores [N, M])
LossGradients = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def per_negative(weight: Weight) -> Weight:
    """A weight that broadcasts against [N, M] values."""
    return weight.unsqueeze(1) if isinstance(weight, torch.Tensor) else weight


class Loss(ABC):
    @classmethod
    def from_config(cls, config: ConfigSchema) -> Loss:
        return cls()

    @abstractmethod
    def __call__(self, pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                 weight: Weight = 1.0) -> torch.Tensor:
        """The weighted sum of the loss over the N edges."""

    @abstractmethod
    def value_and_gradients(self, pos_scores: torch.Tensor,
                            neg_scores: torch.Tensor) -> LossGradients:
        """The loss (weight 1) and its gradients w.r.t. both score tensors, in closed form.
        `neg_scores` is consumed: it may be overwritten (by the gradient, for one)."""


class RankingLoss(Loss):
    """Hinge: each negative should score at least `margin` below its positive."""

    def __init__(self, margin: float) -> None:
        self.margin = margin

    @classmethod
    def from_config(cls, config: ConfigSchema) -> Loss:
        return cls(config.margin)

    def __call__(self, pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                 weight: Weight = 1.0) -> torch.Tensor:
        violation = F.relu(self.margin - pos_scores.unsqueeze(1) + neg_scores)
        return (violation * per_negative(weight)).sum()

    def value_and_gradients(self, pos_scores: torch.Tensor,
                            neg_scores: torch.Tensor) -> LossGradients:
        violation = neg_scores.sub_((pos_scores - self.margin).unsqueeze(1)).clamp_min_(0)
        loss = violation.sum()
        # Each violated pair pulls its negative up and its positive down by one; sign() turns
        # the violations into those ones where they are positive, in place.
        neg_grad = violation.sign_()
        return loss, -neg_grad.sum(1), neg_grad


class LogisticLoss(Loss):
    """Binary cross-entropy: positives towards 1, negatives towards 0. Each edge's negatives
    share a weight of 1/M, so that positives and negatives count alike."""

    def __call__(self, pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                 weight: Weight = 1.0) -> torch.Tensor:
        # softplus(-x) is the cross-entropy of logit x against 1, softplus(x) against 0; unlike
        # the fused BCE, softplus is exactly 0 with gradient 0 at -inf.
        pos_loss = (F.softplus(-pos_scores) * weight).sum()
        num_negs = neg_scores.shape[1]
        if num_negs == 0:
            return pos_loss
        neg_loss = (F.softplus(neg_scores) * per_negative(weight)).sum()
        return pos_loss + neg_loss / num_negs

    def value_and_gradients(self, pos_scores: torch.Tensor,
                            neg_scores: torch.Tensor) -> LossGradients:
        loss = F.softplus(-pos_scores).sum()
        pos_grad = -torch.sigmoid(-pos_scores)
        num_negs = neg_scores.shape[1]
        if num_negs == 0:
            return loss, pos_grad, neg_scores
        loss = loss + F.softplus(neg_scores).sum() / num_negs
        return loss, pos_grad, neg_scores.sigmoid_().div_(num_negs)


class SoftmaxLoss(Loss):
    """Cross-entropy of the positive among itself and its negatives."""

    def __call__(self, pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                 weight: Weight = 1.0) -> torch.Tensor:
        # The positive is finite, so log_softmax stays finite with -inf negatives.
        logits = torch.cat([pos_scores.unsqueeze(1), neg_scores], dim=1)
        nll = -torch.log_softmax(logits, dim=1)[:, 0]
        return (nll * weight).sum()

    def value_and_gradients(self, pos_scores: torch.Tensor,
                            neg_scores: torch.Tensor) -> LossGradients:
        # The gradient of the cross-entropy is softmax minus the one-hot of the positive.
        shift = torch.maximum(pos_scores, neg_scores.amax(1)) if neg_scores.shape[1] \
            else pos_scores
        pos_exp = (pos_scores - shift).exp_()
        neg_exp = neg_scores.sub_(shift.unsqueeze(1)).exp_()
        total = neg_exp.sum(1).add_(pos_exp)
        loss = (total.log() + shift - pos_scores).sum()
        return loss, pos_exp.div_(total).sub_(1), neg_exp.div_(total.unsqueeze(1))


LOSSES: dict[str, type[Loss]] = {
    "ranking": RankingLoss,
    "logistic": LogisticLoss,
    "softmax": SoftmaxLoss,
}


def make_loss(config: ConfigSchema) -> Loss:
    return LOSSES[config.loss_fn].from_config(config)
