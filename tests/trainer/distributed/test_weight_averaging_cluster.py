"""A distributed job with weight averaging: partitions written by a partition server and the
model written by the first trainer fold into the same means, and the first trainer commits
the averaged version once the last checkpoint is committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import run_cluster, write_config
from support.averaging import assert_holds_the_mean_of_its_last_epochs
from support.planted import write_planted_graph


@pytest.mark.slow
def test_two_trainers_and_a_partition_server_end_with_the_mean(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", 2, num_edges=3000)
    checkpoints = tmp_path / "checkpoints"
    config = write_config(tmp_path / "config.json", graph.config(
        num_epochs=4, weight_averaging=0.5, checkpoint_preservation_interval=1,
        checkpoint_path=str(checkpoints)))
    code, logs = run_cluster(config, "--trainers", "2", "--partition-servers", "1")
    assert code == 0, "\n".join(logs.lines[-30:])
    assert_holds_the_mean_of_its_last_epochs(checkpoints, [3, 4], 2)
    committed = logs.events("trainer-0", "averaged model committed")
    assert [event["checkpoint_version"] for event in committed] == [5], committed
