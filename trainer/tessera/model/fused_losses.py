"""A corruption's loss straight from embeddings: scores, loss and their gradients in one step.

Autograd scores a side's corruptions as a [C, S, M] tensor, masks a copy of it, runs the
loss over another (softmax: a concatenation with the positives, a log-softmax and its
backward), and keeps each for the backward pass: several passes over the batch's largest
tensor. Where the comparator scores inner products of prepared embeddings, `corruption_loss`
does what the closed form does for that part (`closed_form.side_loss`: masking, the loss and
its gradient written over the scores in place) and leaves the rest (operators, `prepare`,
global embeddings, regularizers, featurized entities, dynamic relations) to autograd. Its
backward is the two products that carry the score gradients to the queries and negatives.
"""

from __future__ import annotations

from typing import Any

import torch

from .closed_form import SideLayout, side_loss
from .losses import Loss
from .negatives import Chunking


class CorruptionLoss(torch.autograd.Function):
    """loss(pos, queries . negatives^T masked): see `corruption_loss`."""

    @staticmethod
    def forward(ctx: Any, queries: torch.Tensor, negatives: torch.Tensor,
                pos_scores: torch.Tensor, chunking: Chunking, layout: SideLayout,
                loss_fn: Loss) -> torch.Tensor:
        scores = torch.bmm(queries, negatives.transpose(1, 2))
        pos_grad = pos_scores.new_zeros(pos_scores.shape)
        loss = side_loss(chunking, pos_scores, [scores], [scores], layout, loss_fn, 1.0,
                         pos_grad)
        ctx.save_for_backward(queries, negatives, scores, pos_grad)  # scores: now gradients
        return torch.as_tensor(loss, dtype=pos_scores.dtype, device=pos_scores.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        queries, negatives, score_grad, pos_grad = ctx.saved_tensors
        # The relation weight (read on the CPU only: elsewhere reading it would wait for the
        # device); the saved gradients are used once.
        if not grad.is_cpu or float(grad) != 1.0:
            score_grad.mul_(grad)
            pos_grad.mul_(grad)
        queries_grad = torch.bmm(score_grad, negatives) if ctx.needs_input_grad[0] else None
        negatives_grad = torch.bmm(score_grad.transpose(1, 2), queries) \
            if ctx.needs_input_grad[1] else None
        return queries_grad, negatives_grad, pos_grad, None, None, None


def corruption_loss(chunking: Chunking, loss_fn: Loss, pos_scores: torch.Tensor,
                    queries: torch.Tensor, negatives: torch.Tensor, pos_keys: torch.Tensor,
                    neg_keys: torch.Tensor, use_batch: bool) -> torch.Tensor:
    """`loss_fn` summed over one side's corruptions, differentiable, without keeping scores.

    `pos_scores` [C, S] (chunked, any padding), the queries [C, S, d] (the uncorrupted side,
    prepared) that score the negatives [C, M, d]; `pos_keys` [C, S] and `neg_keys` [C, M]
    identify the entities for masking (PADDING in padding slots); `use_batch`: the negatives
    start with the chunk's own positives, whose keys begin `neg_keys`."""
    keys = neg_keys if use_batch else torch.cat([pos_keys, neg_keys], dim=1)
    layout = SideLayout(rows=keys, keys=keys, num_pos=chunking.chunk_size, use_batch=use_batch,
                        padded=chunking.padded)
    return CorruptionLoss.apply(queries, negatives, pos_scores, chunking, layout, loss_fn)
