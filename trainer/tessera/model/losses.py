"""Losses: how positive scores are contrasted with their negatives.

Every loss takes `pos_scores [N]`, `neg_scores [N, M]` (negative j of edge i) and a weight (one
number, or one per edge) and returns the weighted *sum* over edges, as PyTorch-BigGraph does,
so that a batch's loss grows with its size and the learning rate means the same as in PBG.

Negatives that must not count (the edge itself, padding) arrive as `-inf`: every loss here
gives them exactly zero loss and zero, finite gradient.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from ..config import ConfigSchema

Weight = float | torch.Tensor


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


class SoftmaxLoss(Loss):
    """Cross-entropy of the positive among itself and its negatives."""

    def __call__(self, pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                 weight: Weight = 1.0) -> torch.Tensor:
        # The positive is finite, so log_softmax stays finite with -inf negatives.
        logits = torch.cat([pos_scores.unsqueeze(1), neg_scores], dim=1)
        nll = -torch.log_softmax(logits, dim=1)[:, 0]
        return (nll * weight).sum()


LOSSES: dict[str, type[Loss]] = {
    "ranking": RankingLoss,
    "logistic": LogisticLoss,
    "softmax": SoftmaxLoss,
}


def make_loss(config: ConfigSchema) -> Loss:
    return LOSSES[config.loss_fn].from_config(config)
