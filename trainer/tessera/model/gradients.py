"""The loss of a training batch and the gradients its optimizers apply.

A training step needs the batch's loss, the gradients of the table rows it used and those of
the model parameters. `batch_gradients` computes them in closed form where `closed_form`
handles the config and through autograd otherwise, so that a worker's loop is the same
either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..edgelist import EdgeList
from .closed_form import closed_form_gradients, supports_closed_form
from .embedding_model import EmbeddingModel
from .rows import RowGradients
from .scalars import batch_scalar


@dataclass(frozen=True)
class BatchGradients:
    """What a training step applies; the model parameters' gradients are in their `.grad`."""

    # weight * (lhs loss + rhs loss) + regularization, summed over the edges; off the CPU
    # both are 0-d tensors on the device (see `scalars`)
    loss: float | torch.Tensor
    regularization: float | torch.Tensor  # the part of `loss` due to the regularizer
    rows: list[RowGradients]  # one entry per table the batch read


def batch_gradients(model: EmbeddingModel, edges: EdgeList, lhs_table: torch.Tensor,
                    rhs_table: torch.Tensor, *, num_batch_negs: int, num_uniform_negs: int,
                    generator: torch.Generator | None = None) -> BatchGradients:
    """Score `edges` against their negatives (drawn with `generator`) and differentiate the
    loss; parameter gradients are added to their `.grad`, as `backward()` does."""
    if supports_closed_form(model):
        loss, rows = closed_form_gradients(
            model, edges, lhs_table, rhs_table, num_batch_negs=num_batch_negs,
            num_uniform_negs=num_uniform_negs, generator=generator)
        return BatchGradients(loss=loss, regularization=0.0, rows=rows)
    result = model.training_loss(edges, lhs_table, rhs_table, num_batch_negs=num_batch_negs,
                                 num_uniform_negs=num_uniform_negs, generator=generator)
    result.loss.backward()
    return BatchGradients(
        loss=batch_scalar(result.loss), regularization=result.regularization,
        rows=[RowGradients(touched.table, touched.rows, touched.embeddings.grad)
              for touched in result.touched if touched.embeddings.grad is not None])
