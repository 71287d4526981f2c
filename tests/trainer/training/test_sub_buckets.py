"""Sub-buckets of several devices: every one trained once, no two devices of a round on the
same rows; ranges as `chunk_range` cuts them; a two-device run trains like a one-device run."""

from __future__ import annotations

import pytest
import torch
from support.planted import write_planted_graph

from tessera.config import parse_config
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training.coordinator import train
from tessera.training.multi_device_trainer import range_of, range_starts
from tessera.training.sub_buckets import num_ranges, rows_touched, sub_bucket_rounds
from tessera.vocabulary import chunk_range

CPU = torch.device("cpu")


@pytest.mark.parametrize("num_devices", [1, 2, 3, 4])
@pytest.mark.parametrize("shared_table", [False, True])
def test_rounds_cover_every_sub_bucket_once_without_conflicts(num_devices: int,
                                                              shared_table: bool) -> None:
    rounds = sub_bucket_rounds(num_devices, shared_table)
    count = num_ranges(num_devices, shared_table)
    trained = sorted(sub for one_round in rounds for work in one_round for sub in work)
    assert trained == [(i, j) for i in range(count) for j in range(count)]
    for one_round in rounds:
        assert len(one_round) == num_devices and all(one_round)  # every device busy
        touched = [rows_touched(work, shared_table) for work in one_round]
        for first in range(num_devices):
            for second in range(first + 1, num_devices):
                assert not touched[first] & touched[second]


@pytest.mark.parametrize("rows", [1, 7, 8, 100])
@pytest.mark.parametrize("count", [2, 4, 6])
def test_ranges_are_chunk_ranges(rows: int, count: int) -> None:
    ids = torch.arange(rows)
    ranges = range_of(ids, torch.full_like(ids, rows), count)
    for index in range(count):
        start, stop = chunk_range(rows, index, count)
        assert ranges[start:stop].eq(index).all()
        assert int(range_starts(torch.tensor(index), torch.tensor(rows), count)) == start


@pytest.mark.parametrize("num_partitions", [1, 2])
def test_two_devices_train_every_edge_and_learn_like_one(tmp_path, num_partitions: int) -> None:
    graph = write_planted_graph(tmp_path, num_partitions=num_partitions, num_edges=4000)
    results = {}
    for name, devices in (("one", [CPU]), ("two", [CPU, CPU])):
        config = parse_config(graph.config(checkpoint_path=str(tmp_path / name),
                                           num_epochs=4, eval_fraction=0.05))
        summary = train(config, Reporter("quiet"), devices=devices)
        stats = CheckpointStore(Directory(config.checkpoint_path)).read_stats()
        results[name] = (summary, stats)
    (one, one_stats), (two, two_stats) = results["one"], results["two"]
    assert [s["stats"]["count"] for s in two_stats] == [s["stats"]["count"] for s in one_stats]
    assert two_stats[-1]["stats"]["metrics"]["loss"] < two_stats[0]["stats"]["metrics"]["loss"]
    # Sub-buckets draw their negatives from their own ranges: not the same numbers, but
    # the same loss once trained.
    assert two.last_loss is not None and one.last_loss is not None
    assert two.last_loss == pytest.approx(one.last_loss, rel=0.05)
    assert two.device_seconds is not None and two.device_seconds > 0
