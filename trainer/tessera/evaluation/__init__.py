"""Link-prediction evaluation: ranking metrics, filtering of known edges, and the eval command."""

from .filtering import KnownEdges, mask_known
from .metrics import HITS_AT, RankingMetrics, auc_per_row, ranks

__all__ = [
    "HITS_AT",
    "KnownEdges",
    "RankingMetrics",
    "auc_per_row",
    "mask_known",
    "ranks",
]
