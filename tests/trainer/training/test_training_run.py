"""Whole training runs on a planted graph: quality, partitions, checkpoints and resuming."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.data.graph_data import GraphData
from tessera.edgelist import EdgeList
from tessera.evaluation.command import evaluate_checkpoint
from tessera.process_age import process_age
from tessera.progress import Reporter
from tessera.seeding import stable_seed
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training import bucket_trainer, hogwild
from tessera.training.bucket_trainer import BucketOutcome
from tessera.training.coordinator import EarlyStopping, train
from tessera.training.partitions import PartitionLoader
from tessera.training.schedule import TrainingStep
from tessera.training.worker import ModelState, WorkerStats, WorkerTask, train_part
from tessera.vocabulary import Bucket

QUIET = Reporter("quiet")


def filtered_test_mrr(graph: PlantedGraph, **overrides: object) -> float:
    config = parse_config(graph.config(edge_paths=[str(graph.root / "test")], **overrides))
    metrics = evaluate_checkpoint(config, QUIET, filtered=True,
                                  filter_paths=[str(graph.root / "train"),
                                                str(graph.root / "test")])
    return metrics["mrr"]


@pytest.fixture(scope="module")
def trained_graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, PlantedGraph]:
    graphs = {}
    for partitions in (1, 4):
        graph = write_planted_graph(tmp_path_factory.mktemp(f"p{partitions}"), partitions)
        train(parse_config(graph.config()), QUIET)
        graphs[partitions] = graph
    return graphs


def test_planted_structure_is_learned_with_one_and_four_partitions(
        trained_graphs: dict[int, PlantedGraph]) -> None:
    # 400 candidates: a random scorer has a filtered MRR of about 0.016.
    mrr = {p: filtered_test_mrr(graph) for p, graph in trained_graphs.items()}
    assert mrr[1] > 0.08, mrr
    assert mrr[4] > 0.08, mrr
    assert abs(mrr[1] - mrr[4]) < 0.05, mrr


def test_checkpoint_files_follow_the_format(trained_graphs: dict[int, PlantedGraph]) -> None:
    graph = trained_graphs[4]
    checkpoints = graph.root / "checkpoints"
    version = int((checkpoints / "checkpoint_version.txt").read_text())
    assert version == 8  # one checkpoint per epoch (one edge set, one chunk)
    assert json.loads((checkpoints / "config.json").read_text())["dimension"] == 16
    for part in range(4):
        with h5py.File(checkpoints / f"embeddings_node_{part}.v{version}.h5", "r") as file:
            assert file.attrs["format_version"] == 1
            assert file["embeddings"].shape == (100, 16)
            assert file["embeddings"].dtype == np.float32
            assert file["optimizer/state_dict"].dtype == np.dtype("V1")  # opaque bytes, as PBG
            assert file.attrs["iteration/epoch_idx"] == 7
    with h5py.File(checkpoints / f"model.v{version}.h5", "r") as file:
        translation = file["model/relations/0/operator/rhs/translation"]
        assert translation.shape == (16,)
        assert translation.attrs["state_dict_key"] == "rhs_operators.0.translation"
    older = [p.name for p in checkpoints.iterdir() if ".v7." in p.name]
    assert older == [], "the previous version must be cleaned up"
    stats = [json.loads(line) for line in
             (checkpoints / "training_stats.json").read_text().splitlines()]
    assert len(stats) == 8 * 16  # one record per bucket per epoch
    assert all(np.isfinite(record["stats"]["metrics"]["loss"]) for record in stats)


def test_loss_decreases(trained_graphs: dict[int, PlantedGraph]) -> None:
    checkpoints = trained_graphs[1].root / "checkpoints"
    stats = [json.loads(line) for line in
             (checkpoints / "training_stats.json").read_text().splitlines()]
    losses = [record["stats"]["metrics"]["loss"] for record in stats]
    # Softmax over 100 negatives on both sides: a random model scores about 2 ln(101) = 9.2;
    # many negatives share the positive's community, so the loss cannot approach zero.
    assert losses[0] < 9.5 and losses[-1] < 0.75 * losses[0], losses
    assert all(later <= earlier + 0.05 for earlier, later in zip(losses, losses[1:])), losses


def test_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", 2, num_edges=3000)
    straight = graph.config(num_epochs=4, checkpoint_path=str(tmp_path / "straight"))
    train(parse_config(straight), QUIET)
    resumed = graph.config(num_epochs=2, checkpoint_path=str(tmp_path / "resumed"))
    train(parse_config(resumed), QUIET)
    summary = train(parse_config({**resumed, "num_epochs": 4}), QUIET)
    assert summary.checkpoint_version == 4
    for part in range(2):
        a, _ = CheckpointStore(Directory(straight["checkpoint_path"])).read_embeddings("node", part)
        b, _ = CheckpointStore(Directory(resumed["checkpoint_path"])).read_embeddings("node", part)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_finished_run_does_nothing_more(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 1, num_edges=1000)
    config = parse_config(graph.config(num_epochs=2))
    train(config, QUIET)
    summary = train(config, QUIET)
    assert summary.edges == 0 and summary.checkpoint_version == 2


def test_start_up_and_checkpoints_are_timed_apart(tmp_path: Path) -> None:
    """The summary says how old the process was when training began, and how long the
    checkpoints took of the training time."""
    graph = write_planted_graph(tmp_path, 2, num_edges=1000)
    before = process_age()
    summary = train(parse_config(graph.config(num_epochs=2)), QUIET)
    after = process_age()
    assert summary.startup_seconds is not None
    assert before < summary.startup_seconds <= after - summary.seconds + 0.05
    assert 0 < summary.checkpoint_seconds < summary.seconds


@pytest.mark.parametrize(("kind", "method"), [("threads", None), ("processes", "fork"),
                                              ("processes", "spawn")])
def test_two_hogwild_workers_train_as_well(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           kind: str, method: str | None) -> None:
    monkeypatch.setenv("TESSERA_HOGWILD", kind)
    if method is not None:  # whatever other threads the test session runs
        monkeypatch.setattr(hogwild, "start_method", lambda: method)
    graph = write_planted_graph(tmp_path, 1)
    train(parse_config(graph.config(workers=2)), QUIET)
    assert filtered_test_mrr(graph) > 0.08


@pytest.mark.parametrize(("operator", "comparator", "parameter"), [
    ("rotate", "l2", "phase"), ("translation", "l1", "translation")],
    ids=["RotatE", "TransE-L1"])
def test_tessera_only_models_learn_and_save_their_parameters(
        tmp_path: Path, operator: str, comparator: str, parameter: str) -> None:
    """Whole runs of two Hogwild workers (processes: the compiled loop covers neither); the
    model file names the operator's parameter in PBG's pattern, and evaluation reads it."""
    graph = write_planted_graph(tmp_path, 2)
    model = {"comparator": comparator, "relations": [
        {"name": "link", "lhs": "node", "rhs": "node", "operator": operator}]}
    summary = train(parse_config(graph.config(workers=2, **model)), QUIET)
    assert filtered_test_mrr(graph, **model) > 0.08  # random: about 0.016
    with h5py.File(graph.root / "checkpoints" / f"model.v{summary.checkpoint_version}.h5",
                   "r") as file:
        dataset = file[f"model/relations/0/operator/rhs/{parameter}"]
        assert dataset.attrs["state_dict_key"] == f"rhs_operators.0.{parameter}"
        assert np.abs(dataset[()]).sum() > 0  # trained away from the identity


def test_held_out_edges_are_ranked_before_and_after_each_bucket(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=3000)
    train(parse_config(graph.config(num_epochs=3, eval_fraction=0.1)), QUIET)
    stats = [json.loads(line) for line in
             (graph.root / "checkpoints" / "training_stats.json").read_text().splitlines()]
    first, last = stats[0], stats[-1]
    for key in ("mrr", "hits@1", "hits@10", "hits@50", "mean_rank", "auc", "loss"):
        assert key in first["eval_stats_before"] and key in last["eval_stats_after"]
    assert last["eval_stats_after"]["mrr"] > first["eval_stats_before"]["mrr"]


def test_every_kth_epoch_is_preserved_as_a_loadable_checkpoint(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2, num_edges=1000)
    train(parse_config(graph.config(num_epochs=4, checkpoint_preservation_interval=2)), QUIET)
    checkpoints = graph.root / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir() if p.is_dir()) == ["epoch_2", "epoch_4"]
    for epochs, directory in ((2, "epoch_2"), (4, "epoch_4")):
        store = CheckpointStore(Directory(str(checkpoints / directory)))
        assert store.read_metadata()["iteration/epoch_idx"] == epochs - 1
        assert store.read_embeddings("node", 1)[0].shape == (200, 16)


def test_init_path_starts_from_another_checkpoint(tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path, 2)
    evaluation = {"eval_fraction": 0.1, "eval_num_batch_negs": 50, "eval_num_uniform_negs": 50}
    first = graph.config(num_epochs=6, checkpoint_path=str(tmp_path / "a"), **evaluation)
    train(parse_config(first), QUIET)
    fresh = graph.config(num_epochs=1, checkpoint_path=str(tmp_path / "b"), **evaluation)
    train(parse_config(fresh), QUIET)
    warm = {**fresh, "checkpoint_path": str(tmp_path / "c"), "init_path": str(tmp_path / "a")}
    train(parse_config(warm), QUIET)

    def first_mrr(path: str) -> float:
        return CheckpointStore(Directory(path)).read_stats()[0]["eval_stats_before"]["mrr"]

    trained = CheckpointStore(Directory(str(tmp_path / "a"))).read_stats()[-1]
    assert first_mrr(warm["checkpoint_path"]) > 2 * first_mrr(fresh["checkpoint_path"])
    assert first_mrr(warm["checkpoint_path"]) > 0.8 * trained["eval_stats_after"]["mrr"]


def outcome_with_eval_loss(loss: float) -> BucketOutcome:
    step = TrainingStep(0, 0, 0, Bucket(0, 0))
    return BucketOutcome(step=step, count=1, loss=1.0, regularization=0.0, seconds=0.0,
                         eval_before=None, eval_after={"loss": loss})


def test_early_stopping_stops_after_an_epoch_with_a_worse_held_out_loss() -> None:
    stopping = EarlyStopping()
    assert not stopping.epoch_ended()  # nothing held out: never stops
    for losses, stop in (([3.0, 1.0], False), ([1.5, 1.5], False), ([1.6, 1.8], True)):
        stopping.add([outcome_with_eval_loss(loss) for loss in losses])
        assert stopping.epoch_ended() is stop


def test_early_stopping_ends_a_run_early(tmp_path: Path) -> None:
    # One community: the edges are random, so training can only memorise them and the
    # held-out loss soon climbs.
    graph = write_planted_graph(tmp_path, 1, num_edges=2000, num_communities=1)
    config = graph.config(num_epochs=30, eval_fraction=0.2, early_stopping=True,
                          dimension=64, lr=0.5)
    summary = train(parse_config(config), QUIET)
    assert 2 <= summary.checkpoint_version < 30


def test_background_io_writes_the_same_checkpoints(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Swapped-out partitions written by the background thread (and taken back from memory
    when wanted again before their write ended) give the checkpoint the foreground gives."""
    writers: dict[bool, set[str]] = {False: set(), True: set()}
    write = PartitionLoader.write

    def recorded_write(self, *args, **kwargs) -> None:
        writers[background].add(threading.current_thread().name.split("_")[0])
        write(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLoader, "write", recorded_write)
    tables = []
    for background in (False, True):
        graph = write_planted_graph(tmp_path / str(background), 4, num_edges=2000)
        train(parse_config(graph.config(num_epochs=2, background_io=background)), QUIET)
        checkpoints = graph.root / "checkpoints"
        tables.append([h5py.File(checkpoints / f"embeddings_node_{part}.v2.h5")["embeddings"][...]
                       for part in range(4)])
    assert writers == {False: {"MainThread"},
                       True: {"MainThread", "tessera-partition-writer"}}
    for foreground_table, background_table in zip(*tables):
        np.testing.assert_array_equal(background_table, foreground_table)


def test_a_failed_background_write_stops_the_run(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    graph = write_planted_graph(tmp_path, 4, num_edges=2000)

    def failing_write(self, *args, **kwargs) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(PartitionLoader, "write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        train(parse_config(graph.config(num_epochs=1, background_io=True)), QUIET)
    assert not (graph.root / "checkpoints" / "checkpoint_version.txt").exists()


def test_partitions_are_read_and_drawn_straight_into_memory_workers_share(
        trained_graphs: dict[int, PlantedGraph], monkeypatch: pytest.MonkeyPatch) -> None:
    """No private copy of a whole partition on the way to the workers (the 8-partition
    benchmark's main process held one per swap)."""
    monkeypatch.setenv("TESSERA_HOGWILD", "processes")
    graph = trained_graphs[4]
    config = parse_config(graph.config(seed=3))
    store = CheckpointStore(Directory(config.checkpoint_path))
    counts = {"node": [len(range(part, graph.num_entities, 4)) for part in range(4)]}
    loader = PartitionLoader(config, counts, store, None)
    loaded = loader.load(("node", 1), store.current_version())
    expected, _ = store.read_embeddings("node", 1)
    assert loaded.embeddings.is_shared()
    np.testing.assert_array_equal(loaded.embeddings.numpy(), expected)
    fresh = loader.load(("node", 1), 0)
    assert fresh.embeddings.is_shared()
    generator = torch.Generator().manual_seed(stable_seed((3, 0, 1)))
    drawn = torch.randn(counts["node"][1], config.dimension, generator=generator)
    torch.testing.assert_close(fresh.embeddings, drawn * config.init_scale, rtol=0, atol=0)


def test_one_copy_of_a_bucket_stays_in_memory_while_it_trains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunk as read is either dropped before the workers start or is itself what they
    train on (shuffled in place): with one partition a bucket is the whole edge list, and
    holding it twice doubled the trainer's largest allocation."""
    read_chunk = GraphData.read_chunk
    as_read: list[weakref.ref[torch.Tensor]] = []

    def recording_read_chunk(self: GraphData, *args: object) -> EdgeList:
        edges = read_chunk(self, *args)
        as_read.append(weakref.ref(edges.lhs.ids))
        return edges

    def checking_train_part(state: ModelState, task: WorkerTask) -> WorkerStats:
        held = as_read[-1]() if as_read else None
        # Shuffled in place, the chunk's columns may have swapped roles (one relation type).
        trained = {column.untyped_storage().data_ptr()
                   for column in (task.edges.rel, task.edges.lhs.ids, task.edges.rhs.ids)}
        assert as_read and (held is None or held.untyped_storage().data_ptr() in trained), \
            "the unshuffled chunk is still held"
        return train_part(state, task)

    monkeypatch.setattr(GraphData, "read_chunk", recording_read_chunk)
    monkeypatch.setattr(bucket_trainer, "train_part", checking_train_part)
    graph = write_planted_graph(tmp_path, 2)
    summary = train(parse_config(graph.config(workers=1, num_epochs=1)), QUIET)
    assert summary.edges > 0 and len(as_read) == 4


def test_the_seed_decides_what_a_run_draws(tmp_path: Path) -> None:
    """With one worker a run repeats exactly; another `seed` trains another model (initial
    embeddings, shuffles and negatives are all drawn from it)."""
    graph = write_planted_graph(tmp_path / "graph", 1)

    def trained(seed: int, name: str) -> np.ndarray:
        config = parse_config(graph.config(num_epochs=1, seed=seed,
                                           checkpoint_path=str(tmp_path / name)))
        train(config, QUIET)
        embeddings, _ = CheckpointStore(Directory(config.checkpoint_path)).read_embeddings(
            "node", 0)
        return np.asarray(embeddings)

    first, again, other = trained(0, "first"), trained(0, "again"), trained(1, "other")
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
