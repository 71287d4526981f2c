"""bench/bench_out_of_core.py's generator and verdict, at a size that takes milliseconds (the
benchmark itself is run by hand: the full size takes half an hour)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import bench_out_of_core  # noqa: E402
from synthetic_graph import GraphSpec  # noqa: E402


def read_ids(path: Path) -> tuple[np.ndarray, np.ndarray]:
    table = pq.read_table(path)
    return table.column("lhs").to_numpy(), table.column("rhs").to_numpy()


def test_generator_writes_the_edges_block_by_block_seeded_and_holds_out_only_known_nodes(
        tmp_path: Path) -> None:
    spec = GraphSpec(edges=10_000, nodes=3_000, seed=5)
    graph = bench_out_of_core.generate(spec, 2_000, tmp_path / "a", block_edges=3_000)
    again = bench_out_of_core.generate(spec, 2_000, tmp_path / "b", block_edges=3_000)

    lhs, rhs = read_ids(graph.train)
    test_lhs, test_rhs = read_ids(graph.test)
    assert graph.num_train == lhs.size == 10_000
    assert 0 < graph.num_test == test_lhs.size <= 2_000
    assert lhs.min() >= 0 and max(lhs.max(), rhs.max()) < spec.nodes
    assert not (lhs == rhs).any()  # no self-loops
    seen = np.union1d(lhs, rhs)
    assert np.isin(test_lhs, seen).all() and np.isin(test_rhs, seen).all()
    # Blocks are distinct draws, not one block repeated.
    assert not np.array_equal(lhs[:3_000], lhs[3_000:6_000])
    for mine, theirs in ((graph.train, again.train), (graph.test, again.test)):
        for column, other in zip(read_ids(mine), read_ids(theirs)):
            np.testing.assert_array_equal(column, other)


def test_verdict_compares_the_training_peak_with_two_partitions_a_bucket_and_the_fixed_cost(
        ) -> None:
    nodes, edges, partitions, dimension = 20_000_000, 200_000_000, 32, 100
    fixed = 300_000_000
    two_partitions = 2 * (nodes // partitions) * (dimension + 1) * 4
    bucket = -(-edges // partitions ** 2) * 3 * 8
    bound = two_partitions + bucket + fixed

    within = bench_out_of_core.judge(8_080_000_000, bound, fixed, nodes, edges, partitions,
                                     dimension)
    assert within.bound == bound
    assert within.within
    assert within.ratio == pytest.approx(8_080_000_000 / bound)

    assert bench_out_of_core.within_text(bound - 1_500_000, within) == "yes, by 1.5 MB"

    over = bench_out_of_core.judge(8_080_000_000, bound + 1, fixed, nodes, edges, partitions,
                                   dimension)
    assert not over.within
    assert bench_out_of_core.within_text(bound + 1, over) == "NO, over by 0.0 MB"
