"""Training a grown graph from a checkpoint of the smaller one (`init_path`): known rows and
relation types start from it, new ones as a fresh run starts them; mismatches are refused;
`init_old_edge_fraction` says which edges between known entities train."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from tessera.config import ConfigSchema, parse_config
from tessera.data.graph_data import GraphData
from tessera.errors import FormatError
from tessera.importing import ImportOptions, import_edges
from tessera.model.embedding_model import EmbeddingModel
from tessera.model.model_io import INIT_PATH, load_model
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.entities import read_entity_names
from tessera.storage.fs import Directory
from tessera.training.bucket_trainer import read_training_edges
from tessera.training.coordinator import train
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import PartitionLoader
from tessera.training.schedule import TrainingStep
from tessera.vocabulary import Bucket

QUIET = Reporter("quiet")
RELATION_COLUMN = ImportOptions(rel_col=1, rhs_col=2)


def graph_rows(num_nodes: int, relations: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"n{rng.randrange(num_nodes)}\t{rng.choice(relations)}\tn{rng.randrange(num_nodes)}\n"
            for _ in range(count)]


def write_rows(path: Path, rows: list[str]) -> str:
    path.write_text("".join(rows))
    return str(path)


def config_dict(root: str, storage_options: dict[str, Any], edges: str,
                **overrides: Any) -> dict[str, Any]:
    return {"entities": {"node": {"num_partitions": 2}},
            "relations": [{"name": "any", "lhs": "node", "rhs": "node",
                           "operator": "translation"}],
            "dynamic_relations": True, "dimension": 8, "num_epochs": 1, "workers": 1,
            "entity_path": f"{root}/entities", "edge_paths": [f"{root}/{edges}"],
            "checkpoint_path": f"{root}/grown", "storage_options": storage_options,
            **overrides}


@pytest.fixture(params=["local", "s3"])
def grown_graph(request, tmp_path):
    """A graph of 150 nodes and 2 relation types trained into `first` (root/first), then
    imported again, grown to 200 nodes and 3 relation types, into the same entity folder."""
    if request.param == "local":
        root, options = str(tmp_path / "out"), {}
    else:
        location = request.getfixturevalue("s3_dir")
        root, options = location.url, location.storage_options
    old = config_dict(root, options, "old", checkpoint_path=f"{root}/first")
    import_edges(parse_config(old), [write_rows(tmp_path / "old.tsv",
                                                graph_rows(150, ["a", "b"], 1500, 0))],
                 RELATION_COLUMN, QUIET)
    train(parse_config(old), QUIET)
    grown = config_dict(root, options, "new", init_path=f"{root}/first")
    import_edges(parse_config(grown), [write_rows(tmp_path / "new.tsv",
                                                  graph_rows(200, ["a", "b", "c"], 2000, 1))],
                 RELATION_COLUMN, QUIET)
    return parse_config(old), parse_config(grown)


def test_known_rows_start_from_the_checkpoint_and_new_rows_as_a_fresh_run(grown_graph):
    old, grown = grown_graph
    first = CheckpointStore(Directory(old.checkpoint_path, old.storage_options))
    counts = GraphData(grown).entity_counts
    empty = CheckpointStore(Directory(grown.checkpoint_path, grown.storage_options))
    seeded = dataclasses.replace(grown, seed=5)
    started = PartitionLoader(seeded, counts, empty, first)
    fresh = PartitionLoader(seeded, counts, empty, None)
    for part in range(2):
        trained, _ = first.read_embeddings("node", part)
        rows = len(trained)
        partition = started.load(("node", part), 0)
        assert partition.embeddings.shape == (counts["node"][part], 8) and rows < len(
            partition.embeddings)
        assert torch.equal(partition.embeddings[:rows], torch.from_numpy(trained))
        assert torch.equal(partition.embeddings[rows:],
                           fresh.load(("node", part), 0).embeddings[rows:])
        assert partition.adagrad_sum[:rows].gt(0).any()  # trained rows keep their state
        assert not partition.adagrad_sum[rows:].any()


def test_known_relation_types_start_from_the_checkpoint_and_new_ones_fresh(grown_graph):
    old, grown = grown_graph
    first = CheckpointStore(Directory(old.checkpoint_path, old.storage_options))
    trained = EmbeddingModel(old, 2)
    load_model(first, None, trained, None)
    model = EmbeddingModel(grown, 3)
    optimizer = make_model_optimizer(model, grown)
    load_model(first, None, model, optimizer, origin=INIT_PATH)
    for side in ("lhs_operators", "rhs_operators"):
        loaded = getattr(model, side)[0].translations.detach()
        assert torch.equal(loaded[:2], getattr(trained, side)[0].translations.detach())
        assert loaded[:2].abs().sum() > 0 and not loaded[2].any()  # fresh: zeros
    assert optimizer is not None
    # Of the operators' accumulators (one row per relation type), the new row starts at 0.
    sums = [entry["sum"] for entry in optimizer.state_dict()["state"].values()
            if entry["sum"].ndim == 2]
    assert len(sums) == 2
    assert all(row_sum[:2].any() and not row_sum[2:].any() for row_sum in sums)


def test_a_grown_graph_trains_from_init_path(grown_graph):
    _, grown = grown_graph
    summary = train(grown, QUIET)
    assert summary is not None
    store = CheckpointStore(Directory(grown.checkpoint_path, grown.storage_options))
    counts = GraphData(grown).entity_counts["node"]
    assert [len(store.read_embeddings("node", part)[0]) for part in range(2)] == counts


def test_a_checkpoint_of_more_entities_is_refused(grown_graph, tmp_path):
    old, grown = grown_graph
    bigger = dataclasses.replace(grown, checkpoint_path=f"{grown.checkpoint_path}-big",
                                 init_path=None)
    train(bigger, QUIET)
    # A smaller graph imported on its own, trained from the checkpoint of the grown one.
    small = dataclasses.replace(old, entity_path=f"{old.entity_path}-small",
                                checkpoint_path=f"{old.checkpoint_path}-small",
                                init_path=bigger.checkpoint_path)
    rows = graph_rows(50, ["a", "b", "c"], 300, 2)
    import_edges(small, [write_rows(tmp_path / "small.tsv", rows)], RELATION_COLUMN, QUIET)
    with pytest.raises(FormatError, match=r"embeddings_node_\d\.v\d+\.h5: has \d+ rows but the "
                                          r"partition has \d+ entities .*init_path was trained "
                                          r"on more entities than entity_path holds"):
        train(small, QUIET)


def test_an_entity_folder_that_does_not_extend_the_checkpoints_is_refused(grown_graph,
                                                                          tmp_path):
    _, grown = grown_graph
    # The grown graph imported into a folder of its own: a new dictionary, another order.
    elsewhere = dataclasses.replace(grown, entity_path=f"{grown.entity_path}-elsewhere")
    import_edges(elsewhere, [str(tmp_path / "new.tsv")], RELATION_COLUMN, QUIET)
    with pytest.raises(FormatError, match=r"row \d+ is entity 'n\d+' .* but offset \d+ of that "
                                          r"partition is 'n\d+' now .*entity_path does not "
                                          r"extend the dictionary init_path was trained on"):
        train(elsewhere, QUIET)


# init_old_edge_fraction: which edges between known entities train each epoch.

OLD_EDGES = 1000
# Ten known nodes gain edges to twenty new ones; the other known nodes gain none.
NEW_ROWS = [f"n{i % 10}\ta\tm{(i * 7) % 20}\n" for i in range(200)]


@pytest.fixture(params=["local", "s3"])
def replay_graph(request, tmp_path: Path) -> tuple[ConfigSchema, ConfigSchema]:
    """100 nodes trained into root/first; then the same edges plus NEW_ROWS imported into the
    same entity folder, to train from that checkpoint (no edge held out, no uniform negatives,
    so only the entities of trained edges move; the old edges are in the grown edge set, so
    none is replayed)."""
    if request.param == "local":
        root, options = str(tmp_path / "out"), {}
    else:
        location = request.getfixturevalue("s3_dir")
        root, options = location.url, location.storage_options
    old_rows = graph_rows(100, ["a", "b"], OLD_EDGES, 0)
    old = config_dict(root, options, "old", checkpoint_path=f"{root}/first")
    import_edges(parse_config(old), [write_rows(tmp_path / "old.tsv", old_rows)],
                 RELATION_COLUMN, QUIET)
    train(parse_config(old), QUIET)
    grown = config_dict(root, options, "grown", init_path=f"{root}/first", eval_fraction=0,
                        num_uniform_negs=0, num_epochs=2, replay_paths=[])
    import_edges(parse_config(grown), [write_rows(tmp_path / "grown.tsv", old_rows + NEW_ROWS)],
                 RELATION_COLUMN, QUIET)
    return parse_config(old), parse_config(grown)


def edges_per_epoch(config: ConfigSchema) -> list[int]:
    store = CheckpointStore(Directory(config.checkpoint_path, config.storage_options))
    counts: Counter[int] = Counter()
    for record in store.read_stats():
        counts[record["epoch_idx"]] += record["stats"]["count"]
    return [counts[epoch] for epoch in range(config.num_epochs)]


def test_fraction_0_trains_only_the_edges_that_touch_a_new_entity(replay_graph):
    old, grown = replay_graph
    run = dataclasses.replace(grown, init_old_edge_fraction=0.0)
    train(run, QUIET)
    assert edges_per_epoch(run) == [len(NEW_ROWS)] * 2
    first = CheckpointStore(Directory(old.checkpoint_path, old.storage_options))
    store = CheckpointStore(Directory(run.checkpoint_path, run.storage_options))
    entities = Directory(run.entity_path, run.storage_options)
    touched = {f"n{i}" for i in range(10)}
    unchanged = changed = 0
    for part in range(2):
        trained = torch.from_numpy(first.read_embeddings("node", part)[0])
        now = torch.from_numpy(store.read_embeddings("node", part)[0])
        names = read_entity_names(entities, "node", part)
        for offset in range(len(trained)):
            if names[offset] in touched:
                changed += not torch.equal(now[offset], trained[offset])
            else:  # a known node with no edge to a new one: its old edges did not train
                assert torch.equal(now[offset], trained[offset]), names[offset]
                unchanged += 1
    assert changed == len(touched) and unchanged >= 80


def test_fraction_1_trains_every_edge_as_pbg_does(replay_graph):
    _, grown = replay_graph
    run = dataclasses.replace(grown, init_old_edge_fraction=1.0)
    train(run, QUIET)
    assert edges_per_epoch(run) == [OLD_EDGES + len(NEW_ROWS)] * 2


def test_a_share_of_the_old_edges_is_drawn_anew_each_epoch(replay_graph):
    _, grown = replay_graph
    run = dataclasses.replace(grown, init_old_edge_fraction=0.5, num_epochs=3)
    train(run, QUIET)
    for count in edges_per_epoch(run):  # binomial(1000, 0.5): sd 16
        assert abs(count - len(NEW_ROWS) - OLD_EDGES / 2) < 80
    data = GraphData(run)

    def drawn(epoch: int) -> set[tuple[int, int, int]]:
        step = TrainingStep(epoch, 0, 0, Bucket(0, 0))
        [edges], held_out = read_training_edges(run, data, step, 1, 1)
        assert len(held_out) == 0
        return set(zip(edges.rel.tolist(), edges.lhs.ids.tolist(), edges.rhs.ids.tolist()))

    assert drawn(0) == drawn(0) and drawn(0) != drawn(1)


def test_nothing_grown_trains_every_edge(replay_graph):
    _, grown = replay_graph
    train(grown, QUIET)
    again = dataclasses.replace(grown, init_path=grown.checkpoint_path,
                                checkpoint_path=f"{grown.checkpoint_path}-again",
                                init_old_edge_fraction=0.0)
    train(again, QUIET)
    assert edges_per_epoch(again) == [OLD_EDGES + len(NEW_ROWS)] * 2


def test_without_init_path_every_edge_trains(replay_graph):
    # An EmbeddingJob sets the share once: its first generation has nothing old, and the
    # operator's retraining generations add init_path.
    _, grown = replay_graph
    fresh = dataclasses.replace(grown, init_path=None, init_old_edge_fraction=0.0)
    train(fresh, QUIET)
    assert edges_per_epoch(fresh) == [OLD_EDGES + len(NEW_ROWS)] * 2
