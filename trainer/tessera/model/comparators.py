"""Comparators: the score of a left-hand embedding against a right-hand one.

Scores come in chunks, PyTorch-BigGraph's way: `C` chunks of `n` positive pairs, each chunk
with its own negatives. A comparator returns the `n` positive scores of every chunk and, per
chunk, every positive against every negative of each side, as batched matrix products:

    lhs_pos, rhs_pos [C, n, d]   lhs_neg [C, m, d]   rhs_neg [C, k, d]
    -> pos [C, n], lhs_neg_scores [C, n, m], rhs_neg_scores [C, n, k]

where `lhs_neg_scores[c, i, j]` scores `lhs_neg[c, j]` against `rhs_pos[c, i]` (edge i with
its left-hand side replaced). `prepare` is applied once to every embedding before comparing
(cosine normalises there), so that an embedding used as a positive and as a negative is
prepared only once. Every comparator is symmetric in its two arguments.

Dot and cosine score plain inner products of prepared embeddings: for them the training fast
path (`closed_form`) writes the backward pass out, with `prepare_vjp` for the preparation.
"""

from __future__ import annotations

from typing import ClassVar

import torch

Scores = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class Comparator:
    """Dot product, the base of the others; subclasses change `prepare` or the products."""

    # True where a score is exactly the inner product of two prepared embeddings.
    inner_product: ClassVar[bool] = True

    def prepare(self, embs: torch.Tensor) -> torch.Tensor:
        return embs

    def prepare_vjp(self, embs: torch.Tensor, prepared: torch.Tensor,
                    grad: torch.Tensor) -> torch.Tensor:
        """The gradient w.r.t. `embs` of sum(grad * prepare(embs)), `prepared` being the
        latter (for inner-product comparators, whose backward the fast path writes out)."""
        return grad

    def __call__(self, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor, lhs_neg: torch.Tensor,
                 rhs_neg: torch.Tensor) -> Scores:
        pos_scores = (lhs_pos * rhs_pos).sum(-1)
        lhs_neg_scores = torch.bmm(rhs_pos, lhs_neg.transpose(1, 2))
        rhs_neg_scores = torch.bmm(lhs_pos, rhs_neg.transpose(1, 2))
        return pos_scores, lhs_neg_scores, rhs_neg_scores


class DotComparator(Comparator):
    """The inner product."""


class CosComparator(Comparator):
    """The cosine similarity: the inner product of embeddings scaled to unit norm."""

    def prepare(self, embs: torch.Tensor) -> torch.Tensor:
        # Multiplying by the reciprocal norm, as PBG does, so that scores agree to the last bit;
        # clamped so that an all-zero embedding scores 0 instead of NaN.
        return embs * embs.norm(dim=-1, keepdim=True).clamp_min(1e-30).reciprocal()

    def prepare_vjp(self, embs: torch.Tensor, prepared: torch.Tensor,
                    grad: torch.Tensor) -> torch.Tensor:
        # Scaling to unit norm passes on the part of the gradient orthogonal to the result,
        # divided by the norm (for an all-zero embedding that part is the whole gradient).
        along = (grad * prepared).sum(-1, keepdim=True)
        reciprocal_norm = embs.norm(dim=-1, keepdim=True).clamp_min(1e-30).reciprocal()
        return (grad - prepared * along) * reciprocal_norm


def pairwise_squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a_i - b_j||^2 for every pair of each chunk, as |a|^2 + |b|^2 - 2 a.b (one bmm)."""
    a_squared = a.pow(2).sum(-1).unsqueeze(2)
    b_squared = b.pow(2).sum(-1).unsqueeze(1)
    return torch.baddbmm(b_squared, a, b.transpose(1, 2), alpha=-2) + a_squared


def clamped_sqrt(squared: torch.Tensor) -> torch.Tensor:
    # The clamp keeps the gradient finite where a distance is zero (an entity against itself).
    return squared.clamp_min(1e-30).sqrt()


class SquaredL2Comparator(Comparator):
    """The negated squared euclidean distance."""

    inner_product = False

    def __call__(self, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor, lhs_neg: torch.Tensor,
                 rhs_neg: torch.Tensor) -> Scores:
        pos_scores = (lhs_pos - rhs_pos).pow(2).sum(-1)
        lhs_neg_scores = pairwise_squared_distances(rhs_pos, lhs_neg)
        rhs_neg_scores = pairwise_squared_distances(lhs_pos, rhs_neg)
        return -pos_scores, -lhs_neg_scores, -rhs_neg_scores


class L2Comparator(Comparator):
    """The negated euclidean distance."""

    inner_product = False

    def __call__(self, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor, lhs_neg: torch.Tensor,
                 rhs_neg: torch.Tensor) -> Scores:
        pos_scores = clamped_sqrt((lhs_pos - rhs_pos).pow(2).sum(-1))
        lhs_neg_scores = clamped_sqrt(pairwise_squared_distances(rhs_pos, lhs_neg))
        rhs_neg_scores = clamped_sqrt(pairwise_squared_distances(lhs_pos, rhs_neg))
        return -pos_scores, -lhs_neg_scores, -rhs_neg_scores


class L1Comparator(Comparator):
    """The negated L1 (Manhattan) distance: with the translation operator, TransE-L1."""

    inner_product = False

    def __call__(self, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor, lhs_neg: torch.Tensor,
                 rhs_neg: torch.Tensor) -> Scores:
        # `cdist` sums |a_i - b_j| pair by pair without a [C, n, m, d] difference tensor (ten
        # times faster than broadcasting on the CPU, its backward included); its gradient at a
        # zero difference is 0, as autograd's `abs`.
        pos_scores = (lhs_pos - rhs_pos).abs().sum(-1)
        lhs_neg_scores = torch.cdist(rhs_pos, lhs_neg, p=1)
        rhs_neg_scores = torch.cdist(lhs_pos, rhs_neg, p=1)
        return -pos_scores, -lhs_neg_scores, -rhs_neg_scores


class BiasedComparator(Comparator):
    """Uses each embedding's first coordinate as a bias added to the score (config `bias`);
    the other coordinates go to the base comparator."""

    inner_product = False

    def __init__(self, base: Comparator) -> None:
        self.base = base

    def prepare(self, embs: torch.Tensor) -> torch.Tensor:
        return torch.cat([embs[..., :1], self.base.prepare(embs[..., 1:])], dim=-1)

    def __call__(self, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor, lhs_neg: torch.Tensor,
                 rhs_neg: torch.Tensor) -> Scores:
        pos_scores, lhs_neg_scores, rhs_neg_scores = self.base(
            lhs_pos[..., 1:], rhs_pos[..., 1:], lhs_neg[..., 1:], rhs_neg[..., 1:])
        lhs_pos_bias, rhs_pos_bias = lhs_pos[..., 0], rhs_pos[..., 0]
        pos_scores = pos_scores + lhs_pos_bias + rhs_pos_bias
        lhs_neg_scores = (lhs_neg_scores + rhs_pos_bias.unsqueeze(2)
                          + lhs_neg[..., 0].unsqueeze(1))
        rhs_neg_scores = (rhs_neg_scores + lhs_pos_bias.unsqueeze(2)
                          + rhs_neg[..., 0].unsqueeze(1))
        return pos_scores, lhs_neg_scores, rhs_neg_scores


COMPARATORS: dict[str, type[Comparator]] = {
    "dot": DotComparator,
    "cos": CosComparator,
    "l2": L2Comparator,
    "squared_l2": SquaredL2Comparator,
    "l1": L1Comparator,
}


def make_comparator(name: str, bias: bool) -> Comparator:
    comparator = COMPARATORS[name]()
    return BiasedComparator(comparator) if bias else comparator
