"""What a query compares, in the model's own terms: which vectors stand for the queries, and
how each candidate's table row becomes comparable to them.

An entity is scored as the model scores it in training (see `model.embedding_model`): its row,
renormed to `max_norm` if set, plus its type's global embedding, then, on the side the
relation transforms, the relation operator, then the comparator's `prepare`. Without a
relation, queries and candidates are prepared the same way and compared directly. With one,
(NAME, R, ?) ranks right-hand sides as the model ranks right-hand corruptions of an edge of R
whose left side is NAME, and (?, R, NAME) left-hand sides likewise; with reciprocal
relations, as the right-hand sides of (NAME, R's inverse, ?) (`reciprocal.query_direction`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch

from ..config import ConfigSchema
from ..errors import BadInputError
from ..model import EmbeddingModel
from ..model.operators import DynamicOperator, Operator
from ..model.reciprocal import query_direction
from ..model.rows import renorm_rows

Transform = Callable[[torch.Tensor], torch.Tensor]
SIDES = ("rhs", "lhs")


@dataclass(frozen=True)
class Comparison:
    """The queries' prepared vectors and, for candidates of one entity type, how raw rows are
    made comparable to them."""

    candidate_type: str
    queries: torch.Tensor  # [n, dim]
    prepare_candidates: Transform


@dataclass(frozen=True)
class RelationSide:
    """A relation by index and the side whose entities are ranked."""

    index: int
    side: str  # "rhs": rank right-hand sides of (NAME, R, ?); "lhs": of (?, R, NAME)


class ModelScoring:
    """Turns table rows into the vectors the model compares, and compares them."""

    def __init__(self, config: ConfigSchema, model: EmbeddingModel) -> None:
        self.config = config
        self.model = model
        self.comparator = model.comparator

    def scored(self, entity_type: str, rows: torch.Tensor) -> torch.Tensor:
        """Rows as an edge's side before the operator: renormed, plus the global embedding."""
        if self.config.max_norm is not None:
            rows = renorm_rows(rows, self.config.max_norm)
        global_embedding = self.model.global_embedding(entity_type)
        return rows if global_embedding is None else rows + global_embedding.detach()

    def similarity(self, entity_type: str, query_rows: torch.Tensor) -> Comparison:
        """Entities of one type against each other, by the comparator alone."""
        def prepare(rows: torch.Tensor) -> torch.Tensor:
            return self.comparator.prepare(self.scored(entity_type, rows))
        return Comparison(entity_type, prepare(query_rows), prepare)

    def relation(self, relation: RelationSide, query_type: str,
                 query_rows: torch.Tensor) -> Comparison:
        """The other side of edges of one relation whose `query_type` side is the queries."""
        types = self.side_types(relation.index)
        candidate_side = relation.side
        query_side = "lhs" if candidate_side == "rhs" else "rhs"
        if query_type != types[query_side]:
            raise BadInputError(f"the queries are of entity type '{query_type}', but the "
                                f"{query_side} of this relation is '{types[query_side]}'; "
                                "choose the other --side, or another relation")
        candidate_type = types[candidate_side]
        prepare = self.comparator.prepare
        query_transform, candidate_transform = self._operators(relation)
        queries = prepare(query_transform(self.scored(query_type, query_rows)))
        return Comparison(candidate_type, queries,
                          lambda rows: prepare(candidate_transform(
                              self.scored(candidate_type, rows))))

    def side_types(self, relation_index: int) -> dict[str, str]:
        relation = self.model.relation_of(relation_index)
        return {"lhs": relation.lhs, "rhs": relation.rhs}

    def scores(self, queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """[n, m]: each prepared query against each prepared candidate, by the comparator
        (the right-hand-negative scores of one chunk whose positives are the queries)."""
        chunk = queries.unsqueeze(0)
        no_negatives = queries.new_empty((1, 0, queries.shape[1]))
        _, _, scores = self.comparator(chunk, chunk, no_negatives, candidates.unsqueeze(0))
        return scores[0]

    def _operators(self, relation: RelationSide) -> tuple[Transform, Transform]:
        """(applied to the queries, applied to the candidates), as the model applies them."""
        identity: Transform = lambda embs: embs  # noqa: E731
        index, side = query_direction(relation.index, relation.side, self.model.inverse_offset)
        if not self.config.dynamic_relations:
            # Only right-hand sides are transformed: the candidates, or the queries.
            operator = cast(Operator, self.model.rhs_operators[index])
            return (identity, operator) if side == "rhs" else (operator, identity)
        # Dynamic relations: the side that is not corrupted is transformed, by its own
        # operator (left-hand for right-hand corruptions and the other way round).
        if side == "rhs":
            lhs_operator = cast(DynamicOperator, self.model.lhs_operators[0])
            return (lambda embs: lhs_operator(embs, _repeat(index, embs)), identity)
        rhs_operator = cast(DynamicOperator, self.model.rhs_operators[0])
        return (lambda embs: rhs_operator(embs, _repeat(index, embs)), identity)


def _repeat(index: int, embs: torch.Tensor) -> torch.Tensor:
    return torch.full((len(embs),), index, dtype=torch.long)
