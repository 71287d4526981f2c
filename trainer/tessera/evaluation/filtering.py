"""Known edges for filtered evaluation: which corrupted candidates are true edges.

Filtered ranking, what link-prediction papers report, ranks a test edge (u, r, v) only against
corruptions that are not themselves known edges: on the rhs side every v' != v with (u, r, v')
known is dropped, on the lhs side every u' != u with (u', r, v) known. The positive itself is
never dropped here; excluding its own column from its negatives is the scorer's job.

Entities are global indices within their type (partition offsets already added by the caller).
For each direction the known edges are kept sorted by one int64 key, entity * R + relation,
next to the opposite endpoint, 16 bytes per edge and direction, so a batch of queries is two
binary searches and a range expansion, with no Python loop over edges.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

IndexArray = torch.Tensor | np.ndarray
EdgeArrays = tuple[IndexArray, IndexArray, IndexArray]  # lhs, rel, rhs


def _as_edges(edges: EdgeArrays) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lhs, rel, rhs = (torch.as_tensor(side, device="cpu").long().reshape(-1) for side in edges)
    if not len(lhs) == len(rel) == len(rhs):
        raise ValueError(f"lhs, rel and rhs must have the same length, "
                         f"got {len(lhs)}, {len(rel)} and {len(rhs)}")
    return lhs, rel, rhs


def _expand_ranges(starts: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(owner, position) for every position in every half-open range [starts[i], ends[i])."""
    lengths = ends - starts
    owners = torch.repeat_interleave(torch.arange(len(starts), device=starts.device), lengths)
    first_of_owner = torch.cumsum(lengths, 0) - lengths
    within = (torch.arange(len(owners), device=starts.device)
              - torch.repeat_interleave(first_of_owner, lengths))
    return owners, torch.repeat_interleave(starts, lengths) + within


@dataclass(frozen=True)
class _SortedNeighbours:
    """Distinct (key, neighbour) pairs sorted by key, then neighbour."""

    keys: torch.Tensor  # int64 [E], ascending
    neighbours: torch.Tensor  # int64 [E]

    @classmethod
    def build(cls, keys: torch.Tensor, neighbours: torch.Tensor) -> _SortedNeighbours:
        # Two stable sorts make a lexicographic one; duplicates then sit side by side.
        order = torch.sort(neighbours, stable=True).indices
        order = order[torch.sort(keys[order], stable=True).indices]
        keys, neighbours = keys[order], neighbours[order]
        del order  # with millions of edges every int64 array counts towards peak memory
        first = torch.ones(len(keys), dtype=torch.bool)
        first[1:] = (keys[1:] != keys[:-1]) | (neighbours[1:] != neighbours[:-1])
        return cls(keys=keys[first], neighbours=neighbours[first])

    def lookup(self, query_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(query index, neighbour) for every stored pair whose key equals a query's key."""
        starts = torch.searchsorted(self.keys, query_keys, side="left")
        ends = torch.searchsorted(self.keys, query_keys, side="right")
        query_index, positions = _expand_ranges(starts, ends)
        return query_index, self.neighbours[positions]


@dataclass(frozen=True)
class KnownEdges:
    """Every known (lhs, rel, rhs), indexed to list the true corruptions of test edges."""

    num_relations: int  # R of the keys: one more than the largest known relation index
    num_entities: int  # one more than the largest known entity index
    by_lhs: _SortedNeighbours  # key (lhs, rel), neighbour rhs
    by_rhs: _SortedNeighbours  # key (rhs, rel), neighbour lhs

    @classmethod
    def from_edge_sets(cls, edge_sets: Sequence[EdgeArrays]) -> KnownEdges:
        """Indexes the union of edge sets (train, valid, test...), each as (lhs, rel, rhs)."""
        if not edge_sets:
            raise ValueError("known edges need at least one edge set")
        lhs, rel, rhs = (torch.cat(side) for side in zip(*map(_as_edges, edge_sets)))
        if len(rel) and min(int(lhs.min()), int(rel.min()), int(rhs.min())) < 0:
            raise ValueError("known edges must have non-negative entity and relation indices")
        num_relations = int(rel.max()) + 1 if len(rel) else 1
        max_entity = max(int(lhs.max()), int(rhs.max())) if len(lhs) else 0
        if (max_entity + 1) * num_relations > torch.iinfo(torch.long).max:
            raise ValueError(f"entity index {max_entity} with {num_relations} relations does "
                             f"not fit an int64 key")
        return cls(num_relations=num_relations, num_entities=max_entity + 1,
                   by_lhs=_SortedNeighbours.build(lhs * num_relations + rel, rhs),
                   by_rhs=_SortedNeighbours.build(rhs * num_relations + rel, lhs))

    def __len__(self) -> int:
        """The number of distinct known edges."""
        return len(self.by_lhs.keys)

    def known_rhs(self, lhs: IndexArray, rel: IndexArray,
                  rhs: IndexArray) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, entity) pairs: every entity v' != rhs[row] with (lhs[row], rel[row], v') known."""
        lhs, rel, rhs = _as_edges((lhs, rel, rhs))
        return self._other_endpoints(self.by_lhs, self._keys(lhs, rel), rhs)

    def known_lhs(self, lhs: IndexArray, rel: IndexArray,
                  rhs: IndexArray) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, entity) pairs: every entity u' != lhs[row] with (u', rel[row], rhs[row]) known."""
        lhs, rel, rhs = _as_edges((lhs, rel, rhs))
        return self._other_endpoints(self.by_rhs, self._keys(rhs, rel), lhs)

    def _keys(self, entity: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        # An index outside the known ranges could alias another (entity, relation) pair's key
        # (or overflow it); -1 is no stored key, so such queries match nothing, as they should.
        unseen = ((rel < 0) | (rel >= self.num_relations)
                  | (entity < 0) | (entity >= self.num_entities))
        keys = entity.masked_fill(unseen, 0) * self.num_relations + rel
        return keys.masked_fill_(unseen, -1)

    @staticmethod
    def _other_endpoints(index: _SortedNeighbours, keys: torch.Tensor,
                         positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, entities = index.lookup(keys)
        not_positive = entities != positives[rows]
        return rows[not_positive], entities[not_positive]


def mask_known(scores: torch.Tensor, rows: torch.Tensor, entities: torch.Tensor,
               candidate_ids: torch.Tensor | None = None) -> None:
    """Sets, in place, the score of each known (row, entity) pair to -inf.

    Column j of `scores` [N, num_candidates] scores entity `candidate_ids[j]`, by default
    entity j, as when ranking against every entity of a type. Pairs whose entity is not among
    the candidates are skipped, and an entity that is a candidate several times is masked in
    every column it occupies.
    """
    rows, entities = rows.to(scores.device), entities.to(scores.device)
    if candidate_ids is None:
        is_candidate = (entities >= 0) & (entities < scores.shape[1])
        rows, columns = rows[is_candidate], entities[is_candidate]
    else:
        sorted_ids, columns_by_id = torch.sort(candidate_ids.to(scores.device))
        starts = torch.searchsorted(sorted_ids, entities, side="left")
        ends = torch.searchsorted(sorted_ids, entities, side="right")
        pair_index, positions = _expand_ranges(starts, ends)
        rows, columns = rows[pair_index], columns_by_id[positions]
    scores.index_put_((rows, columns), torch.tensor(-math.inf, dtype=scores.dtype,
                                                    device=scores.device))
