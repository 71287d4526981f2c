"""Whole runs with reciprocal relations and degree negatives, on every path that trains: one
Hogwild worker (closed form and the compiled kernels), two worker processes, the device path
and two devices (on the CPU); then evaluation, export and `neighbors` of the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.evaluation.command import evaluate_checkpoint
from tessera.exporting import export_checkpoint
from tessera.progress import Reporter
from tessera.querying.trained import TrainedModel
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.entities import write_dynamic_relation_count, write_entity_names
from tessera.storage.fs import Directory
from tessera.training import hogwild
from tessera.training.coordinator import TrainingSummary, train

QUIET = Reporter("quiet")
CPU = torch.device("cpu")
# Both options, and degree negatives in the evaluation during training too.
OPTIONS = {"reciprocal_relations": True, "num_degree_negs": 10, "eval_num_degree_negs": 10,
           "num_epochs": 4, "eval_fraction": 0.05}


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    graph = write_planted_graph(tmp_path_factory.mktemp("planted"), 2, num_edges=4000)
    entities = Directory(str(graph.root / "entities"))
    for part in range(2):  # entity i is "n{i}", as an importer names them
        write_entity_names(entities, "node", part, [f"n{i}" for i in range(part, 400, 2)])
    write_dynamic_relation_count(entities, 1)  # read with dynamic_relations only
    return graph


def run(graph: PlantedGraph, name: str, devices: list[torch.device] | None = None,
        **overrides: Any) -> tuple[dict[str, Any], TrainingSummary]:
    config = graph.config(checkpoint_path=str(graph.root / name), **OPTIONS, **overrides)
    return config, train(parse_config(config), QUIET, devices=devices)


def filtered_test_mrr(graph: PlantedGraph, config: dict[str, Any]) -> float:
    test = parse_config({**config, "edge_paths": [str(graph.root / "test")]})
    return evaluate_checkpoint(test, QUIET, filtered=True,
                               filter_paths=[str(graph.root / "train"),
                                             str(graph.root / "test")])["mrr"]


def embeddings(config: dict[str, Any]) -> list[np.ndarray]:
    store = CheckpointStore(Directory(config["checkpoint_path"]))
    return [store.read_embeddings("node", part)[0] for part in range(2)]


@pytest.fixture(scope="module")
def one_worker(graph: PlantedGraph) -> tuple[dict[str, Any], TrainingSummary]:
    return run(graph, "cpu", devices=[])


def test_one_worker_learns_and_saves_the_inverse_relation(
        graph: PlantedGraph, one_worker: tuple[dict[str, Any], TrainingSummary]) -> None:
    config, summary = one_worker
    assert filtered_test_mrr(graph, config) > 0.08  # 400 candidates: random about 0.016
    assert summary.last_eval is not None and summary.last_eval["count"] > 0
    checkpoint = Path(config["checkpoint_path"])
    with h5py.File(checkpoint / f"model.v{summary.checkpoint_version}.h5", "r") as file:
        for index in (0, 1):  # link, then its inverse
            dataset = file[f"model/relations/{index}/operator/rhs/translation"]
            assert dataset.attrs["state_dict_key"] == f"rhs_operators.{index}.translation"
            assert np.abs(dataset[()]).sum() > 0
        assert "model/relations/2/operator/rhs/translation" not in file
    saved = json.loads((checkpoint / "config.json").read_text())
    assert saved["reciprocal_relations"] is True and saved["num_degree_negs"] == 10


def test_export_and_neighbors_know_the_inverse(
        graph: PlantedGraph, one_worker: tuple[dict[str, Any], TrainingSummary],
        tmp_path: Path) -> None:
    config, _ = one_worker
    export_checkpoint(parse_config(config), str(tmp_path / "out"), QUIET)
    rows = [line.split("\t")[:3] for line in
            (tmp_path / "out" / "relation_parameters.tsv").read_text().splitlines()]
    assert rows == [["link", "rhs", "translation"], ["link_inverse", "rhs", "translation"]]
    # (?, link, n3) is ranked as (n3, link_inverse, ?): with `dot` and no global embeddings,
    # candidate x scores n3 . (x + the inverse's translation).
    lhs = TrainedModel(parse_config(config)).neighbors("n3", 5, relation="link", side="lhs")
    tables = embeddings(config)
    checkpoint = Path(config["checkpoint_path"])
    (model_file,) = checkpoint.glob("model.v*.h5")
    with h5py.File(model_file, "r") as file:
        inverse = file["model/relations/1/operator/rhs/translation"][()]
    query = tables[1][1]  # n3: partition 1, offset 1
    for neighbor in lhs:
        index = int(neighbor.name[1:])
        candidate = tables[index % 2][index // 2]
        assert neighbor.score == pytest.approx(float(query @ (candidate + inverse)), rel=1e-4)
    assert [n.score for n in lhs] == sorted((n.score for n in lhs), reverse=True)


def test_the_device_path_trains_what_one_worker_trains(
        graph: PlantedGraph, one_worker: tuple[dict[str, Any], TrainingSummary]) -> None:
    """One Hogwild worker and the device path draw the same batches and negatives (degree
    ones included) and score both directions alike: only rounding differs."""
    cpu_config, cpu_summary = one_worker
    device_config, device_summary = run(graph, "device", devices=[CPU])
    for cpu_table, device_table in zip(embeddings(cpu_config), embeddings(device_config)):
        np.testing.assert_allclose(device_table, cpu_table, atol=1e-4)
    assert device_summary.last_loss == pytest.approx(cpu_summary.last_loss, rel=1e-4)
    assert device_summary.last_eval is not None and cpu_summary.last_eval is not None
    assert device_summary.last_eval["mrr"] == pytest.approx(cpu_summary.last_eval["mrr"],
                                                            abs=1e-3)


def test_with_dynamic_relations_the_device_path_trains_what_one_worker_trains(
        graph: PlantedGraph) -> None:
    """Dynamic relations: both directions' batches of a bucket (0, 1) read the partitions
    the other way round, and each relation type has two rows of each operator."""
    dynamic = {"dynamic_relations": True}
    cpu_config, cpu_summary = run(graph, "dynamic-cpu", devices=[], **dynamic)
    device_config, device_summary = run(graph, "dynamic-device", devices=[CPU], **dynamic)
    for cpu_table, device_table in zip(embeddings(cpu_config), embeddings(device_config)):
        np.testing.assert_allclose(device_table, cpu_table, atol=1e-4)
    assert device_summary.last_loss == pytest.approx(cpu_summary.last_loss, rel=1e-4)
    assert filtered_test_mrr(graph, cpu_config) > 0.08
    (model_file,) = Path(cpu_config["checkpoint_path"]).glob("model.v*.h5")
    with h5py.File(model_file, "r") as file:
        assert file["model/relations/0/operator/lhs/translations"].shape == (2, 16)


@pytest.mark.slow
def test_two_worker_processes_and_two_devices_learn(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_HOGWILD", "processes")
    monkeypatch.setattr(hogwild, "start_method", lambda: "fork")
    hogwild_config, _ = run(graph, "processes", devices=[], workers=2)
    assert filtered_test_mrr(graph, hogwild_config) > 0.08
    devices_config, _ = run(graph, "two-devices", devices=[CPU, CPU])
    assert filtered_test_mrr(graph, devices_config) > 0.08


def test_raw_evaluation_draws_by_degree_and_ranks_lhs_through_the_inverse(
        graph: PlantedGraph, one_worker: tuple[dict[str, Any], TrainingSummary]) -> None:
    config, _ = one_worker
    test = parse_config({**config, "edge_paths": [str(graph.root / "test")]})
    result = evaluate_checkpoint(test, QUIET)
    assert result["mode"] == "raw" and result["count"] > 0 and result["mrr"] > 0.1
    assert "lhs (as the rhs of the relation's inverse) and rhs" in result["ranked_against"]
    assert "10 negatives drawn by degree" in result["ranked_against"]
