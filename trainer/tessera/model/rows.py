"""Gathering the embedding-table rows a batch touches into small tensors that take gradients.

Embedding tables are plain tensors (often in shared memory, written by several Hogwild
workers), never `nn.Parameter`s: a dense gradient of a table with millions of rows would cost
more than the whole batch. Instead each batch copies the rows it names, in the order named
and repeats included, into one leaf tensor per table with a single `index_select`; autograd
(or the closed-form backward) gives every gathered row its gradient, and the optimizer sums
the gradients of a repeated row before applying them to the table. When both sides of a
bucket use the same table, they share one leaf, so a row that is both a left- and a
right-hand entity gets one, summed, update (as in PBG).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import kernels


@dataclass(frozen=True)
class TouchedRows:
    """Rows of one table a batch used: after backward, `embeddings.grad` is their gradient."""

    table: torch.Tensor  # the embedding table the rows belong to (not a copy)
    rows: torch.Tensor  # int64 [k], in the order gathered; a row may appear more than once
    embeddings: torch.Tensor  # float [k, dim] leaf, table[rows] (renormed if max_norm is set)


@dataclass(frozen=True)
class RowGradients:
    """The gradients of rows of one table, one per row as gathered (a row may repeat)."""

    table: torch.Tensor
    rows: torch.Tensor  # int64 [k]
    grads: torch.Tensor  # float [k, dim]


def renorm_rows(rows: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Rows longer than max_norm scaled down to it, with torch's embedding max_norm rule."""
    norms = rows.norm(dim=1, keepdim=True)
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), torch.ones_like(norms))
    return rows * scale


Request = tuple[torch.Tensor, Sequence[torch.Tensor]]  # (table, id tensors)


def gather_rows(requests: Sequence[Request], max_norm: float | None = None, *,
                training: bool | None = None) -> tuple[list[list[torch.Tensor]],
                                                       list[TouchedRows]]:
    """The embeddings of the rows each (table, id tensors) request names, shaped like the ids
    plus a dimension: views of one leaf per distinct table, in the order requested.

    `training` (by default: whether grad is enabled) makes the leaves take gradients when
    grad is enabled and, with max_norm, writes the renormed rows back to the table, as
    torch's embedding max_norm does, so that the update applies to them.
    """
    if training is None:
        training = torch.is_grad_enabled()
    tables: list[torch.Tensor] = []
    for table, _ in requests:
        if not any(table is seen for seen in tables):
            tables.append(table)
    gathered: list[list[torch.Tensor]] = [[] for _ in requests]
    touched = []
    for table in tables:
        mine = [i for i, (t, _) in enumerate(requests) if t is table]
        ids = [ids for i in mine for ids in requests[i][1]]
        rows = torch.cat([i.reshape(-1) for i in ids]) if len(ids) > 1 else ids[0].reshape(-1)
        leaf = _leaf(table, rows, max_norm, training)
        touched.append(TouchedRows(table=table, rows=rows, embeddings=leaf))
        embeddings = iter(leaf.split_with_sizes([i.numel() for i in ids]))
        for i in mine:
            gathered[i] = [next(embeddings).view(*requested.shape, leaf.shape[1])
                           for requested in requests[i][1]]
    return gathered, touched


def _leaf(table: torch.Tensor, rows: torch.Tensor, max_norm: float | None,
          training: bool) -> torch.Tensor:
    if kernels.active() and table.dtype == torch.float32 and table.is_contiguous() \
            and rows.dtype == torch.int64 and not table.requires_grad:
        leaf = kernels.gather(table, rows.contiguous())  # prefetches the random rows
    else:
        leaf = table.index_select(0, rows)
        if leaf.dtype != torch.float32:  # a half-precision table: scored in float32
            leaf = leaf.float()
    if max_norm is not None:
        leaf = renorm_rows(leaf, max_norm)
        if training:
            table.index_copy_(0, rows, leaf.to(table.dtype))
    if training and torch.is_grad_enabled():
        leaf.requires_grad_()
    return leaf
