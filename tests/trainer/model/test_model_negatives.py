"""Negative sampling: chunk sizes, padding, which entities corrupt an edge, and masks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from tessera.model.negatives import (
    PADDING,
    Chunking,
    SideNegatives,
    choose_negatives,
    mask_negatives,
    negative_embeddings,
    negative_keys,
    negative_mask,
    plan_chunking,
)

INF = float("-inf")


@pytest.mark.parametrize(("num_edges", "all_negs", "batch", "uniform", "chunk_size"), [
    (7, False, 3, 5, 3),  # chunks of num_batch_negs edges
    (2, False, 50, 50, 2),  # never larger than the batch
    (7, True, 3, 5, 7),  # all_negs: one chunk, every entity is a negative anyway
    (10, False, 0, 4, 4),  # no batch negatives: PBG chunks by num_uniform_negs
    (10, False, 0, 0, 10),  # no negatives at all
])
def test_chunk_size(num_edges: int, all_negs: bool, batch: int, uniform: int,
                    chunk_size: int) -> None:
    assert plan_chunking(num_edges, all_negs, batch, uniform).chunk_size == chunk_size


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        plan_chunking(0, False, 3, 3)


def test_chunks_pad_the_last_chunk_and_unchunk_drops_the_padding() -> None:
    chunking = Chunking(num_edges=7, chunk_size=3)
    values = torch.arange(7)
    chunks = chunking.chunk(values, PADDING)
    assert chunking.num_chunks == 3
    assert chunks.tolist() == [[0, 1, 2], [3, 4, 5], [6, PADDING, PADDING]]
    assert chunking.unchunk(chunks).tolist() == values.tolist()
    assert chunking.chunk(torch.ones(7, 2)).shape == (3, 3, 2)


def choose(chunking: Chunking, **overrides: Any) -> SideNegatives:
    options: dict[str, Any] = {
        "disabled": False, "featurized": False, "all_negs": False, "num_batch_negs": 3,
        "num_uniform_negs": 2, "num_rows": 10, "generator": torch.Generator().manual_seed(0)}
    options.update(overrides)
    return choose_negatives(chunking, **options)


def test_which_negatives_each_side_gets() -> None:
    chunking = Chunking(7, 3)
    default = choose(chunking)
    assert default.use_batch and default.extra_rows.shape == (3, 2)
    assert ((0 <= default.extra_rows) & (default.extra_rows < 10)).all()
    disabled = choose(chunking, disabled=True)
    assert not disabled.use_batch and disabled.extra_rows is None
    featurized = choose(chunking, featurized=True)
    assert featurized.use_batch and featurized.extra_rows is None
    all_rows = choose(chunking, all_negs=True)
    assert not all_rows.use_batch and all_rows.extra_rows.tolist() == list(range(10))
    uniform_only = choose(chunking, num_batch_negs=0)
    assert not uniform_only.use_batch and uniform_only.extra_rows.shape == (3, 2)


def test_uniform_draws_follow_the_callers_generator() -> None:
    chunking = Chunking(7, 3)
    first = choose(chunking, generator=torch.Generator().manual_seed(5)).extra_rows
    again = choose(chunking, generator=torch.Generator().manual_seed(5)).extra_rows
    other = choose(chunking, generator=torch.Generator().manual_seed(6)).extra_rows
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_negatives_are_the_chunks_own_edges_then_the_extra_rows() -> None:
    chunking = Chunking(5, 3)
    negatives = replace(choose(chunking, num_uniform_negs=1), keyed_by_entity=True)
    pos_keys = negatives.positive_keys(torch.tensor([10, 11, 12, 13, 14]), 5)
    keys = negative_keys(chunking, negatives, pos_keys)
    draws = negatives.extra_rows[:, 0].tolist()
    assert keys.tolist() == [[10, 11, 12, draws[0]], [13, 14, PADDING, draws[1]]]
    pos_chunks = torch.arange(6.0).view(2, 3, 1)
    extra = torch.tensor([[[100.0]], [[200.0]]])
    embs = negative_embeddings(chunking, negatives, pos_chunks, extra)
    assert embs.squeeze(2).tolist() == [[0, 1, 2, 100], [3, 4, 5, 200]]


def test_all_rows_are_shared_by_every_chunk() -> None:
    chunking = Chunking(4, 4)
    negatives = choose(chunking, all_negs=True, num_rows=3)
    keys = negative_keys(chunking, negatives, torch.tensor([2, 0, 0, 1]))
    assert keys.tolist() == [[0, 1, 2]]
    embs = negative_embeddings(chunking, negatives, torch.zeros(1, 4, 2), torch.ones(3, 2))
    assert embs.shape == (1, 3, 2)


def test_training_keys_mask_only_the_edge_itself_and_padding_as_pbg_does() -> None:
    """PBG's training masks, among batch negatives, the edge itself and padding, and no
    uniform draw: a repeated entity or a draw of the positive's entity stays a negative."""
    chunking = Chunking(5, 3)
    negatives = choose(chunking, num_uniform_negs=2)
    ids = torch.tensor([4, 4, 7, 4, 4])  # entity 4 repeats within both chunks
    pos_keys = negatives.positive_keys(ids, 5)
    keys = negative_keys(chunking, negatives, pos_keys)
    assert pos_keys.tolist() == [0, 1, 2, 3, 4]
    assert keys.tolist() == [[0, 1, 2, 5, 5], [3, 4, PADDING, 5, 5]]
    mask = negative_mask(chunking.chunk(pos_keys, PADDING), keys)
    eye = torch.eye(3, dtype=torch.bool)
    assert mask[0].tolist() == torch.cat([eye, torch.zeros(3, 2, dtype=torch.bool)], 1).tolist()
    assert mask[1, :2].tolist() == [[True, False, True, False, False],
                                    [False, True, True, False, False]]


def test_all_negs_keys_mask_the_positives_entity() -> None:
    chunking = Chunking(3, 3)
    negatives = choose(chunking, all_negs=True, num_rows=4)
    pos_keys = negatives.positive_keys(torch.tensor([2, 0, 2]), 3)
    mask = negative_mask(chunking.chunk(pos_keys), negative_keys(chunking, negatives, pos_keys))
    assert mask[0].tolist() == [[False, False, True, False], [True, False, False, False],
                                [False, False, True, False]]


def test_mask_hides_the_positive_itself_repeats_and_padding() -> None:
    scores = torch.zeros(1, 3, 5)
    pos_keys = torch.tensor([[5, 6, 5]])
    # Batch part: the chunk's own entities (5, 6, 5), then two extra draws (7, 6).
    neg_keys = torch.tensor([[5, 6, 5, 7, 6]])
    masked = mask_negatives(scores, pos_keys, neg_keys)
    assert masked.tolist() == [[[INF, 0, INF, 0, 0],
                                [0, INF, 0, 0, INF],
                                [INF, 0, INF, 0, 0]]]
    padded = mask_negatives(torch.zeros(1, 2, 2), torch.tensor([[1, PADDING]]),
                            torch.tensor([[1, PADDING]]))
    assert padded[0, 0].tolist() == [INF, INF]


def test_without_padding_the_mask_is_equality_alone() -> None:
    assert not Chunking(6, 3).padded and Chunking(7, 3).padded
    pos_keys, neg_keys = torch.tensor([[5, 6, 5]]), torch.tensor([[5, 6, 5, 7, 6]])
    assert torch.equal(negative_mask(pos_keys, neg_keys, padded=False),
                       negative_mask(pos_keys, neg_keys))
    # With padding keys present, only the default looks for them.
    with_padding = torch.tensor([[1, PADDING]])
    assert negative_mask(with_padding, with_padding)[0, 0].tolist() == [True, True]
    assert negative_mask(with_padding, with_padding, padded=False)[0, 0].tolist() == [True,
                                                                                     False]
