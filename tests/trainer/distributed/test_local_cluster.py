"""Whole distributed jobs on 127.0.0.1 (`tessera train --local-cluster`): quality against
one machine, exclusive partitions, a killed trainer and the restart, storage swapping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import pytest
from cluster_support import (
    CLUSTER_TIMEOUT_S,
    RoleLogs,
    check_no_partition_held_twice,
    cluster_command,
    run_cluster,
    write_config,
)
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT
from tessera.evaluation.command import evaluate_checkpoint
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.storage.lease import LEASE_FILE
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
NUM_EPOCHS = 8
TWO_BY_TWO = ("--trainers", "2", "--partition-servers", "2")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    return write_planted_graph(tmp_path_factory.mktemp("planted"), 4)


def filtered_test_mrr(graph: PlantedGraph, checkpoint_path: Path, **overrides: Any) -> float:
    config = parse_config(graph.config(edge_paths=[str(graph.root / "test")],
                                       checkpoint_path=str(checkpoint_path), **overrides))
    return evaluate_checkpoint(config, QUIET, filtered=True,
                               filter_paths=[str(graph.root / "train"),
                                             str(graph.root / "test")])["mrr"]


@pytest.fixture(scope="module")
def single_machine_mrr(graph: PlantedGraph, tmp_path_factory: pytest.TempPathFactory) -> float:
    checkpoints = tmp_path_factory.mktemp("single") / "checkpoints"
    train(parse_config(graph.config(checkpoint_path=str(checkpoints))), QUIET)
    return filtered_test_mrr(graph, checkpoints)


def test_two_trainers_and_two_partition_servers_train_as_well_as_one_machine(
        graph: PlantedGraph, single_machine_mrr: float, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    config = write_config(tmp_path / "config.json",
                          graph.config(checkpoint_path=str(checkpoints)))
    code, logs = run_cluster(config, *TWO_BY_TWO)
    assert code == 0, "\n".join(logs.lines[-30:])
    # 400 candidates: a random scorer has a filtered MRR of about 0.016.
    mrr = filtered_test_mrr(graph, checkpoints)
    assert mrr > 0.08 and abs(mrr - single_machine_mrr) < 0.05, (mrr, single_machine_mrr)

    buckets = check_no_partition_held_twice(logs)
    assert sum(buckets.values()) == NUM_EPOCHS * 16
    assert min(buckets["trainer-0"], buckets["trainer-1"]) >= 16, buckets  # both worked

    store = CheckpointStore(Directory(str(checkpoints)))
    stats = store.read_stats()
    assert Counter((r["epoch_idx"], r["lhs_partition"], r["rhs_partition"]) for r in stats) \
        == {(e, lhs, rhs): 1 for e in range(NUM_EPOCHS) for lhs in range(4) for rhs in range(4)}
    commits = [e["checkpoint_version"] for e in logs.events("trainer-0", "checkpoint committed")]
    assert commits == list(range(1, NUM_EPOCHS + 1))
    # Trainer 0 reports the whole job, as the operator expects of it.
    finished = logs.events("trainer-0", "training finished")[-1]
    assert finished["edges"] == sum(r["stats"]["count"] for r in stats)
    assert logs.events("trainer-0", "train done")[-1]["buckets_done"] == NUM_EPOCHS * 16
    for trainer in ("trainer-0", "trainer-1"):
        traffic = logs.events(trainer, "partition traffic")[-1]
        # A swap moves whole partitions: 100 rows x (16 floats + 1 Adagrad sum) x 4 bytes.
        assert traffic["bytes_received"] % (100 * 17 * 4) == 0 and traffic["swaps"] > 0

    assert store.read_metadata()["iteration/epoch_idx"] == NUM_EPOCHS - 1
    with h5py.File(checkpoints / f"embeddings_node_3.v{NUM_EPOCHS}.h5", "r") as file:
        assert file["embeddings"].shape == (100, 16)
        assert "optimizer/state_dict" in file
    with h5py.File(checkpoints / f"model.v{NUM_EPOCHS}.h5", "r") as file:
        assert file["model/relations/0/operator/rhs/translation"].shape == (16,)
        assert file["model/relations/0/operator/rhs/translation"][()].any()  # it was trained


def test_without_partition_servers_partitions_are_swapped_through_storage(
        graph: PlantedGraph, single_machine_mrr: float, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    config = write_config(tmp_path / "config.json",
                          graph.config(checkpoint_path=str(checkpoints)))
    code, logs = run_cluster(config, "--trainers", "2", "--partition-servers", "0")
    assert code == 0, "\n".join(logs.lines[-30:])
    check_no_partition_held_twice(logs)
    assert not logs.of("partition-server-0")
    mrr = filtered_test_mrr(graph, checkpoints)
    assert mrr > 0.08 and abs(mrr - single_machine_mrr) < 0.05, (mrr, single_machine_mrr)
    leftovers = [p.name for p in checkpoints.iterdir() if f".v{NUM_EPOCHS}." not in p.name
                 and p.suffix == ".h5"]
    assert leftovers == []


def test_rotate_trains_across_trainers_with_its_phases_shared(graph: PlantedGraph,
                                                              tmp_path: Path) -> None:
    """RotatE (`rotate`, `l2`, Tessera's own): the parameter server shares the phases."""
    checkpoints = tmp_path / "checkpoints"
    model = {"comparator": "l2", "relations": [
        {"name": "link", "lhs": "node", "rhs": "node", "operator": "rotate"}]}
    config = write_config(tmp_path / "config.json",
                          graph.config(checkpoint_path=str(checkpoints), **model))
    code, logs = run_cluster(config, "--trainers", "2", "--partition-servers", "0")
    assert code == 0, "\n".join(logs.lines[-30:])
    mrr = filtered_test_mrr(graph, checkpoints, **model)
    assert mrr > 0.08, mrr  # random: about 0.016
    with h5py.File(checkpoints / f"model.v{NUM_EPOCHS}.h5", "r") as file:
        assert file["model/relations/0/operator/rhs/phase"].shape == (8,)
        assert file["model/relations/0/operator/rhs/phase"][()].any()  # it was trained


def kill_trainer_after_checkpoint(command: list[str], version: int) -> tuple[int, float,
                                                                             RoleLogs]:
    """Run the cluster; SIGKILL trainer-1 once trainer 0 committed `version`. Returns the
    exit code, the seconds from the kill to the cluster's exit, and the logs."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines: list[str] = []
    pids: dict[str, int] = {}
    killed_at = None
    for line in process.stderr:
        lines.append(line.rstrip("\n"))
        if line.startswith("{") and '"role started"' in line:
            record = json.loads(line)
            pids[record["role"]] = record["pid"]
        elif killed_at is None and line.startswith("[trainer-0] {") \
                and '"checkpoint committed"' in line \
                and json.loads(line.split(" ", 1)[1])["checkpoint_version"] >= version:
            os.kill(pids["trainer-1"], signal.SIGKILL)
            killed_at = time.monotonic()
    process.wait(timeout=CLUSTER_TIMEOUT_S)
    assert killed_at is not None, "\n".join(lines[-30:])
    return process.returncode, time.monotonic() - killed_at, RoleLogs(lines)


@pytest.mark.slow
def test_a_killed_trainer_stops_the_job_and_the_restart_resumes_from_the_checkpoint(
        graph: PlantedGraph, tmp_path: Path) -> None:
    epochs = 10
    checkpoints = tmp_path / "checkpoints"
    config = write_config(tmp_path / "config.json",
                          graph.config(num_epochs=epochs, checkpoint_path=str(checkpoints)))
    command = cluster_command(config, *TWO_BY_TWO, "--peer-timeout", "3")
    code, seconds, logs = kill_trainer_after_checkpoint(command, version=2)
    assert code == EXIT_TRANSIENT, "\n".join(logs.lines[-30:])
    assert seconds < 30, f"the job took {seconds:.1f} s to stop"
    for role in ("lock-server", "partition-server-0", "partition-server-1", "trainer-0"):
        errors = logs.errors(role)
        assert errors and "lost trainer-1 (pid" in errors[-1], (role, logs.of(role)[-5:])
    check_no_partition_held_twice(logs, finished=False)
    store = CheckpointStore(Directory(str(checkpoints)))
    killed_version = store.current_version()
    assert 2 <= killed_version < epochs
    assert not (checkpoints / LEASE_FILE).exists()  # the aborted job's lock server let go

    code, logs = run_cluster(config, *TWO_BY_TWO)
    assert code == 0, "\n".join(logs.lines[-30:])
    start = logs.events("lock-server", "lock server waiting for peers")[-1]
    assert start["checkpoint_version"] == killed_version
    commits = [e["checkpoint_version"] for e in logs.events("trainer-0", "checkpoint committed")]
    assert commits == list(range(killed_version + 1, epochs + 1))
    # Every epoch's buckets are recorded exactly once: nothing lost, nothing trained twice.
    epochs_recorded = Counter(r["epoch_idx"] for r in store.read_stats())
    assert epochs_recorded == {epoch: 16 for epoch in range(epochs)}
    assert store.read_metadata()["iteration/epoch_idx"] == epochs - 1


def test_bad_input_fails_every_role_with_exit_code_65(graph: PlantedGraph,
                                                      tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json",
                          graph.config(entity_path=str(tmp_path / "missing"),
                                       checkpoint_path=str(tmp_path / "checkpoints")))
    code, logs = run_cluster(config, "--trainers", "1", "--partition-servers", "1")
    assert code == EXIT_BAD_INPUT
    for role in ("lock-server", "partition-server-0", "trainer-0"):
        assert any("missing" in line for line in logs.errors(role)), logs.of(role)
