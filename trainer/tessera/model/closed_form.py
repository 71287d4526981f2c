"""The gradients of a training batch written out: the fast path of the common case.

Autograd records every operation of a batch and replays them backwards. For what most runs
use (one relation type per batch, plain entities, an inner-product comparator, no
regularizer) the backward pass is a few batched matrix products, written out here. It
computes what `EmbeddingModel.forward` followed by `backward()` computes (a test holds both
equal for every operator, comparator and loss) in a fraction of the time; other
configurations train through autograd.

Each side's rows are gathered chunk by chunk, the chunk's S positives then its X extra
negatives (uniform draws, or every row), so that after the operator and `prepare` one
tensor [C, S + X, d] holds the side's positives P and, from its first slot (with batch
negatives) or from slot S, its negatives N. With B = P_r P_l^T (edge i's right side against
edge j's left side):

    left scores  P_r N_l^T = [B | P_r E_l^T]      right scores  P_l N_r^T = [B^T | P_l E_r^T]

since corrupting edge i's right side with edge j's is the same pair as corrupting edge j's
left side with edge i's. When both sides use batch negatives, B is computed once, and
backward adds the gradients both sides send it before the one product per side that
carries them on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from .. import kernels
from ..config import ConfigSchema
from ..edgelist import EdgeList, EntityList
from .comparators import Comparator, make_comparator
from .losses import Loss, RankingLoss, SoftmaxLoss
from .negatives import PADDING, Chunking, DegreeNegatives, SideNegatives, negative_mask
from .operators import Operator, TranslationOperator, accumulate_grad, summed_over_rows
from .rows import RowGradients, gather_rows
from .scalars import batch_scalar

if TYPE_CHECKING:  # the model scores through `fused_losses`, which uses this module
    from .embedding_model import EmbeddingModel

MINUS_INFINITY = torch.tensor(float("-inf"))  # the score of a masked negative


def closed_form_covers(config: ConfigSchema) -> bool:
    """Whether `closed_form_gradients` handles models of `config` (else: autograd): an
    inner-product comparator, one relation type per batch, no regularizer, no features."""
    return (make_comparator(config.comparator, config.bias).inner_product
            and not config.dynamic_relations and config.regularization_coef == 0
            and not any(entity.featurized for entity in config.entities.values()))


def supports_closed_form(model: EmbeddingModel) -> bool:
    """`closed_form_covers` of the model's config."""
    return closed_form_covers(model.config)


@torch.no_grad()  # gradients are computed here, not recorded
def closed_form_gradients(  # noqa: PLR0913 (a batch's settings, keyword-only)
        model: EmbeddingModel, edges: EdgeList, lhs_table: torch.Tensor,
        rhs_table: torch.Tensor, *, num_batch_negs: int, num_uniform_negs: int,
        generator: torch.Generator | None, degree: DegreeNegatives | None = None,
        inverse: bool = False) -> tuple[float | torch.Tensor, list[RowGradients]]:
    """The loss of `edges` and the gradients of the table rows it used; the model parameters'
    gradients are added to their `.grad`. Only for models `supports_closed_form` accepts;
    one direction (`EmbeddingModel.directions`) at a time."""
    plan = model.plan_batch(edges, len(lhs_table), len(rhs_table),
                            num_batch_negs=num_batch_negs, num_uniform_negs=num_uniform_negs,
                            generator=generator, degree=degree, inverse=inverse)
    relation = model.relations[plan.relation_index]
    lhs = SideLayout.of(plan.chunking, edges.lhs, plan.lhs_negatives)
    rhs = SideLayout.of(plan.chunking, edges.rhs, plan.rhs_negatives)
    gathered, touched = gather_rows([(lhs_table, [lhs.rows]), (rhs_table, [rhs.rows])],
                                    model.config.max_norm, training=True)
    lhs_pipeline = SidePipeline(model.comparator, model.global_embedding(relation.lhs), None)
    rhs_pipeline = SidePipeline(model.comparator, model.global_embedding(relation.rhs),
                                cast(Operator, model.rhs_operators[plan.relation_index]))
    grads = [torch.empty_like(t.embeddings) for t in touched]  # in the order gathered
    if len(grads) == 1:  # both sides read one table: the left side's rows, then the right's
        lhs_grad, rhs_grad = grads[0].split_with_sizes([lhs.rows.numel(), rhs.rows.numel()])
    else:
        lhs_grad, rhs_grad = grads
    lhs_grad, rhs_grad = lhs_grad.view_as(gathered[0][0]), rhs_grad.view_as(gathered[1][0])
    loss, grad_sums = score_gradients(
        plan.chunking, ScoredSide(lhs, lhs_pipeline.forward(gathered[0][0]), lhs_grad),
        ScoredSide(rhs, rhs_pipeline.forward(gathered[1][0]), rhs_grad), model.loss_fn,
        relation.weight)
    lhs_pipeline.backward(lhs_grad, None if grad_sums is None else grad_sums[0])
    rhs_pipeline.backward(rhs_grad, None if grad_sums is None else grad_sums[1])
    return loss, [RowGradients(t.table, t.rows, g) for t, g in zip(touched, grads)]


@dataclass(frozen=True)
class SideLayout:
    """Which table rows one side reads, chunk by chunk: the chunk's positives, then its extra
    negatives. Its negatives start at slot 0 when the chunk's positives corrupt the other
    edges (batch negatives), at slot S otherwise."""

    rows: torch.Tensor  # int64 [C, S + X]; padding slots read the first entity (no gradient)
    keys: torch.Tensor  # int64 [C, S + X]; `SideNegatives` keys, PADDING in padding slots
    num_pos: int  # S
    use_batch: bool
    padded: bool  # whether the last chunk has padding slots

    @classmethod
    def of(cls, chunking: Chunking, entities: EntityList, negatives: SideNegatives
           ) -> SideLayout:
        rows = chunking.chunk(entities.ids, entities.ids[:1])  # padding: a real row
        keys = chunking.chunk(negatives.positive_keys(entities.ids, chunking.num_edges,
                                                        entities.ids.device),
                              PADDING)
        extra, extra_keys = negatives.extra_rows, negatives.extra_keys(chunking)
        if extra is not None and extra_keys is not None:
            extra = extra if extra.dim() == 2 else extra.expand(chunking.num_chunks, -1)
            rows = torch.cat([rows, extra], dim=1)
            keys = torch.cat([keys, extra_keys], dim=1)
        return cls(rows, keys, chunking.chunk_size, negatives.use_batch, chunking.padded)

    @property
    def neg_start(self) -> int:
        return 0 if self.use_batch else self.num_pos

    def mask(self) -> torch.Tensor:
        """[C, S, M]: the negatives that must not count against each positive."""
        return negative_mask(self.keys[:, :self.num_pos], self.keys[:, self.neg_start:],
                             self.padded)


@dataclass(frozen=True)
class ScoredSide:
    """A side's layout with its prepared embeddings and where their gradient goes."""

    layout: SideLayout
    embs: torch.Tensor  # [C, S + X, d]
    grad: torch.Tensor  # [C, S + X, d], written by `score_gradients`

    @cached_property  # read several times per batch; each slice is a tensor operation
    def pos(self) -> torch.Tensor:
        return self.embs[:, :self.layout.num_pos]

    @cached_property
    def negatives(self) -> torch.Tensor:
        return self.embs[:, self.layout.neg_start:]


class SidePipeline:
    """One side's embeddings from gathered rows to what the comparator scores (global
    embedding, operator, `prepare`), and gradients the same way back.

    The global embedding and a translation both add one vector to every row: they are added
    as one shift, in place, and share one gradient, the sum over the rows (a pass over the
    side's [C, S + X, d] embeddings each, saved). Like an autograd function, `forward` keeps
    the intermediate tensors `backward` needs.
    """

    def __init__(self, comparator: Comparator, global_embedding: nn.Parameter | None,
                 operator: Operator | None) -> None:
        self.comparator = comparator
        self.shifts = [] if global_embedding is None else [global_embedding]
        if isinstance(operator, TranslationOperator):
            self.shifts.append(operator.translation)
            operator = None
        self.operator = operator

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """`rows`: the batch's own copy of the gathered rows, which this overwrites."""
        if self.shifts:
            rows.add_(sum(self.shifts[1:], self.shifts[0]))
        self.embs = rows
        self.transformed = rows if self.operator is None else self.operator(rows)
        self.prepared = self.comparator.prepare(self.transformed)
        return self.prepared

    def backward(self, grad: torch.Tensor, grad_sum: torch.Tensor | None = None) -> None:
        """Turn `grad`, w.r.t. what `forward` returned, into the rows' gradient, in place.
        `grad_sum`: the sum of `grad`'s rows, where the scorer computed it."""
        rows_grad = self.comparator.prepare_vjp(self.transformed, self.prepared, grad)
        if self.operator is not None:
            rows_grad = self.operator.vjp(self.embs, rows_grad)
        if self.shifts:
            shift_grad = grad_sum if grad_sum is not None and rows_grad is grad \
                else summed_over_rows(rows_grad)
            for index, shift in enumerate(self.shifts):  # each parameter its own gradient
                accumulate_grad(shift, shift_grad if index == 0 else shift_grad.clone())
        if rows_grad is not grad:  # most steps of the common case pass gradients unchanged
            grad.copy_(rows_grad)


def score_gradients(chunking: Chunking, lhs: ScoredSide, rhs: ScoredSide, loss_fn: Loss,
                    weight: float) -> tuple[float | torch.Tensor, torch.Tensor | None]:
    """The loss of both sides' corruptions; its gradients w.r.t. both sides' embeddings go
    to their `grad`. Also the sums of both `grad`s' rows [2, d] where computed on the way
    (the compiled path), else None."""
    size = chunking.chunk_size
    shared = lhs.layout.use_batch and rhs.layout.use_batch
    if shared and isinstance(loss_fn, RankingLoss) and kernels.active() and kernels.CHUNKED \
            and torch.get_num_threads() == 1:
        # PBG's default setup: the same steps as below, compiled, one chunk at a time, on
        # one thread (a Hogwild worker's; with more, torch splits the products below).
        grad_sums = lhs.embs.new_empty((2, lhs.embs.shape[2]))
        loss = kernels.ranking_chunks(
            loss_fn.margin, weight, chunking.num_edges, lhs.embs, rhs.embs, lhs.grad,
            rhs.grad, lhs.layout.keys.contiguous(), rhs.layout.keys.contiguous(), size,
            grad_sums)
        return loss, grad_sums
    lhs_scores = torch.bmm(rhs.pos, lhs.negatives.transpose(1, 2))
    pos_scores = positive_scores(lhs, rhs, lhs_scores)
    pos_grad = pos_scores.new_zeros(pos_scores.shape)
    if shared:  # the right side's batch block is the left's B, transposed
        batch_block = lhs_scores[:, :, :size]
        rhs_extra = torch.bmm(lhs.pos, rhs.embs[:, size:].transpose(1, 2))
        rhs_batch_grad = torch.empty_like(batch_block)  # transposed, like B
        # The right side first: the left side's gradients overwrite B.
        rhs_loss = side_loss(chunking, pos_scores, [batch_block.transpose(1, 2), rhs_extra],
                             [rhs_batch_grad.transpose(1, 2), rhs_extra], rhs.layout, loss_fn,
                             weight, pos_grad)
        lhs_loss = side_loss(chunking, pos_scores, [lhs_scores], [lhs_scores], lhs.layout,
                             loss_fn, weight, pos_grad)
        batch_block += rhs_batch_grad  # the whole gradient w.r.t. B, from both sides
        # B's gradient and the right side's extra negatives' reach the left positives as two
        # products (cheaper than joining the transposed block and the extras first).
        lhs_queries = [(batch_block.transpose(1, 2), rhs.pos), (rhs_extra, rhs.embs[:, size:])]
        # Both sides' batch slots got their gradient through the other side's queries.
        lhs_negs, rhs_negs = (lhs_scores[:, :, size:], size), (rhs_extra, size)
    else:
        rhs_scores = torch.bmm(lhs.pos, rhs.negatives.transpose(1, 2))
        rhs_loss = side_loss(chunking, pos_scores, [rhs_scores], [rhs_scores], rhs.layout,
                             loss_fn, weight, pos_grad)
        lhs_loss = side_loss(chunking, pos_scores, [lhs_scores], [lhs_scores], lhs.layout,
                             loss_fn, weight, pos_grad)
        lhs_queries = [(rhs_scores, rhs.negatives)]
        lhs_negs = (lhs_scores, lhs.layout.neg_start)
        rhs_negs = (rhs_scores, rhs.layout.neg_start)
    # `*_negs`: a side's own negatives' score gradients and the slot where those negatives
    # start. Each positive score is the inner product of the edge's two sides.
    pos_grad = pos_grad.unsqueeze(2)
    write_gradient(lhs, pos_grad * rhs.pos, lhs_queries, *lhs_negs, rhs.pos)
    write_gradient(rhs, pos_grad * lhs.pos, [(lhs_scores, lhs.negatives)], *rhs_negs, lhs.pos)
    return lhs_loss + rhs_loss, None


def positive_scores(lhs: ScoredSide, rhs: ScoredSide, lhs_scores: torch.Tensor
                    ) -> torch.Tensor:
    """[C, S]: each edge's score, the diagonal of B when the left scores hold it (already
    computed), else one inner product per edge."""
    if lhs.layout.use_batch:
        return lhs_scores.diagonal(dim1=1, dim2=2).clone()
    return (lhs.pos * rhs.pos).sum(-1)


def side_loss(chunking: Chunking, pos_scores: torch.Tensor, blocks: list[torch.Tensor],
              grads: list[torch.Tensor], layout: SideLayout, loss_fn: Loss, weight: float,
              pos_grad: torch.Tensor) -> float | torch.Tensor:
    """The loss of one side's corruptions (relation weight included), whose negatives'
    scores [C, S, M] are `blocks` side by side. Writes their gradients to `grads` (shaped
    like `blocks`, possibly the same tensors) and adds the positives' to `pos_grad` [C, S]."""
    widths = [block.shape[2] for block in blocks]
    neg_keys = layout.keys[:, layout.neg_start:]
    if kernels.active() and isinstance(loss_fn, RankingLoss):
        # The other losses' exp/log vectorise well in torch; ranking is a dozen passes there.
        keys = neg_keys.split(widths, dim=1)
        return kernels.ranking_loss(
            loss_fn.margin, weight, chunking.num_edges, pos_scores,
            layout.keys[:, :layout.num_pos], list(zip(blocks, grads, keys)), pos_grad)
    if kernels.active() and isinstance(loss_fn, SoftmaxLoss) and weight == 1 \
            and len(blocks) == 1 and blocks[0] is grads[0] and blocks[0].is_contiguous():
        # One pass per row of scores instead of torch's eight over the whole tensor.
        return kernels.softmax_loss(
            blocks[0], pos_scores.contiguous(), layout.keys[:, :layout.num_pos].contiguous(),
            neg_keys.contiguous(), pos_grad, chunking.num_edges)
    scores = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)
    # In place, through `where`: on CPU, masked_fill_ takes twice as long. Elsewhere the
    # -inf is made on the scores' device (a fill, not a copy from the host).
    minus_infinity = MINUS_INFINITY if scores.is_cpu else scores.new_full((), float("-inf"))
    torch.where(layout.mask(), minus_infinity, scores, out=scores)
    edge_scores = chunking.unchunk(scores)
    loss, edge_pos_grad, edge_neg_grad = loss_fn.value_and_gradients(
        chunking.unchunk(pos_scores), edge_scores)
    if edge_neg_grad.data_ptr() != edge_scores.data_ptr():
        edge_scores.copy_(edge_neg_grad)
    scores.flatten(0, 1)[chunking.num_edges:] = 0  # padding
    if weight != 1:
        loss, edge_pos_grad = loss * weight, edge_pos_grad * weight
        scores.mul_(weight)
    for grad, block_grad in zip(grads, scores.split(widths, dim=2)):
        if grad.data_ptr() != block_grad.data_ptr() or grad.stride() != block_grad.stride():
            grad.copy_(block_grad)
    chunking.unchunk(pos_grad).add_(edge_pos_grad)
    return batch_scalar(loss)


def write_gradient(side: ScoredSide, pos_grad: torch.Tensor,
                   queries: list[tuple[torch.Tensor, torch.Tensor]], neg_grad: torch.Tensor,
                   start: int, queried_pos: torch.Tensor) -> None:
    """Write `side.grad`. Its positives' gradient is `pos_grad` (from the positive scores,
    added to here) plus, for each (score gradient [C, S, M], embeddings [C, M, d]) in
    `queries`, the other side's negatives scored against them. Its slots from `start` on are
    negatives, scored against the other side's positives `queried_pos` with gradient
    `neg_grad` [C, S, slots - start]."""
    for score_grad, embs in queries:
        if score_grad.shape[2]:
            pos_grad.baddbmm_(score_grad, embs)
    if start == side.embs.shape[1]:
        side.grad.copy_(pos_grad)
        return
    by_slot = neg_grad.transpose(1, 2)
    if start == 0:  # the positives are negatives too: both gradients add up
        torch.bmm(by_slot, queried_pos, out=side.grad)
        side.grad[:, :side.layout.num_pos] += pos_grad
    else:
        torch.cat([pos_grad, torch.bmm(by_slot, queried_pos)], dim=1, out=side.grad)
