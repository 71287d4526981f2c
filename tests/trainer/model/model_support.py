"""What the model tests share: random embedding tables, how well a model ranks edges, and
row gradients summed into a dense tensor."""

from __future__ import annotations

import torch

from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.model.rows import RowGradients


def random_table(rows: int, generator: torch.Generator) -> torch.Tensor:
    return 0.1 * torch.randn(rows, 8, generator=generator)


def ranking_accuracy(model: EmbeddingModel, edges: EdgeList, lhs_table: torch.Tensor,
                     rhs_table: torch.Tensor) -> float:
    """The worse side's share of unmasked negatives (every entity) scored below their edge."""
    with torch.no_grad():
        result = model(edges, lhs_table, rhs_table, num_batch_negs=len(edges),
                       num_uniform_negs=0, mask_same_entity=True)
    shares = []
    for pos, neg in ((result.lhs_pos_scores, result.lhs_neg_scores),
                     (result.rhs_pos_scores, result.rhs_neg_scores)):
        real = neg > float("-inf")
        shares.append(((pos.unsqueeze(1) > neg) & real).sum().item() / real.sum().item())
    return min(shares)


def dense(rows: list[RowGradients], table: torch.Tensor) -> torch.Tensor:
    """The summed gradient of every row of `table`, zero for rows the batch did not use."""
    total = torch.zeros_like(table)
    for entry in rows:
        if entry.table is table:
            total.index_add_(0, entry.rows, entry.grads)
    return total
