"""Known edges for filtered evaluation, checked against a brute-force reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tessera.evaluation import KnownEdges, mask_known, ranks

NUM_ENTITIES, NUM_RELATIONS = 8, 3


def tiny_graph() -> tuple[np.ndarray, torch.Tensor]:
    """Train edges (numpy, with duplicates) and test edges (torch) on 8 entities, 3 relations."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, [NUM_ENTITIES, NUM_RELATIONS, NUM_ENTITIES], size=(60, 3))
    test = torch.as_tensor(rng.integers(0, [NUM_ENTITIES, NUM_RELATIONS, NUM_ENTITIES],
                                        size=(10, 3)))
    return train, test


def known_from(train: np.ndarray, test: torch.Tensor) -> KnownEdges:
    return KnownEdges.from_edge_sets([(train[:, 0], train[:, 1], train[:, 2]),
                                      (test[:, 0], test[:, 1], test[:, 2])])


def brute_force_pairs(known: list[tuple[int, int, int]], queries: torch.Tensor,
                      side: str) -> set[tuple[int, int]]:
    pairs = set()
    for row, (u, r, v) in enumerate(queries.tolist()):
        for known_u, known_r, known_v in known:
            if side == "rhs" and (known_u, known_r) == (u, r) and known_v != v:
                pairs.add((row, known_v))
            if side == "lhs" and (known_r, known_v) == (r, v) and known_u != u:
                pairs.add((row, known_u))
    return pairs


def queries_with_strangers(test: torch.Tensor) -> torch.Tensor:
    # Unseen relation, unseen entities and a negative index must match nothing.
    strangers = torch.tensor([[1, 7, 2], [100, 0, 3], [2, 1, 100], [-1, 0, 0], [0, -1, 0]])
    return torch.cat([test, strangers])


@pytest.mark.parametrize("side", ["rhs", "lhs"])
def test_known_corruptions_match_a_brute_force_reference(side):
    train, test = tiny_graph()
    known = known_from(train, test)
    queries = queries_with_strangers(test)
    lookup = known.known_rhs if side == "rhs" else known.known_lhs
    rows, entities = lookup(queries[:, 0], queries[:, 1], queries[:, 2])
    assert rows.dtype == entities.dtype == torch.long
    pairs = list(zip(rows.tolist(), entities.tolist()))
    assert len(pairs) == len(set(pairs)), "duplicate known edges must not repeat a pair"
    all_known = [tuple(edge) for edge in train.tolist() + test.tolist()]
    expected = brute_force_pairs(all_known, queries, side)
    assert set(pairs) == expected
    assert len(expected) > 10  # the graph is dense enough for the comparison to mean something


def test_the_positive_is_never_masked():
    train, test = tiny_graph()
    known = known_from(train, test)
    rows, entities = known.known_rhs(test[:, 0], test[:, 1], test[:, 2])
    assert (entities != test[rows, 2]).all()
    rows, entities = known.known_lhs(test[:, 0], test[:, 1], test[:, 2])
    assert (entities != test[rows, 0]).all()


def test_duplicates_are_counted_once_and_edge_sets_are_united():
    train, test = tiny_graph()
    known = known_from(train, test)
    distinct = {tuple(edge) for edge in train.tolist() + test.tolist()}
    assert len(known) == len(distinct)
    assert known.num_relations == NUM_RELATIONS


def test_filtered_ranks_never_exceed_raw_ranks_and_match_a_reference():
    train, test = tiny_graph()
    known = known_from(train, test)
    generator = torch.Generator().manual_seed(3)
    # Rank every test edge's rhs against all entities, the positive's own column masked.
    scores = torch.randn(len(test), NUM_ENTITIES, generator=generator)
    rows = torch.arange(len(test))
    pos = scores[rows, test[:, 2]].clone()
    scores[rows, test[:, 2]] = -math.inf
    raw = ranks(pos, scores)
    filtered_scores = scores.clone()
    mask_known(filtered_scores, *known.known_rhs(test[:, 0], test[:, 1], test[:, 2]))
    filtered = ranks(pos, filtered_scores)
    assert (filtered <= raw).all()
    assert (filtered < raw).any()
    all_known = {tuple(edge) for edge in train.tolist() + test.tolist()}
    for row, (u, r, v) in enumerate(test.tolist()):
        competitors = [e for e in range(NUM_ENTITIES)
                       if e != v and (u, r, e) not in all_known and scores[row, e] >= pos[row]]
        assert filtered[row] == 1 + len(competitors)


def test_mask_known_maps_entities_to_candidate_columns():
    scores = torch.zeros(2, 4)
    candidate_ids = torch.tensor([5, 2, 5, 9])
    # Entity 5 fills two columns; entity 3 is no candidate and is skipped.
    mask_known(scores, torch.tensor([0, 0, 1, 1]), torch.tensor([5, 3, 2, 9]), candidate_ids)
    assert torch.isinf(scores).tolist() == [[True, False, True, False],
                                            [False, True, False, True]]


def test_mask_known_defaults_to_one_column_per_entity():
    scores = torch.zeros(2, 3)
    mask_known(scores, torch.tensor([0, 1, 1]), torch.tensor([2, 0, 3]))
    assert torch.isinf(scores).tolist() == [[False, False, True], [True, False, False]]
    assert (scores[torch.isinf(scores)] < 0).all()


def test_a_hub_with_many_known_neighbours_is_expanded_without_loops():
    num_leaves = 200_000
    leaves = np.arange(1, num_leaves + 1, dtype=np.int32)
    hub = np.zeros(num_leaves, dtype=np.int32)
    known = KnownEdges.from_edge_sets([(hub, np.zeros_like(hub), leaves),
                                       (hub[:1000], np.zeros(1000, np.int32), leaves[:1000])])
    assert len(known) == num_leaves
    rows, entities = known.known_rhs(torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1]),
                                     torch.tensor([1, num_leaves + 5, 1]))
    counts = torch.bincount(rows, minlength=3).tolist()
    assert counts == [num_leaves - 1, num_leaves, 0]
    assert entities[rows == 1].tolist() == list(range(1, num_leaves + 1))
    rows, entities = known.known_lhs(torch.tensor([3, 0]), torch.tensor([0, 0]),
                                     torch.tensor([17, 17]))
    assert rows.tolist() == [0] and entities.tolist() == [0]


def test_bad_known_edges_are_rejected():
    with pytest.raises(ValueError, match="same length"):
        KnownEdges.from_edge_sets([(np.zeros(3), np.zeros(2), np.zeros(3))])
    with pytest.raises(ValueError, match="non-negative"):
        KnownEdges.from_edge_sets([(np.array([0, -1]), np.zeros(2), np.zeros(2))])
    with pytest.raises(ValueError, match="at least one"):
        KnownEdges.from_edge_sets([])
