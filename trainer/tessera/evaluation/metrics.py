"""Ranking metrics of link prediction: per-row ranks and AUCs, and their running averages.

A row is one positive edge scored against the corruptions of one of its sides, so an edge
evaluated on both sides gives two rows, and MRR averages over both, as papers report it.
Negatives that were masked (the positive itself, or other known edges when filtering) carry
a score of -inf and do not count.

Ties count against the positive, as in PyTorch-BigGraph: rank = 1 + the number of valid
negatives scoring at least as high as the positive. A model that scores everything alike
therefore ranks last rather than first, and Tessera's numbers compare with PBG's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

HITS_AT = (1, 10, 50)


def _check_scores(pos: torch.Tensor, neg: torch.Tensor) -> None:
    if pos.dim() != 1 or neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"expected positive scores [N] and negative scores [N, M], "
                         f"got {list(pos.shape)} and {list(neg.shape)}")


def ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Rank of each positive among its valid negatives, ties against it: int64 [N], >= 1."""
    _check_scores(pos, neg)
    valid = neg != -math.inf
    return ((neg >= pos.unsqueeze(1)) & valid).sum(1) + 1


def auc_per_row(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Fraction of its valid negatives each positive outscores, a tie counting one half.

    float64 [N]; NaN for a row whose negatives are all masked, which has no AUC.
    """
    _check_scores(pos, neg)
    valid = neg != -math.inf
    pos_column = pos.unsqueeze(1)
    wins = ((neg < pos_column) & valid).sum(1).double()
    ties = ((neg == pos_column) & valid).sum(1).double()
    return (wins + 0.5 * ties) / valid.sum(1).double()


@dataclass
class RankingMetrics:
    """Running sums of ranking metrics, fed batch by batch and merged across workers.

    The sums are Python ints and floats (float64), so averages over millions of rows do not
    lose precision. `summary()` turns them into the averages that get reported.
    """

    count: int = 0
    rank_sum: int = 0
    reciprocal_rank_sum: float = 0.0
    reciprocal_rank_square_sum: float = 0.0  # for the MRR's standard error
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(HITS_AT, 0))
    # Rows with every negative masked have a rank (1) but no AUC, hence a count of their own.
    auc_sum: float = 0.0
    auc_count: int = 0
    # The loss is per edge (both sides together), not per row, hence a count of its own too.
    loss_sum: float = 0.0
    loss_edges: int = 0

    def add(self, pos: torch.Tensor, neg: torch.Tensor) -> None:
        """Adds one row per positive: `pos` [N] against `neg` [N, M] (-inf where masked)."""
        row_ranks = ranks(pos, neg)
        self.count += len(row_ranks)
        self.rank_sum += int(row_ranks.sum())
        reciprocal = row_ranks.double().reciprocal()
        self.reciprocal_rank_sum += float(reciprocal.sum())
        self.reciprocal_rank_square_sum += float(reciprocal.square().sum())
        for k in self.hits:
            self.hits[k] += int((row_ranks <= k).sum())
        aucs = auc_per_row(pos, neg)
        has_auc = ~aucs.isnan()
        self.auc_sum += float(aucs[has_auc].sum())
        self.auc_count += int(has_auc.sum())

    def add_loss(self, total: float, num_edges: int) -> None:
        """Adds the summed loss of `num_edges` edges, to be reported as a mean per edge."""
        self.loss_sum += float(total)
        self.loss_edges += num_edges

    def merge(self, other: RankingMetrics) -> None:
        """Adds everything `other` has seen, as if it had been fed here."""
        self.count += other.count
        self.rank_sum += other.rank_sum
        self.reciprocal_rank_sum += other.reciprocal_rank_sum
        self.reciprocal_rank_square_sum += other.reciprocal_rank_square_sum
        for k, hit_count in other.hits.items():
            self.hits[k] = self.hits.get(k, 0) + hit_count
        self.auc_sum += other.auc_sum
        self.auc_count += other.auc_count
        self.loss_sum += other.loss_sum
        self.loss_edges += other.loss_edges

    def summary(self, standard_error: bool = False) -> dict[str, float]:
        """count, mrr (and mrr_stderr if asked), hits@k, mean_rank, auc, and loss when some
        was added.

        `count` is the number of rows (two per edge when both sides are ranked). Averages over
        nothing are NaN.
        """
        summary: dict[str, float] = {"count": self.count,
                                     "mrr": _mean(self.reciprocal_rank_sum, self.count)}
        if standard_error:
            summary["mrr_stderr"] = self.mrr_standard_error()
        for k in sorted(self.hits):
            summary[f"hits@{k}"] = _mean(self.hits[k], self.count)
        summary["mean_rank"] = _mean(self.rank_sum, self.count)
        summary["auc"] = _mean(self.auc_sum, self.auc_count)
        if self.loss_edges:
            summary["loss"] = self.loss_sum / self.loss_edges
        return summary

    def mrr_standard_error(self) -> float:
        """The standard error of the MRR over the ranked rows: how far another edge set of
        this size, drawn alike, would likely move it. A small validation split cannot tell
        apart models whose MRRs differ by less. NaN under two rows."""
        if self.count < 2:
            return math.nan
        mean = self.reciprocal_rank_sum / self.count
        variance = (self.reciprocal_rank_square_sum - self.count * mean * mean) / (self.count - 1)
        return math.sqrt(max(variance, 0.0) / self.count)


def _mean(total: float, count: int) -> float:
    return total / count if count else math.nan
