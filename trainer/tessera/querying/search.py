"""Exact top-k search over a checkpoint's embeddings, streamed block by block.

Candidates are read one block of rows of one partition at a time and scored against every
query at once; each query keeps a running top k (scores and (partition, offset)), merged with
each block's scores. Memory is one block, its scores against the queries, and k per query,
whatever the graph's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..progress import Task
from .names import EntityRow
from .scoring import Comparison, ModelScoring

# Bounds of a block: bytes of rows read at once, and block rows x queries scored at once.
MAX_BLOCK_BYTES = 8 * 2**20
MAX_BLOCK_SCORES = 2**22


@dataclass(frozen=True)
class Hit:
    """One candidate found for a query: where it is and its score."""

    row: EntityRow
    score: float


class RunningTopK:
    """The k best (score, partition, offset) of each query so far."""

    def __init__(self, num_queries: int, k: int) -> None:
        self.k = k
        self.scores = torch.empty((num_queries, 0))
        self.parts = torch.empty((num_queries, 0), dtype=torch.long)
        self.offsets = torch.empty((num_queries, 0), dtype=torch.long)

    def merge(self, scores: torch.Tensor, part: int, first_offset: int) -> None:
        """Take in a block's scores [queries, rows], rows numbered from `first_offset`."""
        block_scores, block_best = scores.topk(min(self.k, scores.shape[1]), dim=1)
        scores = torch.cat([self.scores, block_scores], dim=1)
        parts = torch.cat([self.parts, torch.full_like(block_best, part)], dim=1)
        offsets = torch.cat([self.offsets, block_best + first_offset], dim=1)
        self.scores, best = scores.topk(min(self.k, scores.shape[1]), dim=1)
        self.parts = parts.gather(1, best)
        self.offsets = offsets.gather(1, best)

    def hits(self, entity_type: str) -> list[list[Hit]]:
        """Each query's hits, best first; excluded candidates (-inf) left out."""
        return [[Hit(EntityRow(entity_type, int(part), int(offset)), float(score))
                 for score, part, offset in zip(scores, parts, offsets)
                 if score != float("-inf")]
                for scores, parts, offsets in zip(self.scores.tolist(), self.parts.tolist(),
                                                  self.offsets.tolist())]


def block_rows_for(num_queries: int, dimension: int, block_rows: int | None = None) -> int:
    """Rows per block: as asked, else as many as keep the block and its scores bounded."""
    if block_rows is not None:
        return block_rows
    rows = min(MAX_BLOCK_BYTES // (4 * max(1, dimension)),
               MAX_BLOCK_SCORES // max(1, num_queries))
    return max(1, rows)


Blocks = Iterable[tuple[int, int, np.ndarray]]  # (partition, first offset, rows)


def search(blocks: Blocks, scoring: ModelScoring, comparison: Comparison, k: int,
           excluded: Sequence[EntityRow | None], task: Task) -> list[list[Hit]]:
    """The k best candidates for each query among the rows of `blocks` (of entity type
    `comparison.candidate_type`), best first. `excluded[i]` (the query itself, say) is never
    a hit of query i.
    """
    kind = comparison.candidate_type
    queries = comparison.queries
    top = RunningTopK(len(queries), k)
    with torch.no_grad():
        for part, start, block in blocks:
            candidates = comparison.prepare_candidates(torch.from_numpy(block))
            scores = scoring.scores(queries, candidates)
            _exclude(scores, excluded, kind, part, start)
            top.merge(scores, part, start)
            task.advance(len(block))
            del block, candidates, scores  # before the next block is read, not after
    return top.hits(kind)


def _exclude(scores: torch.Tensor, excluded: Sequence[EntityRow | None], kind: str, part: int,
             start: int) -> None:
    for query, row in enumerate(excluded):
        if (row is not None and row.entity_type == kind and row.part == part
                and start <= row.offset < start + scores.shape[1]):
            scores[query, row.offset - start] = float("-inf")
