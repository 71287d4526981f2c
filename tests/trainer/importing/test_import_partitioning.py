"""Entity placement (random and hash) and grouping edges by bucket."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.importing.bucketing import PlacedEdges, split_by_bucket
from tessera.importing.partitioning import place_entities


def hashes(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**63, count, dtype=np.int64).astype(np.uint64)


@pytest.mark.parametrize("method", ["random", "hash"])
def test_every_entity_gets_one_place_with_contiguous_offsets(method):
    placement = place_entities(hashes(1003), 4, method, seed=7)
    parts, offsets = placement.partitions_and_offsets()
    assert sorted(placement.order.tolist()) == list(range(1003))
    for part in range(4):
        members = placement.members(part)
        assert (parts[members] == part).all()
        assert offsets[members].tolist() == list(range(len(members)))
    assert sum(placement.counts) == 1003


def test_random_placement_is_balanced_reproducible_and_seeded():
    values = hashes(1003)
    placement = place_entities(values, 4, "random", seed=7)
    assert placement.counts == [250, 251, 251, 251]
    again = place_entities(values, 4, "random", seed=7)
    assert (placement.order == again.order).all()
    assert (place_entities(values, 4, "random", seed=8).order != placement.order).any()


def test_random_placement_ignores_the_order_entities_were_found_in():
    values = hashes(500)
    shuffle = np.random.default_rng(1).permutation(500)
    placed = place_entities(values, 3, "random", seed=0).partitions_and_offsets()
    placed_shuffled = place_entities(values[shuffle], 3, "random",
                                     seed=0).partitions_and_offsets()
    for original, shuffled in zip(placed, placed_shuffled):
        assert (original[shuffle] == shuffled).all()


def test_hash_placement_is_the_hash_modulo_and_ordered_by_hash():
    values = hashes(600)
    parts, offsets = place_entities(values, 5, "hash").partitions_and_offsets()
    assert (parts == (values % np.uint64(5)).astype(np.int64)).all()
    for part in range(5):
        members = np.flatnonzero(parts == part)
        assert (np.argsort(offsets[members]) == np.argsort(values[members])).all()


def test_one_partition_holds_everyone():
    placement = place_entities(hashes(10), 1, "hash")
    assert placement.counts == [10]


def test_edges_are_split_by_bucket_keeping_their_order():
    edges = PlacedEdges(rel=np.arange(8), lhs_part=np.array([1, 0, 1, 0, 2, 1, 0, 2]),
                        lhs_offset=np.arange(8) * 10, rhs_part=np.array([0, 1, 0, 1, 1, 1, 0, 1]),
                        rhs_offset=np.arange(8) * 100)
    pieces = {(piece.lhs_part, piece.rhs_part): piece.rel.tolist()
              for piece in split_by_bucket(edges, num_rhs_parts=2, num_buckets=6)}
    assert pieces == {(0, 0): [6], (0, 1): [1, 3], (1, 0): [0, 2], (1, 1): [5], (2, 1): [4, 7]}
    piece = next(p for p in split_by_bucket(edges, 2, 6) if (p.lhs_part, p.rhs_part) == (2, 1))
    assert piece.lhs.tolist() == [40, 70] and piece.rhs.tolist() == [400, 700]
