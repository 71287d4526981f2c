"""Ranking edges against sampled negatives: the evaluation run before and after each bucket.

It scores as training does (same batches, same negatives machinery) but with the evaluation
negative counts and without gradients, so its loss is comparable to training's; unlike
training, it masks every negative that is the positive's own entity, so that a rank counts
only other entities.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..data.batching import iter_batches
from ..edgelist import EdgeList
from ..model import EmbeddingModel
from ..model.negatives import DegreeNegatives
from .metrics import RankingMetrics

TablesOf = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # relation -> (lhs, rhs) tables
DegreeOf = Callable[[int], DegreeNegatives | None]  # relation -> its degree negatives


def rank_against_sampled(  # noqa: PLR0913 (the protocol's settings, keyword-only)
        model: EmbeddingModel, edges: EdgeList, tables_of: TablesOf, *,
        batch_size: int, num_batch_negs: int, num_uniform_negs: int,
        dynamic_relations: bool, seed: int = 0,
        device: torch.device | None = None,
        degree_of: DegreeOf | None = None,
        ranked: Callable[[int], None] | None = None) -> RankingMetrics:
    """Ranks of every edge among its negatives on each side, plus the loss. `device`: where
    the model and tables are, if not on the CPU (each batch is copied there); `degree_of`:
    each relation's degree negatives (none if None); `ranked`: told each batch's size once
    it is ranked (a live line's progress)."""
    metrics = RankingMetrics()
    generator = torch.Generator().manual_seed(seed)
    accelerator = device if device is not None and device.type != "cpu" else None
    # Negatives are drawn where the batch is; on the CPU from the one generator.
    draws = torch.Generator(accelerator).manual_seed(seed) if accelerator else generator
    with torch.no_grad():
        for batch in iter_batches(edges, batch_size, dynamic_relations, generator):
            relation = 0 if dynamic_relations else int(batch.rel[0])
            lhs, rhs = tables_of(relation)
            result = model(batch.to(accelerator) if accelerator else batch, lhs, rhs,
                           num_batch_negs=num_batch_negs, num_uniform_negs=num_uniform_negs,
                           generator=draws, mask_same_entity=True,
                           degree=None if degree_of is None else degree_of(relation))
            for pos, neg in ((result.lhs_pos_scores, result.lhs_neg_scores),
                             (result.rhs_pos_scores, result.rhs_neg_scores)):
                if neg.shape[1] > 0:  # a side whose negatives are disabled is not ranked
                    metrics.add(pos, neg)
            metrics.add_loss(float(result.loss), result.count)
            if ranked is not None:
                ranked(len(batch))
    return metrics
