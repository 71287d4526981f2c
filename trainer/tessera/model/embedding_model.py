"""The embedding model: scores a batch of edges against their negatives and returns its loss.

An entity's embedding, as scored, is its table row (for a featurized entity, the mean of its
features' rows), renormed to `max_norm` if set, plus its type's global embedding, then the
relation operator, then the comparator's `prepare`. Operators are applied as PyTorch-BigGraph
applies them, so that a checkpoint scores the same in both systems:

- one relation per batch: only the right-hand side is transformed; an edge (u, r, v) scores
  c(u, f_r(v)), its corruptions c(u', f_r(v)) and c(u, f_r(v')).
- dynamic relations (batches mix relation types): each side has its own operator, applied to
  the side that is *not* corrupted, so that negatives never need another edge's relation:
  left corruptions score c(u', h_r(v)) against c(u, h_r(v)), right ones c(g_r(u), v') against
  c(g_r(u), v), where h are the right-hand and g the left-hand operators.

The tables are plain tensors the caller passes in; the model holds only the operators and the
global embeddings (its state dict is the model file). See `rows` for how gradients reach the
tables, `negatives` for which entities corrupt an edge, and `reciprocal` for the inverse
relations that `reciprocal_relations` adds (each batch then scores in both directions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ConfigSchema, RelationSchema
from ..edgelist import EdgeList, EntityList
from .comparators import make_comparator
from .fused_losses import corruption_loss
from .losses import make_loss
from .negatives import (
    PADDING,
    Chunking,
    DegreeNegatives,
    SideNegatives,
    choose_negatives,
    mask_negatives,
    negative_embeddings,
    negative_keys,
    plan_chunking,
)
from .operators import DYNAMIC_OPERATORS, OPERATORS, DynamicOperator, Operator
from .parameter_names import public_name
from .reciprocal import Direction, directions, model_relations
from .regularizers import make_regularizer
from .rows import TouchedRows, gather_rows
from .scalars import batch_scalar


@dataclass(frozen=True)
class BatchResult:
    """What scoring a batch produced. Scores are detached; masked negatives are -inf."""

    loss: torch.Tensor  # scalar: weight * (lhs loss + rhs loss) + regularization; backward this
    regularization: float | torch.Tensor  # the part of `loss` due to the regularizer (a
    # tensor off the CPU: see `scalars`)
    count: int  # number of edges
    lhs_pos_scores: torch.Tensor  # [N] the positives the left-hand corruptions compete with
    lhs_neg_scores: torch.Tensor  # [N, M_lhs]
    rhs_pos_scores: torch.Tensor  # [N] (the same as lhs_pos_scores without dynamic relations)
    rhs_neg_scores: torch.Tensor  # [N, M_rhs]
    touched: list[TouchedRows]  # the table rows used, whose leaves hold gradients after backward


@dataclass(frozen=True)
class TrainingLoss:
    """What training needs of a batch: `BatchResult` without the scores."""

    loss: torch.Tensor  # scalar: backward this
    regularization: float | torch.Tensor  # a 0-d tensor on a device (`batch_scalar`)
    touched: list[TouchedRows]


@dataclass(frozen=True)
class Scored:
    """A batch scored, as `_score` returns it: with `fused`, each side's loss in place of its
    negative scores."""

    loss: torch.Tensor
    regularization: float | torch.Tensor
    scores: tuple[torch.Tensor, ...]  # lhs_pos, lhs_neg, rhs_pos, rhs_neg
    touched: list[TouchedRows]


@dataclass(frozen=True)
class BatchPlan:
    """How a batch is scored: its relation's config entry, its chunks, each side's negatives."""

    relation_index: int
    chunking: Chunking
    lhs_negatives: SideNegatives
    rhs_negatives: SideNegatives


@dataclass(frozen=True)
class SideBatch:
    """One side of a batch: embeddings before operators, and what corrupts it."""

    pos: torch.Tensor  # [N, dim] row (or feature mean) + global embedding
    keys: torch.Tensor  # [N] identity for masking: `negatives.positive_keys`
    negatives: SideNegatives
    extra: torch.Tensor | None  # embeddings of negatives.extra_rows, + global embedding


@dataclass(frozen=True)
class Corruption:
    """The negatives of one side in one comparison, their embeddings already prepared."""

    side: SideBatch
    extra: torch.Tensor | None


class EmbeddingModel(nn.Module):
    """Relation operators and global embeddings of a config, and the batch scoring."""

    def __init__(self, config: ConfigSchema, num_relations: int) -> None:
        """`num_relations`: the relation types of the edges (with reciprocal relations the
        model holds twice as many, `num_relations` counts those)."""
        super().__init__()
        if not config.dynamic_relations and num_relations != len(config.relations):
            raise ValueError(f"{len(config.relations)} relations are configured, not "
                             f"{num_relations}")
        self.config = config
        # R, where relation r's inverse is r + R; None without reciprocal relations.
        self.inverse_offset = num_relations if config.reciprocal_relations else None
        self.num_relations = 2 * num_relations if config.reciprocal_relations else num_relations
        self.relations = model_relations(config)
        num_relations = self.num_relations
        self.comparator = make_comparator(config.comparator, config.bias)
        self.loss_fn = make_loss(config)
        self.regularizer = make_regularizer(config)
        self.global_embs = nn.ParameterDict({
            f"emb_{name}": nn.Parameter(torch.zeros(config.entity_dimension(name)))
            for name in config.entities} if config.global_emb else {})
        if config.dynamic_relations:
            template = config.relations[0]
            operator = DYNAMIC_OPERATORS[template.operator]
            self.lhs_operators = nn.ModuleList(
                [operator(config.entity_dimension(template.lhs), num_relations)])
            self.rhs_operators = nn.ModuleList(
                [operator(config.entity_dimension(template.rhs), num_relations)])
        else:
            # Only right-hand operators; the empty left-hand slots keep PBG's indexing.
            self.lhs_operators = nn.ModuleList([None] * num_relations)  # type: ignore[list-item]
            self.rhs_operators = nn.ModuleList(
                [OPERATORS[r.operator](config.entity_dimension(r.rhs)) for r in self.relations])

    def public_parameter_names(self) -> dict[str, str]:
        """State-dict key -> PBG's public name (`relations/0/operator/rhs/diagonal`...)."""
        return {key: public_name(key) for key in self.state_dict()}

    def forward(self, edges: EdgeList, lhs_table: torch.Tensor, rhs_table: torch.Tensor, *,
                num_batch_negs: int, num_uniform_negs: int,
                generator: torch.Generator | None = None,
                mask_same_entity: bool = False,
                degree: DegreeNegatives | None = None) -> BatchResult:
        """Score `edges` (one relation type unless dynamic) against their negatives.

        The tables are the partitions of the relation's left and right entity types (the
        same tensor when both sides share one); the negative counts are arguments so that
        evaluation can use its own (`degree`: degree negatives, none if None), and
        `mask_same_entity` (for ranking) masks every negative that is the positive's entity.
        Under torch.no_grad nothing takes gradients. With reciprocal relations the loss is
        both directions', and the left-hand scores rank left-hand sides through the inverse
        relations (the right-hand corruptions of the reversed edges).
        """
        scored = self._score(self.directions(edges, lhs_table, rhs_table, degree),
                             num_batch_negs, num_uniform_negs, generator, fused=False,
                             mask_same_entity=mask_same_entity)
        lhs_pos, lhs_neg, rhs_pos, rhs_neg = scored.scores
        return BatchResult(
            loss=scored.loss, regularization=scored.regularization, count=len(edges),
            lhs_pos_scores=lhs_pos.detach(), lhs_neg_scores=lhs_neg.detach(),
            rhs_pos_scores=rhs_pos.detach(), rhs_neg_scores=rhs_neg.detach(),
            touched=scored.touched)

    def training_loss(self, edges: EdgeList, lhs_table: torch.Tensor, rhs_table: torch.Tensor,
                      *, num_batch_negs: int, num_uniform_negs: int,
                      generator: torch.Generator | None = None,
                      degree: DegreeNegatives | None = None) -> TrainingLoss:
        """`forward`'s loss, to differentiate, without its scores: with an inner-product
        comparator each side's corruptions are scored by `fused_losses`, which keeps no
        copies of the [N, M] scores (the same loss and gradients, in less time)."""
        scored = self._score(self.directions(edges, lhs_table, rhs_table, degree),
                             num_batch_negs, num_uniform_negs, generator,
                             fused=self.comparator.inner_product)
        return TrainingLoss(scored.loss, scored.regularization, scored.touched)

    def directions(self, edges: EdgeList, lhs_table: torch.Tensor, rhs_table: torch.Tensor,
                   degree: DegreeNegatives | None = None) -> list[Direction]:
        """The directions a batch is scored in (`reciprocal.directions`)."""
        return directions(edges, lhs_table, rhs_table, degree, self.inverse_offset)

    def _score(self, directions: list[Direction], num_batch_negs: int, num_uniform_negs: int,
               generator: torch.Generator | None, *, fused: bool,
               mask_same_entity: bool = False) -> Scored:
        """A batch scored in its `directions`: with two (reciprocal relations), both losses,
        and the inverse's right-hand scores as the ones that rank left-hand sides."""
        scored = [self._score_direction(direction, num_batch_negs, num_uniform_negs, generator,
                                        fused=fused, mask_same_entity=mask_same_entity)
                  for direction in directions]
        if len(scored) == 1:
            return scored[0]
        forward, inverse = scored
        return Scored(loss=forward.loss + inverse.loss,
                      regularization=forward.regularization + inverse.regularization,
                      scores=(*inverse.scores[2:], *forward.scores[2:]),
                      touched=forward.touched + inverse.touched)

    def _score_direction(self, direction: Direction, num_batch_negs: int,
                         num_uniform_negs: int, generator: torch.Generator | None, *,
                         fused: bool, mask_same_entity: bool) -> Scored:
        edges, lhs_table, rhs_table = direction.edges, direction.lhs_table, direction.rhs_table
        plan = self.plan_batch(edges, len(lhs_table), len(rhs_table),
                               num_batch_negs=num_batch_negs, num_uniform_negs=num_uniform_negs,
                               generator=generator, mask_same_entity=mask_same_entity,
                               degree=direction.degree, inverse=direction.inverse)
        relation = self.relations[plan.relation_index]
        gathered, touched = gather_rows(
            [(lhs_table, _row_ids(edges.lhs, plan.lhs_negatives)),
             (rhs_table, _row_ids(edges.rhs, plan.rhs_negatives))], self.config.max_norm)
        lhs = self._side(relation.lhs, edges.lhs, gathered[0], plan.lhs_negatives)
        rhs = self._side(relation.rhs, edges.rhs, gathered[1], plan.rhs_negatives)
        if self.config.dynamic_relations:
            scores, regularization = self._score_dynamic(plan.chunking, edges.rel, lhs, rhs,
                                                         fused)
        else:
            scores, regularization = self._score_one_relation(plan.chunking, plan.relation_index,
                                                              lhs, rhs, fused)
        lhs_pos, lhs_neg, rhs_pos, rhs_neg = scores
        if fused:  # the "scores" of the negatives are each side's loss
            loss = relation.weight * (lhs_neg + rhs_neg)
        else:
            loss = relation.weight * (self.loss_fn(lhs_pos, lhs_neg)
                                      + self.loss_fn(rhs_pos, rhs_neg))
        if regularization is not None:
            loss = loss + regularization
        return Scored(loss=loss, scores=scores, touched=touched,
                      regularization=0.0 if regularization is None
                      else batch_scalar(regularization))

    def plan_batch(  # noqa: PLR0913 (a batch's settings, keyword-only)
            self, edges: EdgeList, lhs_rows: int, rhs_rows: int, *, num_batch_negs: int,
            num_uniform_negs: int, generator: torch.Generator | None,
            mask_same_entity: bool = False, degree: DegreeNegatives | None = None,
            inverse: bool = False) -> BatchPlan:
        """The relation, chunks and negatives of a batch whose sides' partitions have
        `lhs_rows` and `rhs_rows` entities (uniform and degree negatives are drawn here);
        `inverse`: the batch is reversed edges (of the inverse relations)."""
        relation_index = self._relation_index(edges, inverse)
        relation = self.relations[relation_index]
        num_degree_negs = 0 if degree is None else degree.count
        chunking = plan_chunking(len(edges), relation.all_negs, num_batch_negs,
                                 num_uniform_negs + num_degree_negs)
        lhs_negatives, rhs_negatives = (
            choose_negatives(chunking, disabled=disabled, featurized=entities.is_featurized,
                             all_negs=relation.all_negs, num_batch_negs=num_batch_negs,
                             num_uniform_negs=num_uniform_negs, num_rows=num_rows,
                             generator=generator, device=edges.lhs.ids.device,
                             num_degree_negs=num_degree_negs, degree_pool=pool)
            for entities, num_rows, disabled, pool in (
                (edges.lhs, lhs_rows, self.config.disable_lhs_negs,
                 None if degree is None else degree.lhs),
                (edges.rhs, rhs_rows, self.config.disable_rhs_negs,
                 None if degree is None else degree.rhs)))
        if mask_same_entity:  # ranking: every copy of the positive's entity is left out
            lhs_negatives, rhs_negatives = (replace(side, keyed_by_entity=True)
                                            for side in (lhs_negatives, rhs_negatives))
        return BatchPlan(relation_index, chunking, lhs_negatives, rhs_negatives)

    def global_embedding(self, entity_type: str) -> nn.Parameter | None:
        """The entity type's global embedding, added to all its embeddings (None if off)."""
        key = f"emb_{entity_type}"
        return self.global_embs[key] if key in self.global_embs else None

    def relation_of(self, index: int) -> RelationSchema:
        """The settings (types, operator, weight) of the model's relation type `index`."""
        if self.config.dynamic_relations:
            inverse = self.inverse_offset is not None and index >= self.inverse_offset
            return self.relations[int(inverse)]
        return self.relations[index]

    def _relation_index(self, edges: EdgeList, inverse: bool = False) -> int:
        """The entry of `relations` whose types, weight and negatives apply to the batch."""
        if self.config.dynamic_relations:
            return int(inverse)  # the template, or its inverse
        index = int(edges.rel[0])
        if not bool((edges.rel == index).all()):
            raise ValueError("without dynamic relations a batch must hold one relation type")
        return index

    def _side(self, entity_type: str, entities: EntityList, gathered: list[torch.Tensor],
              negatives: SideNegatives) -> SideBatch:
        """`gathered`: the rows of the side's entities (or features), then of the extras."""
        if entities.offsets is not None:
            features = gathered[0]
            device = features.device
            pos = F.embedding_bag(torch.arange(len(features), device=device), features,
                                  entities.offsets[:-1], mode="mean")
        else:
            pos = gathered[0]
        keys = negatives.positive_keys(entities.ids if entities.offsets is None else None,
                                       len(entities), pos.device)
        extra = gathered[1] if negatives.extra_rows is not None else None
        global_embedding = self.global_embedding(entity_type)
        if global_embedding is not None:
            pos = pos + global_embedding
            extra = None if extra is None else extra + global_embedding
        return SideBatch(pos=pos, keys=keys, negatives=negatives, extra=extra)

    def _score_one_relation(self, chunking: Chunking, relation_index: int, lhs: SideBatch,
                            rhs: SideBatch, fused: bool
                            ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        operator = cast(Operator, self.rhs_operators[relation_index])
        prepare = self.comparator.prepare
        lhs_pos, rhs_pos = prepare(lhs.pos), prepare(operator(rhs.pos))
        pos, lhs_neg, rhs_neg = self._compare(
            chunking, lhs_pos, rhs_pos, _corruption(lhs, prepare),
            _corruption(rhs, lambda embs: prepare(operator(embs))), fused)
        regularization = None
        if self.regularizer is not None:
            regularization = self.regularizer(lhs_pos, rhs_pos, operator)
        return (pos, lhs_neg, pos, rhs_neg), regularization

    def _score_dynamic(self, chunking: Chunking, rel: torch.Tensor, lhs: SideBatch,
                       rhs: SideBatch, fused: bool
                       ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        lhs_operator = cast(DynamicOperator, self.lhs_operators[0])
        rhs_operator = cast(DynamicOperator, self.rhs_operators[0])
        prepare = self.comparator.prepare
        u, v = prepare(lhs.pos), prepare(rhs.pos)
        g_u, h_v = prepare(lhs_operator(lhs.pos, rel)), prepare(rhs_operator(rhs.pos, rel))
        lhs_pos, lhs_neg, _ = self._compare(chunking, u, h_v, _corruption(lhs, prepare), None,
                                            fused)
        rhs_pos, _, rhs_neg = self._compare(chunking, g_u, v, None, _corruption(rhs, prepare),
                                            fused)
        regularization = None
        if self.regularizer is not None:
            regularization = (self.regularizer.dynamic(u, h_v, rhs_operator, rel)
                              + self.regularizer.dynamic(g_u, v, lhs_operator, rel))
        return (lhs_pos, lhs_neg, rhs_pos, rhs_neg), regularization

    def _compare(self, chunking: Chunking, lhs_pos: torch.Tensor, rhs_pos: torch.Tensor,
                 lhs: Corruption | None, rhs: Corruption | None, fused: bool = False
                 ) -> tuple[torch.Tensor, ...]:
        """Positive scores [N] and each side's negative scores [N, M] (M = 0 if not given);
        `fused`: each side's loss instead of its negative scores."""
        lhs_chunks, rhs_chunks = chunking.chunk(lhs_pos), chunking.chunk(rhs_pos)
        if fused:
            pos = (lhs_chunks * rhs_chunks).sum(-1)
            return (chunking.unchunk(pos),
                    self._fused_loss(chunking, pos, rhs_chunks, lhs_chunks, lhs),
                    self._fused_loss(chunking, pos, lhs_chunks, rhs_chunks, rhs))
        pos, lhs_neg, rhs_neg = self.comparator(
            lhs_chunks, rhs_chunks, _negatives(chunking, lhs_chunks, lhs),
            _negatives(chunking, rhs_chunks, rhs))
        return (chunking.unchunk(pos), _masked(chunking, lhs_neg, lhs),
                _masked(chunking, rhs_neg, rhs))

    def _fused_loss(self, chunking: Chunking, pos: torch.Tensor, queries: torch.Tensor,
                    own_chunks: torch.Tensor, corruption: Corruption | None) -> torch.Tensor:
        """The loss of one side's corruptions, scored by `queries` [C, S, d] (the other side)."""
        if corruption is None:
            keys = torch.full(pos.shape, PADDING, dtype=torch.long, device=pos.device)
            return corruption_loss(chunking, self.loss_fn, pos, queries,
                                   _negatives(chunking, own_chunks, None), keys,
                                   keys[:, :0], use_batch=False)
        side = corruption.side
        return corruption_loss(chunking, self.loss_fn, pos, queries,
                               _negatives(chunking, own_chunks, corruption),
                               chunking.chunk(side.keys, PADDING),
                               negative_keys(chunking, side.negatives, side.keys),
                               use_batch=side.negatives.use_batch)


def _corruption(side: SideBatch, transform: Callable[[torch.Tensor], torch.Tensor]) -> Corruption:
    """The side's negatives, with `transform` (operator, prepare) applied to the extra rows."""
    return Corruption(side, None if side.extra is None else transform(side.extra))


def _row_ids(entities: EntityList, negatives: SideNegatives) -> list[torch.Tensor]:
    """The table rows one side reads: its entities' (or their features') and the extras."""
    rows = [entities.ids if entities.data is None else entities.data]
    if negatives.extra_rows is not None:
        rows.append(negatives.extra_rows)
    return rows


def _negatives(chunking: Chunking, pos_chunks: torch.Tensor,
               corruption: Corruption | None) -> torch.Tensor:
    if corruption is None:
        return pos_chunks.new_empty((chunking.num_chunks, 0, pos_chunks.shape[2]))
    return negative_embeddings(chunking, corruption.side.negatives, pos_chunks, corruption.extra)


def _masked(chunking: Chunking, scores: torch.Tensor,
            corruption: Corruption | None) -> torch.Tensor:
    if corruption is not None:
        side = corruption.side
        scores = mask_negatives(scores, chunking.chunk(side.keys, PADDING),
                                negative_keys(chunking, side.negatives, side.keys))
    return chunking.unchunk(scores)
