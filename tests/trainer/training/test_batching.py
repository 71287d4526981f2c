"""Batch preparation: holdout, shuffling, per-worker parts and per-relation batches.

The right-hand side of the test edges is the edge's own index, so that every test can tell
which edges went where.
"""

from __future__ import annotations

import pytest
import torch

from tessera import kernels
from tessera.data.batching import (
    iter_batches,
    permute_in_place,
    random_order,
    shuffle_edges,
    shuffle_edges_in_place,
    split_among_workers,
    split_holdout,
)
from tessera.edgelist import EdgeList, EntityList
from tessera.seeding import stable_seed
from tessera.training.hogwild import empty_shared


def numbered_edges(rel: list[int]) -> EdgeList:
    """Edges with the given relation types; lhs is arbitrary, rhs is the edge's index."""
    return EdgeList.from_ids(torch.tensor(rel), torch.arange(len(rel)) % 5,
                             torch.arange(len(rel)))


def edge_ids(edges: EdgeList) -> list[int]:
    return edges.rhs.ids.tolist()


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_stable_seed_is_a_fixed_function_of_the_key() -> None:
    # Pinned: changing it would change the held-out edges of existing runs.
    assert stable_seed((0, 1, 2)) == 736596180554976673
    assert stable_seed((1, 23)) != stable_seed((12, 3))
    assert 0 <= stable_seed((-5, 2**40)) < 2**63


def test_holdout_has_the_right_size_and_is_disjoint_from_training() -> None:
    edges = numbered_edges([0] * 1000)
    train, held_out = split_holdout(edges, 0.1, seed_key=(0, 1, 2, 3))
    assert len(held_out) == 100 and len(train) == 900
    assert sorted(edge_ids(train) + edge_ids(held_out)) == list(range(1000))
    # Both parts keep the stored order.
    assert edge_ids(train) == sorted(edge_ids(train))
    assert len(split_holdout(numbered_edges([0] * 9), 0.25, (1,))[1]) == 2  # int() rounds down


def test_holdout_is_the_same_every_epoch_and_differs_between_chunks() -> None:
    edges = numbered_edges([0, 1, 2] * 100)
    torch.manual_seed(1)
    first_epoch = split_holdout(edges, 0.2, seed_key=(0, 3, 1, 2))[1]
    torch.manual_seed(2)  # the global RNG has moved on by the next epoch
    second_epoch = split_holdout(edges, 0.2, seed_key=(0, 3, 1, 2))[1]
    other_chunk = split_holdout(edges, 0.2, seed_key=(0, 3, 1, 3))[1]
    assert edge_ids(first_epoch) == edge_ids(second_epoch)
    assert edge_ids(first_epoch) != edge_ids(other_chunk)


def test_no_holdout_keeps_every_edge() -> None:
    train, held_out = split_holdout(numbered_edges([0, 1] * 5), 0.0, (0,))
    assert edge_ids(train) == list(range(10)) and len(held_out) == 0


def test_shuffle_is_a_permutation() -> None:
    shuffled = shuffle_edges(numbered_edges([0, 1] * 50), generator(0))
    assert sorted(edge_ids(shuffled)) == list(range(100))
    assert edge_ids(shuffled) != list(range(100))
    # Relation types travel with their edges.
    assert shuffled.rel.tolist() == [i % 2 for i in edge_ids(shuffled)]


@pytest.fixture(params=["kernels", "torch"])
def with_and_without_kernels(request: pytest.FixtureRequest,
                             monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "kernels" and not kernels.AVAILABLE:
        pytest.skip("the compiled kernels are not built")
    monkeypatch.setattr(kernels, "AVAILABLE", request.param == "kernels")
    return str(request.param)


def copied(edges: EdgeList) -> EdgeList:
    return EdgeList.from_ids(edges.rel.clone(), edges.lhs.ids.clone(), edges.rhs.ids.clone())


def test_a_shuffle_for_worker_processes_lands_in_shared_memory_in_the_in_place_order(
        with_and_without_kernels: str) -> None:
    """Copied into shared memory and shuffled there as threads shuffle a bucket in place: the
    same order either way, and handing the parts to worker processes copies nothing."""
    edges = numbered_edges([0, 1, 2] * 40)
    shared = shuffle_edges(edges, generator(4), empty_shared)
    in_place = shuffle_edges_in_place(copied(edges), generator(4))
    for mine, theirs in ((in_place.rel, shared.rel), (in_place.lhs.ids, shared.lhs.ids),
                         (in_place.rhs.ids, shared.rhs.ids)):
        assert torch.equal(mine, theirs)
        assert theirs.is_shared() and not mine.is_shared()
    assert edge_ids(shared) != list(range(120))
    assert shared.rel.tolist() == [i % 3 for i in edge_ids(shared)]


def test_an_in_place_shuffle_reorders_the_columns_where_they_are(
        with_and_without_kernels: str) -> None:
    edges = numbered_edges([0, 1, 2] * 40)
    columns = (edges.rel, edges.lhs.ids, edges.rhs.ids)
    addresses = [column.data_ptr() for column in columns]
    in_place = shuffle_edges_in_place(edges, generator(4))
    assert [column.data_ptr() for column in
            (in_place.rel, in_place.lhs.ids, in_place.rhs.ids)] == addresses  # no copy
    assert sorted(edge_ids(in_place)) == list(range(120)) != edge_ids(in_place)
    # Every column went through the same permutation.
    assert in_place.rel.tolist() == [i % 3 for i in edge_ids(in_place)]
    assert in_place.lhs.ids.tolist() == [i % 5 for i in edge_ids(in_place)]


def test_with_one_relation_type_the_shuffle_keeps_no_relation_column(
        with_and_without_kernels: str) -> None:
    edges = numbered_edges([3] * 200)
    lhs, rhs = edges.lhs.ids.data_ptr(), edges.rhs.ids.data_ptr()
    shared = shuffle_edges(edges, generator(6), empty_shared)
    in_place = shuffle_edges_in_place(edges, generator(6))
    assert (in_place.lhs.ids.data_ptr(), in_place.rhs.ids.data_ptr()) == (lhs, rhs)
    assert in_place.rel.untyped_storage().nbytes() == 8  # one int64, not a column
    for mine, theirs in ((shared.rel, in_place.rel), (shared.lhs.ids, in_place.lhs.ids),
                         (shared.rhs.ids, in_place.rhs.ids)):
        assert torch.equal(mine, theirs)
    assert in_place.rel.tolist() == [3] * 200 and edge_ids(in_place) != list(range(200))
    assert in_place.lhs.ids.tolist() == [i % 5 for i in edge_ids(in_place)]
    assert len(shuffle_edges_in_place(numbered_edges([]), generator(6))) == 0


def test_without_the_kernels_a_permutation_is_torchs_randperm(
        with_and_without_kernels: str) -> None:
    column = torch.arange(1000)
    permute_in_place([column], generator(9))
    assert sorted(column.tolist()) == list(range(1000))
    assert (torch.equal(column, torch.randperm(1000, generator=generator(9)))
            == (with_and_without_kernels == "torch"))


def test_every_permutation_is_equally_likely(with_and_without_kernels: str) -> None:
    """All 24 orders of 4 edges, 24,000 shuffles: each count within 5 standard deviations
    (31) of 1,000; a biased draw (say, a partner drawn from all 4 positions at every swap,
    whose counts range from 0.8x to 1.4x) would fail."""
    counts: dict[tuple[int, ...], int] = {}
    draws = generator(11)
    for _ in range(24_000):
        column = torch.arange(4)
        permute_in_place([column], draws)
        key = tuple(column.tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 24
    assert all(845 <= count <= 1155 for count in counts.values()), counts


def test_the_same_seed_shuffles_the_same() -> None:
    first, second = torch.arange(10_000), torch.arange(10_000)
    permute_in_place([first], generator(3))
    permute_in_place([second], generator(3))
    assert torch.equal(first, second)
    permute_in_place([second], generator(4))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("size", [0, 1, 7, 1000, 300_001])
def test_the_order_is_torchs_randperm_in_half_the_memory(size: int) -> None:
    order = random_order(size, generator(size))
    assert order.dtype == torch.int32
    assert torch.equal(order.long(), torch.randperm(size, generator=generator(size)))


def test_workers_get_equal_contiguous_parts() -> None:
    parts = split_among_workers(numbered_edges([0] * 10), 3)
    assert [edge_ids(part) for part in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [len(part) for part in split_among_workers(numbered_edges([0] * 2), 4)] == [1, 1, 0, 0]


def test_dynamic_batches_are_contiguous() -> None:
    edges = numbered_edges([0, 3, 1, 1, 2, 0, 3, 2, 1, 0, 2])
    batches = list(iter_batches(edges, 4, dynamic_relations=True, generator=generator(0)))
    assert [edge_ids(batch) for batch in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]


def test_relation_batches_cover_each_edge_once_with_one_type_each() -> None:
    rel = torch.randint(0, 4, (503,), generator=generator(1)).tolist()
    edges = numbered_edges(rel)
    batches = list(iter_batches(edges, 20, dynamic_relations=False, generator=generator(2)))
    assert sorted(i for batch in batches for i in edge_ids(batch)) == list(range(503))
    for batch in batches:
        assert 1 <= len(batch) <= 20
        assert len(set(batch.rel.tolist())) == 1
    for relation in range(4):
        # A type's edges come in their stored order, in full batches but for its last one.
        of_type = [batch for batch in batches if int(batch.rel[0]) == relation]
        assert [i for batch in of_type for i in edge_ids(batch)] == [
            i for i, r in enumerate(rel) if r == relation]
        assert all(len(batch) == 20 for batch in of_type[:-1])


def test_relation_types_are_drawn_in_proportion_to_what_is_left() -> None:
    # Type 0 has two batches' worth of edges, type 1 one. Proportional to what is left, the
    # first batch is of type 0 with p = 2/3, and after that, the second one again with p = 1/2
    # (proportional to the initial counts it would be 2/3, uniform over types 1/2 then 1/2).
    edges = numbered_edges([0] * 20 + [1] * 10)
    trials, first_zero, both_zero = 3000, 0, 0
    for seed in range(trials):
        batches = iter_batches(edges, 10, dynamic_relations=False, generator=generator(seed))
        first, second = int(next(batches).rel[0]), int(next(batches).rel[0])
        first_zero += first == 0
        both_zero += first == 0 and second == 0
    assert first_zero / trials == pytest.approx(2 / 3, abs=0.03)  # about 3.5 sigma
    assert both_zero / first_zero == pytest.approx(1 / 2, abs=0.04)  # about 3.5 sigma


def test_featurized_sides_survive_the_whole_preparation() -> None:
    # Edge i's lhs has features [i, i + 100, ...] (i % 3 + 1 of them), so any mix-up shows.
    lengths = torch.arange(60) % 3 + 1
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    data = torch.cat([torch.arange(int(n)) * 100 + i for i, n in enumerate(lengths)])
    edges = EdgeList(rel=torch.arange(60) % 2, lhs=EntityList.from_features(offsets, data),
                     rhs=EntityList.from_ids(torch.arange(60)))
    train, held_out = split_holdout(edges, 0.1, (0, 0, 0, 0))
    parts = split_among_workers(shuffle_edges(train, generator(0)), 2)
    batches = [batch for part in parts
               for batch in iter_batches(part, 7, dynamic_relations=False,
                                         generator=generator(1))]
    seen = []
    for batch in [held_out, *batches]:
        assert batch.lhs.is_featurized and len(batch.lhs) == len(batch)
        for position, edge in enumerate(edge_ids(batch)):
            start, stop = batch.lhs.offsets[position], batch.lhs.offsets[position + 1]
            assert batch.lhs.data[start:stop].tolist() == [
                k * 100 + edge for k in range(edge % 3 + 1)]
            assert int(batch.rel[position]) == edge % 2
        seen += edge_ids(batch)
    assert sorted(seen) == list(range(60))
