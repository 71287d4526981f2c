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
from .negatives import DegreeNegatives
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


def batch_gradients(  # noqa: PLR0913 (a batch's settings, keyword-only)
        model: EmbeddingModel, edges: EdgeList, lhs_table: torch.Tensor,
        rhs_table: torch.Tensor, *, num_batch_negs: int, num_uniform_negs: int,
        generator: torch.Generator | None = None, degree: DegreeNegatives | None = None,
        closed_form: bool | None = None) -> BatchGradients:
    """Score `edges` against their negatives (drawn with `generator`; `degree`: degree
    negatives) and differentiate the loss; parameter gradients are added to their `.grad`, as
    `backward()` does. With reciprocal relations, both directions' (one step for both).
    `closed_form`: written out or by autograd, as the run's step implementation says (None:
    written out where the model's config allows it)."""
    if supports_closed_form(model) if closed_form is None else closed_form:
        results = [closed_form_gradients(
            model, direction.edges, direction.lhs_table, direction.rhs_table,
            num_batch_negs=num_batch_negs, num_uniform_negs=num_uniform_negs,
            generator=generator, degree=direction.degree, inverse=direction.inverse)
            for direction in model.directions(edges, lhs_table, rhs_table, degree)]
        if len(results) == 1:
            loss, rows = results[0]
        else:  # both directions of reciprocal relations
            loss = results[0][0] + results[1][0]
            rows = merged_by_table(results[0][1] + results[1][1])
        return BatchGradients(loss=loss, regularization=0.0, rows=rows)
    result = model.training_loss(edges, lhs_table, rhs_table, num_batch_negs=num_batch_negs,
                                 num_uniform_negs=num_uniform_negs, generator=generator,
                                 degree=degree)
    result.loss.backward()
    return BatchGradients(
        loss=batch_scalar(result.loss), regularization=result.regularization,
        rows=merged_by_table([RowGradients(touched.table, touched.rows, touched.embeddings.grad)
                              for touched in result.touched
                              if touched.embeddings.grad is not None]))


def merged_by_table(rows: list[RowGradients]) -> list[RowGradients]:
    """One entry per table (both directions of a reciprocal batch read the same tables), so
    that each table takes one optimizer step, with every row's gradients summed (the step
    adds up repeated rows)."""
    by_table: dict[int, list[RowGradients]] = {}
    for entry in rows:
        by_table.setdefault(id(entry.table), []).append(entry)
    if len(by_table) == len(rows):
        return rows
    return [entries[0] if len(entries) == 1 else
            RowGradients(entries[0].table, torch.cat([e.rows for e in entries]),
                         torch.cat([e.grads for e in entries]))
            for entries in by_table.values()]
