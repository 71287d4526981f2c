"""Negative sampling, PyTorch-BigGraph's way: chunks, batch negatives, uniform draws, masks.

A batch of N edges is cut into chunks of `num_batch_negs` edges (the last one padded). Each
edge is corrupted, on each side, by the entities on that side of the other edges of its chunk
("batch negatives", free: their embeddings are already computed) plus `num_uniform_negs`
entities drawn uniformly from the side's partition, one draw shared by the whole chunk. With
`all_negs` every entity of the partition corrupts every edge instead.

Masked negatives (score -inf) count for nothing. Training masks what PBG masks: padding, the
edge itself among its batch negatives and, with `all_negs`, the positive's own entity. Another
edge of the chunk with the same entity, or a uniform draw of it, stays a negative: on a graph
of a few entities, where most negatives repeat the positive, masking them all would leave the
positive to outscore only the other entities, many times over, and trains a worse model
(Nations, 14 entities, PBG's setup, medians of 5 seeds: filtered Hits@10 0.980 with every
copy masked, 0.988 with PBG's rule; MRR 0.614 and 0.623; bench/bench_quality.py). Evaluation
(`mask_same_entity`) masks every negative that is the positive's entity, so that a rank counts
only other entities.

Degree negatives (`num_degree_negs`, Tessera only) are drawn like the uniform ones, after them
in each chunk's extra rows and masked as they are, but in proportion to each entity's degree:
its number of training edges in the bucket chunk, on the sides whose table the draw is for
(`DegreePool`). Drawing one of those edge endpoints uniformly is drawing in proportion to
degree, so no degree table or alias structure is built, and draws never leave the table.

Featurized entities have no identity to draw or list, so a featurized side only gets batch
negatives (none when `num_batch_negs` is 0), and only the edge itself is masked among them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from ..edgelist import EdgeList

# Key of padding rows: entity ids and edge indices are >= 0, so it never equals a real key.
PADDING = -1
Key = TypeVar("Key")


@dataclass(frozen=True)
class Chunking:
    """How the N edges of a batch are laid out as [num_chunks, chunk_size]."""

    num_edges: int
    chunk_size: int

    @property
    def num_chunks(self) -> int:
        return -(-self.num_edges // self.chunk_size)

    @property
    def padded(self) -> bool:
        """Whether the last chunk is shorter than the others, so `chunk` pads it."""
        return self.num_edges % self.chunk_size != 0

    def chunk(self, values: torch.Tensor,
              padding_value: float | torch.Tensor = 0) -> torch.Tensor:
        """[N, ...] -> [num_chunks, chunk_size, ...], padded at the end of the last chunk
        (a tensor `padding_value` is repeated where it is, never read on the host)."""
        missing = self.num_chunks * self.chunk_size - self.num_edges
        if missing:
            shape = (missing, *values.shape[1:])
            padding = padding_value.expand(shape) if isinstance(padding_value, torch.Tensor) \
                else values.new_full(shape, padding_value)
            values = torch.cat([values, padding])
        return values.view(self.num_chunks, self.chunk_size, *values.shape[1:])

    def unchunk(self, values: torch.Tensor) -> torch.Tensor:
        """[num_chunks, chunk_size, ...] -> [N, ...], dropping the padding."""
        return values.flatten(0, 1)[:self.num_edges]


def plan_chunking(num_edges: int, all_negs: bool, num_batch_negs: int,
                  num_uniform_negs: int) -> Chunking:
    """Chunks of num_batch_negs edges; of num_uniform_negs (the sampled ones: uniform and
    degree) when there are no batch negatives (PBG's choice); the whole batch with all_negs
    or with no negatives at all."""
    if num_edges == 0:
        raise ValueError("cannot score an empty batch")
    if all_negs:
        size = num_edges
    elif num_batch_negs > 0:
        size = min(num_batch_negs, num_edges)
    elif num_uniform_negs > 0:
        size = min(num_uniform_negs, num_edges)
    else:
        size = num_edges
    return Chunking(num_edges, size)


@dataclass(frozen=True)
class SideNegatives:
    """What corrupts one side of a batch's edges."""

    use_batch: bool  # the side's entities of the other edges of the chunk
    extra_rows: torch.Tensor | None  # table rows: [num_chunks, U] uniform draws, or [E] all
    # Masking keys are entity ids (mask the positive's entity wherever it is a negative), not
    # edge positions (mask the edge itself only).
    keyed_by_entity: bool = False

    def positive_keys(self, ids: torch.Tensor | None, num_edges: int,
                      device: torch.device | None = None) -> torch.Tensor:
        """[N] the identity of each edge's positive for masking: its entity id (`ids`, None
        for a featurized side) or its position in the batch (on `device`)."""
        if self.keyed_by_entity and ids is not None:
            return ids
        return torch.arange(num_edges, device=device)

    def extra_keys(self, chunking: Chunking) -> torch.Tensor | None:
        """[num_chunks, X] the keys of the extra rows; by position, one that no edge has."""
        extra = self.extra_rows
        if extra is None:
            return None
        if extra.dim() == 1:
            extra = extra.expand(chunking.num_chunks, -1)
        return extra if self.keyed_by_entity else torch.full_like(extra, chunking.num_edges)


@dataclass(frozen=True)
class DegreePool:
    """The entity ids of one table once per training edge they are on (views of the bucket's
    id columns, or of the edges of the relations that use the table): a uniform draw among
    them is a draw in proportion to degree."""

    columns: tuple[torch.Tensor, ...]  # int64, each non-empty; one or two (lhs, rhs)

    def __len__(self) -> int:
        return sum(len(column) for column in self.columns)

    def draw(self, shape: tuple[int, ...], generator: torch.Generator | None,
             device: torch.device | None = None) -> torch.Tensor:
        """Entity ids of `shape`, each drawn in proportion to its degree."""
        index = torch.randint(len(self), shape, generator=generator, device=device)
        first = self.columns[0]
        if len(self.columns) == 1:
            return first[index]
        second = self.columns[1]
        in_first = index < len(first)
        return torch.where(in_first, first[index.clamp(max=len(first) - 1)],
                           second[(index - len(first)).clamp(min=0)])

    def to(self, device: torch.device) -> DegreePool:
        return DegreePool(tuple(column.to(device) for column in self.columns))


@dataclass(frozen=True)
class DegreeNegatives:
    """A batch's degree negatives: how many per chunk, and each side's pool (None: its table
    had no training edges in the bucket chunk, and draws them uniformly; a featurized side
    draws none)."""

    count: int
    lhs: DegreePool | None
    rhs: DegreePool | None

    def swapped(self) -> DegreeNegatives:
        """The same draws for the batch with its sides exchanged (a reciprocal direction)."""
        return DegreeNegatives(self.count, self.rhs, self.lhs)


def degree_pools(edges: EdgeList, lhs_keys: Sequence[Key], rhs_keys: Sequence[Key],
                 table_of: Callable[[Key], object]) -> dict[Key, DegreePool]:
    """Each table's `DegreePool` from a bucket chunk's training edges, whose relation types'
    sides use the tables named by `lhs_keys` and `rhs_keys`. Keys whose tables are one
    object (both sides of one partition) share one pool: an entity's degree counts its edges
    on either side. Featurized sides have no pool."""
    rel = edges.rel
    sides = [(side.ids, keys) for side, keys in ((edges.lhs, lhs_keys), (edges.rhs, rhs_keys))
             if not side.is_featurized]
    columns: dict[int, list[torch.Tensor]] = {}
    for ids, keys in sides:
        if len(ids) == 0:
            continue
        by_table: dict[int, list[int]] = {}
        for relation, key in enumerate(keys):
            by_table.setdefault(id(table_of(key)), []).append(relation)
        for table, relations in by_table.items():
            if len(relations) == len(keys):  # one table on this side: its whole column
                column = ids
            else:
                chosen = torch.isin(rel, torch.tensor(relations, device=rel.device))
                column = ids[chosen]
            if len(column):
                columns.setdefault(table, []).append(column)
    named = {key: None for _, side_keys in sides for key in side_keys}  # in order, once
    return {key: DegreePool(tuple(columns[id(table_of(key))])) for key in named
            if id(table_of(key)) in columns}


def degree_negatives(count: int, pools: Mapping[Key, DegreePool] | None, lhs_key: Key,
                     rhs_key: Key) -> DegreeNegatives | None:
    """The degree negatives of a batch whose sides' tables are `lhs_key` and `rhs_key`
    (None without any: `count` 0 or no pools)."""
    if count == 0 or pools is None:
        return None
    return DegreeNegatives(count, pools.get(lhs_key), pools.get(rhs_key))


def choose_negatives(  # noqa: PLR0913 (keyword-only settings of one side)
        chunking: Chunking, *, disabled: bool, featurized: bool, all_negs: bool,
        num_batch_negs: int, num_uniform_negs: int, num_rows: int,
        generator: torch.Generator | None, device: torch.device | None = None,
        num_degree_negs: int = 0, degree_pool: DegreePool | None = None) -> SideNegatives:
    """What corrupts one side, keyed for training's masks (see the module's docstring); for
    evaluation's, replace `keyed_by_entity` with True. `device`: where the batch is (the
    generator's device, when one is given). Degree negatives follow the uniform ones in each
    chunk's extra rows; a side without a pool draws them uniformly (no edge gives degrees)."""
    if disabled:
        return SideNegatives(use_batch=False, extra_rows=None)
    if featurized:
        return SideNegatives(use_batch=num_batch_negs > 0, extra_rows=None)
    if all_negs:
        return SideNegatives(use_batch=False, extra_rows=torch.arange(num_rows, device=device),
                             keyed_by_entity=True)
    sampled = draw_sampled(chunking.num_chunks, num_uniform_negs, num_rows, generator, device,
                           num_degree_negs, degree_pool)
    return SideNegatives(use_batch=num_batch_negs > 0, extra_rows=sampled)


def draw_sampled(num_chunks: int, num_uniform_negs: int, num_rows: int,
                 generator: torch.Generator | None, device: torch.device | None = None,
                 num_degree_negs: int = 0, degree_pool: DegreePool | None = None
                 ) -> torch.Tensor | None:
    """[num_chunks, uniform + degree] rows of one side: the uniform draws, then the degree
    ones (uniform too where there is no pool); None if there are none."""
    uniform = None
    if num_uniform_negs > 0:
        uniform = torch.randint(num_rows, (num_chunks, num_uniform_negs),
                                generator=generator, device=device)
    if num_degree_negs == 0:
        return uniform
    shape = (num_chunks, num_degree_negs)
    by_degree = degree_pool.draw(shape, generator, device) if degree_pool is not None \
        else torch.randint(num_rows, shape, generator=generator, device=device)
    return by_degree if uniform is None else torch.cat([uniform, by_degree], dim=1)


def negative_keys(chunking: Chunking, negatives: SideNegatives,
                  pos_keys: torch.Tensor) -> torch.Tensor:
    """[num_chunks, M]: the identity of each negative of each chunk, in the order of
    `negative_embeddings`: the chunk's own edges first, then the extra rows. `pos_keys` are
    `negatives.positive_keys`."""
    parts = []
    if negatives.use_batch:
        parts.append(chunking.chunk(pos_keys, PADDING))
    extra = negatives.extra_keys(chunking)
    if extra is not None:
        parts.append(extra)
    if not parts:
        return pos_keys.new_empty((chunking.num_chunks, 0))
    return torch.cat(parts, dim=1)


def negative_embeddings(chunking: Chunking, negatives: SideNegatives, pos_chunks: torch.Tensor,
                        extra: torch.Tensor | None) -> torch.Tensor:
    """[num_chunks, M, dim] from the chunked positives [C, S, dim] and the prepared embeddings
    of the extra rows ([C, U, dim] uniform, or [E, dim] all)."""
    parts = []
    if negatives.use_batch:
        parts.append(pos_chunks)
    if extra is not None:
        parts.append(extra if extra.dim() == 3 else extra.expand(chunking.num_chunks, -1, -1))
    if not parts:
        return pos_chunks.new_empty((chunking.num_chunks, 0, pos_chunks.shape[2]))
    return torch.cat(parts, dim=1)


def negative_mask(pos_keys: torch.Tensor, neg_keys: torch.Tensor,
                  padded: bool = True) -> torch.Tensor:
    """[C, S, M]: True where the negative is the positive itself or padding.

    `pos_keys` [C, S] and `neg_keys` [C, M] identify entities (or, on featurized sides,
    edges). Padding is rare (the last batch's last chunk): `padded=False` says there is none,
    which spares a pass over the mask.
    """
    same = pos_keys.unsqueeze(2) == neg_keys.unsqueeze(1)
    return same | (neg_keys == PADDING).unsqueeze(1) if padded else same


def mask_negatives(scores: torch.Tensor, pos_keys: torch.Tensor,
                   neg_keys: torch.Tensor) -> torch.Tensor:
    """Scores [C, S, M] with -inf where `negative_mask` says; out of place, so that masked
    scores pass no gradient back."""
    return scores.masked_fill(negative_mask(pos_keys, neg_keys), float("-inf"))
