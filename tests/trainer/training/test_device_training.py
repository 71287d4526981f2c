"""The device path end to end: the same runs as the CPU path, on `torch.device("cpu")` here
and on a CUDA device where one exists; checkpoints pass between the two paths both ways;
`num_gpus` without enough CUDA devices is refused before any data is read."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.data.graph_data import GraphData
from tessera.errors import EXIT_BAD_INPUT
from tessera.model import EmbeddingModel
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training import coordinator, device_trainer
from tessera.training.coordinator import TrainingSummary, train
from tessera.training.device_copies import PartitionCopier
from tessera.training.devices import cuda_device_count, device_indices, holder_device
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import Partition, PartitionLoader
from tessera.training.schedule import TrainingStep
from tessera.training.worker import ModelState
from tessera.vocabulary import Bucket

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    return write_planted_graph(tmp_path_factory.mktemp("planted"), num_partitions=2,
                               num_edges=4000)


def run(graph: PlantedGraph, name: str, devices: list[torch.device] | None,
        **overrides: Any) -> tuple[TrainingSummary, np.ndarray, np.ndarray]:
    """Train into checkpoint folder `name`; the summary and both partitions' embeddings."""
    settings = {"checkpoint_path": str(graph.root / name), "num_epochs": 2,
                "eval_fraction": 0.05, **overrides}
    config = parse_config(graph.config(**settings))
    summary = train(config, Reporter("quiet"), devices=devices)
    store = CheckpointStore(Directory(config.checkpoint_path))
    lhs, rhs = (store.read_embeddings("node", part)[0] for part in range(2))
    return summary, lhs, rhs


# The default model and Tessera's own: `rotate` (on the CPU path, in closed form with `dot`,
# through autograd with `l2`: RotatE) and TransE-L1.
ROTATE = [{"name": "link", "lhs": "node", "rhs": "node", "operator": "rotate"}]
MODELS = {"translation-dot": {}, "rotate-dot": {"relations": ROTATE},
          "RotatE": {"comparator": "l2", "relations": ROTATE}, "TransE-L1": {"comparator": "l1"}}


@pytest.mark.parametrize("model", MODELS)
def test_the_device_path_trains_what_the_cpu_path_trains(graph: PlantedGraph,
                                                         model: str) -> None:
    # One Hogwild worker and the device path draw the same batches and negatives: only the
    # kernels' and torch's rounding differ.
    cpu_summary, *cpu_tables = run(graph, f"cpu-{model}", devices=[], **MODELS[model])
    device_summary, *device_tables = run(graph, f"device-{model}", devices=[CPU],
                                         **MODELS[model])
    for cpu_table, device_table in zip(cpu_tables, device_tables):
        np.testing.assert_allclose(device_table, cpu_table, atol=1e-4)
    assert device_summary.last_loss == pytest.approx(cpu_summary.last_loss, rel=1e-4)
    assert cpu_summary.device_seconds is None
    assert device_summary.device_seconds is not None and device_summary.device_seconds > 0
    assert device_summary.last_eval is not None and cpu_summary.last_eval is not None
    assert device_summary.last_eval["mrr"] == pytest.approx(cpu_summary.last_eval["mrr"],
                                                            abs=1e-3)


@pytest.mark.parametrize("settings", [{}, {"partition_cache_gb": 1.0, "background_io": True}])
def test_partitions_held_on_the_device_train_as_partitions_copied_there(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]) -> None:
    """Held in the device's memory (`holder_device`), the partitions are trained in place,
    never copied per bucket; the checkpoints are those of the copying path, bit for bit,
    swapped out, cached or written in the background."""
    copies: list[int] = []
    copy = PartitionCopier._copy

    def copying(self: PartitionCopier, partition: Partition) -> Partition:
        made = copy(self, partition)
        copies.append(made is not partition)
        return made

    monkeypatch.setattr(PartitionCopier, "_copy", copying)
    name = "-".join(map(str, settings.values()))
    held, *held_tables = run(graph, f"held-{name}", devices=[CPU], **settings)
    assert copies and not any(copies)
    copies.clear()
    monkeypatch.setattr(coordinator, "holder_device", lambda *_: None)
    copied, *copied_tables = run(graph, f"copied-{name}", devices=[CPU], **settings)
    assert copies and all(copies)
    for table, expected in zip(held_tables, copied_tables):
        np.testing.assert_array_equal(table, expected)
    assert held.last_loss == copied.last_loss
    assert (held.partitions_held_in, copied.partitions_held_in) == ("cpu", "host")


def test_partitions_held_on_the_device_are_written_only_at_checkpoints(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device holds the whole model: a partition a bucket leaves stays there, and each
    is written once per checkpoint, where the host's holder writes every swap."""
    writes: list[int] = []
    write = PartitionLoader.write

    def counting(self: PartitionLoader, *args: Any, **kwargs: Any) -> None:
        writes.append(1)
        write(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLoader, "write", counting)
    held, *held_tables = run(graph, "written-held", devices=[CPU])
    assert len(writes) == 2 * 2  # two partitions, two checkpoints
    writes.clear()
    monkeypatch.setattr(coordinator, "holder_device", lambda *_: None)
    copied, *copied_tables = run(graph, "written-copied", devices=[CPU])
    assert len(writes) > 2 * 2  # and the swaps
    for table, expected in zip(held_tables, copied_tables):
        np.testing.assert_array_equal(table, expected)


def test_partitions_are_held_on_one_gpu_whose_memory_holds_them_well(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to a third of the GPU's memory this process may use (their copy for a background
    checkpoint and training need the rest); else each bucket's are copied there and back."""
    config = parse_config(graph.config(checkpoint_path=str(graph.root / "unused")))
    counts = {"node": [1000, 1000]}  # 2000 rows of (dimension + 1) float32
    model_bytes = 2000 * (config.dimension + 1) * 4
    gpu, other = torch.device("cuda", 0), torch.device("cuda", 1)

    def memory(total: int, fraction: float = 1.0) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda _: SimpleNamespace(total_memory=total))
        monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda _: fraction)

    memory(3 * model_bytes)
    assert holder_device(config, [gpu], counts) == gpu
    assert holder_device(config, [gpu, other], counts) is None
    memory(3 * model_bytes - 3)
    assert holder_device(config, [gpu], counts) is None
    memory(30 * model_bytes, fraction=0.05)  # a process capped below the model's share
    assert holder_device(config, [gpu], counts) is None
    assert holder_device(config, [CPU], counts) == CPU
    assert holder_device(config, [], counts) is None


@pytest.mark.parametrize("first, second", [("cpu", "device"), ("device", "cpu")])
def test_a_checkpoint_resumes_on_the_other_path(graph: PlantedGraph, first: str,
                                                second: str) -> None:
    """One epoch on one path, the second on the other: the same as two on the CPU path."""
    devices = {"cpu": [], "device": [CPU]}
    _, *reference = run(graph, f"both-cpu-{first}", devices=[])
    name = f"{first}-then-{second}"
    run(graph, name, devices=devices[first], num_epochs=1)
    summary, *resumed = run(graph, name, devices=devices[second])
    assert summary.checkpoint_version == 2
    for expected, table in zip(reference, resumed):
        np.testing.assert_allclose(table, expected, atol=1e-4)


def test_each_chunks_edges_are_read_while_the_chunk_before_trains(
        graph: PlantedGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chunk but the run's first is read by the look-ahead thread, and the run trains
    exactly what it trains reading each chunk when it comes."""
    readers: list[str] = []
    read = device_trainer.read_training_edges

    def reading(*args: Any, **kwargs: Any) -> Any:
        readers.append(threading.current_thread().name)
        return read(*args, **kwargs)

    monkeypatch.setattr(device_trainer, "read_training_edges", reading)
    summary, *tables = run(graph, "look-ahead", devices=[CPU])
    buckets = 2 * 4  # two epochs of the 2 x 2 buckets
    assert len(readers) == buckets
    main = threading.current_thread().name
    assert readers.count(main) == 1  # the run's first chunk: nothing trained before it
    assert all(name.startswith("tessera-edges") for name in readers if name != main)
    monkeypatch.setattr(device_trainer.DeviceBucketTrainer, "look_ahead", lambda *_: None)
    readers.clear()
    plain_summary, *plain_tables = run(graph, "no-look-ahead", devices=[CPU])
    assert set(readers) == {threading.current_thread().name}
    for table, plain in zip(tables, plain_tables):
        np.testing.assert_array_equal(table, plain)
    assert summary.last_loss == plain_summary.last_loss


def test_a_look_ahead_for_another_chunk_is_dropped(graph: PlantedGraph) -> None:
    """A look-ahead for a chunk asked for before the one that comes (the order changed) is
    let go."""
    config = parse_config(graph.config(checkpoint_path=str(graph.root / "dropped")))
    data = GraphData(config)
    model = EmbeddingModel(config, data.num_relations)
    trainer = device_trainer.DeviceBucketTrainer(
        config, data, ModelState(model, make_model_optimizer(model, config)), 1, CPU)
    first, second = (TrainingStep(0, 0, 0, Bucket(lhs, 0)) for lhs in (0, 1))
    trainer.look_ahead(second)  # asked for first, then the order changed
    trainer.look_ahead(first)
    edges, _ = trainer._edges_of(first)
    assert trainer.ahead == {}
    expected, _ = trainer._read_edges(first)
    other, _ = trainer._read_edges(second)
    torch.testing.assert_close(edges.lhs.ids, expected.lhs.ids)
    assert len(edges) != len(other) or not torch.equal(edges.lhs.ids, other.lhs.ids)


def test_the_device_path_learns(graph: PlantedGraph) -> None:
    # 20 uniform negatives, fewer than a community's members: with more, most negatives are
    # true neighbours too, and sampled ranks say nothing about what was learned.
    summary, *_ = run(graph, "learns", devices=[CPU], num_epochs=6, eval_num_batch_negs=0,
                      eval_num_uniform_negs=20)
    stats = CheckpointStore(Directory(str(graph.root / "learns"))).read_stats()
    first, last = stats[0], stats[-1]
    assert last["stats"]["metrics"]["loss"] < first["stats"]["metrics"]["loss"]
    assert last["eval_stats_after"]["mrr"] > 1.2 * first["eval_stats_before"]["mrr"]


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_num_gpus_without_a_cuda_device_is_refused_before_reading_data(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "entities: {node: {num_partitions: 1}}\n"
        "relations: [{name: link, lhs: node, rhs: node}]\ndimension: 8\n"
        f"entity_path: {tmp_path / 'missing'}\nedge_paths: [{tmp_path / 'missing-edges'}]\n"
        f"checkpoint_path: {tmp_path / 'checkpoints'}\nnum_gpus: 1\n")
    result = subprocess.run([sys.executable, "-m", "tessera", "train", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_BAD_INPUT
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].count("num_gpus") >= 2  # names the key, and says what to set it to
    assert "no CUDA device was found" in lines[0] and "num_gpus: 0" in lines[0]
    assert not (tmp_path / "checkpoints").exists()


@needs_cuda
@pytest.mark.parametrize("half_precision", [False, True])
def test_one_gpu_trains_like_the_cpu(graph: PlantedGraph, half_precision: bool) -> None:
    cpu_summary, *cpu_tables = run(graph, f"cuda-reference-{half_precision}", devices=[])
    summary, *tables = run(graph, f"cuda-{half_precision}", devices=None, num_gpus=1,
                           half_precision=half_precision)
    assert summary.last_eval is not None and cpu_summary.last_eval is not None
    # Negatives are drawn by the GPU's generator: the same quality, not the same numbers.
    assert summary.last_eval["mrr"] > 0.8 * cpu_summary.last_eval["mrr"]
    assert all(table.dtype == np.float32 for table in tables)  # the checkpoint format
    assert summary.device_peak_bytes is not None and summary.device_peak_bytes > 0


@pytest.mark.parametrize(("rank", "num_gpus", "count", "expected"), [
    (0, 1, 4, [0]), (1, 1, 4, [1]), (5, 1, 4, [1]),  # trainer r on device r % count
    (1, 2, 4, [2, 3]), (1, 2, 3, [2, 0]), (0, 1, 0, [])])
def test_trainers_sharing_a_machine_take_different_devices(rank: int, num_gpus: int,
                                                           count: int,
                                                           expected: list[int]) -> None:
    assert device_indices(rank, num_gpus, count) == expected


PBG_GPU_CONFIG = '''
def get_torchbiggraph_config():
    return dict(
        entity_path="data/FB15k",
        edge_paths=["data/FB15k/freebase_mtr100_mte100-train_partitioned"],
        checkpoint_path="model/fb15k", entities={"all": {"num_partitions": 1}},
        relations=[{"name": "all_edges", "lhs": "all", "rhs": "all",
                    "operator": "complex_diagonal"}],
        dynamic_relations=True, dimension=400, global_emb=False, comparator="dot",
        num_epochs=50, num_uniform_negs=1000, loss_fn="softmax", lr=0.1,
        regularization_coef=1e-3, eval_fraction=0.0, num_gpus=1, batch_size=10000,
        half_precision=True,
    )
'''


def test_pbg_gpu_config_passes_config_check(tmp_path: Path) -> None:
    config = tmp_path / "fb15k_config_gpu.py"
    config.write_text(PBG_GPU_CONFIG)
    result = subprocess.run([sys.executable, "-m", "tessera", "config", "check", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"num_gpus": 1' in result.stdout
