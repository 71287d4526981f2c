"""The schedule: seed-003 nesting, chunk arithmetic, and resuming after a checkpoint."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tessera.config import parse_config
from tessera.errors import BadInputError
from tessera.training.schedule import (
    TrainingSchedule,
    num_edge_chunks,
)
from tessera.vocabulary import ChunkPosition, all_buckets, chunk_range


def make_config(**overrides: Any) -> Any:
    raw = {
        "entities": {"user": {"num_partitions": 4}, "item": {"num_partitions": 1}},
        "relations": [{"name": "likes", "lhs": "user", "rhs": "item"}],
        "dimension": 8,
        "entity_path": "data/entities",
        "edge_paths": ["data/edges_a", "data/edges_b"],
        "checkpoint_path": "model",
    }
    return parse_config({**raw, **overrides})


def small_schedule(bucket_order: str = "random", seed: int = 0) -> TrainingSchedule:
    return TrainingSchedule(num_epochs=2, num_edge_paths=2, num_edge_chunks=3,
                            num_lhs_partitions=3, num_rhs_partitions=3,
                            bucket_order=bucket_order, seed=seed)  # type: ignore[arg-type]


def test_num_edge_chunks_from_config_or_from_the_largest_bucket() -> None:
    assert num_edge_chunks(make_config(num_edge_chunks=5), max_bucket_edges=10**9) == 5
    config = make_config(max_edges_per_chunk=100)
    assert num_edge_chunks(config, max_bucket_edges=250) == 3
    assert num_edge_chunks(config, max_bucket_edges=200) == 2
    assert num_edge_chunks(config, max_bucket_edges=0) == 1


def test_chunk_ranges_partition_the_edges() -> None:
    assert [chunk_range(10, i, 3) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]
    for num_edges, num_chunks in itertools.product(range(13), range(1, 6)):
        ranges = [chunk_range(num_edges, i, num_chunks) for i in range(num_chunks)]
        covered = [edge for start, stop in ranges for edge in range(start, stop)]
        assert covered == list(range(num_edges))
        sizes = [stop - start for start, stop in ranges]
        assert max(sizes) - min(sizes) <= 1
    with pytest.raises(IndexError):
        chunk_range(10, 3, 3)


def test_partition_grid_of_a_config() -> None:
    assert make_config().partition_grid() == (4, 1)
    schedule = TrainingSchedule.from_config(make_config(num_epochs=3, bucket_order="affinity"),
                                            num_edge_chunks=2, seed=5)
    assert schedule == TrainingSchedule(num_epochs=3, num_edge_paths=2, num_edge_chunks=2,
                                        num_lhs_partitions=4, num_rhs_partitions=1,
                                        bucket_order="affinity", seed=5)


@pytest.mark.parametrize("bucket_order", ["random", "affinity", "inside_out", "outside_in"])
def test_steps_cover_everything_once_in_seed_003_nesting(bucket_order: str) -> None:
    schedule = small_schedule(bucket_order)
    steps = list(schedule.steps())
    expected = set(itertools.product(range(2), range(2), range(3), all_buckets(3, 3)))
    keys = [(s.epoch_idx, s.edge_path_idx, s.edge_chunk_idx, s.bucket) for s in steps]
    assert len(keys) == len(expected) == 108 and set(keys) == expected
    # Epoch outermost, then edge set, then chunk (all first chunks, then all second ones...),
    # and the nine buckets of a chunk back to back.
    positions = [step.position for step in steps]
    assert positions == sorted(positions)
    assert [step.position for step in steps[::9]] == list(schedule.positions())


def test_bucket_order_is_fresh_per_chunk_and_reproducible() -> None:
    orders = [small_schedule().buckets(position) for position in small_schedule().positions()]
    assert len({tuple(order) for order in orders}) > 6
    assert list(small_schedule(seed=3).steps()) == list(small_schedule(seed=3).steps())
    assert list(small_schedule(seed=3).steps()) != list(small_schedule(seed=4).steps())


def test_resume_skips_exactly_the_completed_chunks() -> None:
    schedule = small_schedule("inside_out")
    steps = list(schedule.steps())
    assert schedule.num_positions == 12
    for index in range(schedule.num_positions):
        start = schedule.position_at(index)
        assert schedule.index_of(start) == index
        assert list(schedule.steps(start)) == steps[9 * index:]
    completed = ChunkPosition(epoch_idx=0, edge_path_idx=1, edge_chunk_idx=2)
    assert schedule.position_after(completed) == ChunkPosition(1, 0, 0)
    assert schedule.position_after(ChunkPosition(1, 1, 2)) is None


def test_a_finished_run_has_nothing_left() -> None:
    schedule = small_schedule()
    assert list(schedule.steps(ChunkPosition(2, 0, 0))) == []
    assert list(TrainingSchedule(0, 1, 1, 2, 2).steps()) == []


def test_a_position_from_another_layout_is_rejected() -> None:
    with pytest.raises(BadInputError, match="num_edge_chunks"):
        list(small_schedule().steps(ChunkPosition(0, 0, 3)))
    with pytest.raises(BadInputError, match="edge_paths"):
        small_schedule().position_after(ChunkPosition(0, 2, 0))
