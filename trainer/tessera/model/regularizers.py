"""Regularizers: a penalty on the embeddings and operator parameters a batch used.

N3 (Lacroix et al., 2018, "Canonical Tensor Decomposition for Knowledge Base Completion") as
PyTorch-BigGraph applies it: the sum of cubed magnitudes of the compared positive embeddings
of both sides and of the relation parameters used, times `regularization_coef`. A complex
operator measures magnitudes per complex coordinate (modulus), other operators per real one.
"""

from __future__ import annotations

import torch

from ..config import ConfigSchema
from .operators import DynamicOperator, Operator


class N3Regularizer:
    def __init__(self, weight: float) -> None:
        self.weight = weight

    def __call__(self, lhs_embs: torch.Tensor, rhs_embs: torch.Tensor,
                 operator: Operator) -> torch.Tensor:
        """The penalty of edges of one relation: `lhs_embs`, `rhs_embs` are [N, dim]."""
        total = self._embeddings(lhs_embs, rhs_embs, operator)
        params = operator.parameter_magnitudes()
        if params is not None:
            # Every edge uses the relation's parameters once, so they count once per edge.
            total = total + params.pow(3).sum() * len(lhs_embs)
        return self.weight * total

    def dynamic(self, lhs_embs: torch.Tensor, rhs_embs: torch.Tensor, operator: DynamicOperator,
                operator_idxs: torch.Tensor) -> torch.Tensor:
        """The penalty of edges of mixed relations, `operator_idxs` [N] giving each one's."""
        total = self._embeddings(lhs_embs, rhs_embs, operator)
        params = operator.parameter_magnitudes(operator_idxs)
        if params is not None:
            total = total + params.pow(3).sum()
        return self.weight * total

    @staticmethod
    def _embeddings(lhs_embs: torch.Tensor, rhs_embs: torch.Tensor,
                    operator: Operator | DynamicOperator) -> torch.Tensor:
        return (operator.embedding_magnitudes(lhs_embs).pow(3).sum()
                + operator.embedding_magnitudes(rhs_embs).pow(3).sum())


REGULARIZERS: dict[str, type[N3Regularizer]] = {
    "N3": N3Regularizer,
}


def make_regularizer(config: ConfigSchema) -> N3Regularizer | None:
    """The configured regularizer, or None when its coefficient is 0 (as in PBG)."""
    if config.regularization_coef == 0:
        return None
    return REGULARIZERS[config.regularizer](config.regularization_coef)
