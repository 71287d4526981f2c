"""Training a grown graph from `init_path` without forgetting: the edges the checkpoint learned
are replayed, mixed into the new ones, unless told otherwise, and a run that would forget
says so."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tessera.config import ConfigSchema, parse_config
from tessera.evaluation.command import evaluate_checkpoint
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
RELATION_COLUMN = ImportOptions(rel_col=1, rhs_col=2)
OLD_NODES, NEW_NODES = 60, 15


def planted_rows(seed: int) -> tuple[list[str], list[str]]:
    """Random triples (three relation types) among 75 nodes, split by entity: old ones
    between the first 60 nodes, new ones touching one of the other 15."""
    rng = random.Random(seed)
    rows: dict[bool, list[str]] = {True: [], False: []}
    while len(rows[True]) < 500 or len(rows[False]) < 250:
        head, tail = rng.randrange(OLD_NODES + NEW_NODES), rng.randrange(OLD_NODES + NEW_NODES)
        old = head < OLD_NODES and tail < OLD_NODES
        if len(rows[old]) < (500 if old else 250):
            rows[old].append(f"n{head}\tr{rng.randrange(3)}\tn{tail}\n")
    return rows[True], rows[False]


def write_rows(path: Path, rows: list[str]) -> str:
    path.write_text("".join(rows))
    return str(path)


def config_dict(root: Path, **keys: Any) -> dict[str, Any]:
    """ComplEx against every entity: 1-N scoring memorises the random triples in a few
    epochs, so forgetting them shows."""
    return {"entities": {"node": {"num_partitions": 1}},
            "relations": [{"name": "all", "lhs": "node", "rhs": "node",
                           "operator": "complex_diagonal", "all_negs": True}],
            "dynamic_relations": True, "dimension": 32, "global_emb": False,
            "comparator": "dot", "loss_fn": "softmax", "lr": 0.5, "batch_size": 50,
            "num_uniform_negs": 0, "eval_fraction": 0, "workers": 1, "hogwild_delay": 0,
            "num_epochs": 20, "entity_path": f"{root}/entities",
            "edge_paths": [f"{root}/old"], "checkpoint_path": f"{root}/first", **keys}


@dataclasses.dataclass(frozen=True)
class Grown:
    """The planted graph before and after it grew by 15 nodes."""

    old: ConfigSchema  # the old triples, trained into root/first
    new: ConfigSchema  # the new ones, in the same entity folder, to train from root/first
    before: float  # the old triples' filtered MRR before the graph grew

    @property
    def old_edges(self) -> str:
        return self.old.edge_paths[0]

    @property
    def new_edges(self) -> str:
        return self.new.edge_paths[0]


def grow(root: Path, **keys: Any) -> Grown:
    """Train the old triples, then import the new ones into the same entity folder."""
    old_rows, new_rows = planted_rows(0)
    old = parse_config(config_dict(root, **keys))
    import_edges(old, [write_rows(root / "old.tsv", old_rows)], RELATION_COLUMN, QUIET)
    train(old, QUIET)
    before = filtered_mrr(old, old.edge_paths[0])
    new = parse_config(config_dict(root, edge_paths=[f"{root}/new"],
                                   init_path=f"{root}/first", **keys))
    import_edges(new, [write_rows(root / "new.tsv", new_rows)], RELATION_COLUMN, QUIET)
    return Grown(old, new, before)


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Grown:
    return grow(tmp_path_factory.mktemp("growth"))


def filtered_mrr(config: ConfigSchema, edge_path: str) -> float:
    """The filtered MRR of one edge set, ranked against every entity the checkpoint has."""
    ranked = dataclasses.replace(config, edge_paths=[edge_path])
    return float(evaluate_checkpoint(ranked, QUIET, filtered=True)["mrr"])


def trained_run(config: ConfigSchema, name: str, **keys: Any) -> tuple[ConfigSchema, str]:
    """Train `config` with `keys` into a checkpoint of its own; the JSON lines it printed."""
    run = dataclasses.replace(config, checkpoint_path=f"{config.checkpoint_path}-{name}",
                              **keys)
    output = io.StringIO()
    train(run, Reporter("json", stream=output))
    return run, output.getvalue()


def warnings_of(output: str) -> list[str]:
    messages = [json.loads(line).get("event", "") for line in output.splitlines()]
    return [message for message in messages if "warning" in message]


def test_the_new_edges_alone_forget_the_old_ones_and_replay_keeps_them(grown):
    assert grown.before > 0.95  # the old model has learned its triples (0.99)
    alone, _ = trained_run(grown.new, "alone", replay_paths=[])
    replayed, _ = trained_run(grown.new, "replayed")
    forgotten, kept = (filtered_mrr(run, grown.old_edges) for run in (alone, replayed))
    assert forgotten < 0.5 and kept > grown.before - 0.15 and kept > forgotten + 0.4  # 0.23, 0.89
    # The new entities learn (random ranking: about 0.07), with the old edges as context.
    assert filtered_mrr(replayed, grown.new_edges) > 0.6  # 0.74


def test_the_default_replays_what_init_path_learned_and_says_so(grown):
    run, output = trained_run(grown.new, "default", num_epochs=1)
    events = [json.loads(line) for line in output.splitlines()]
    [said] = [e for e in events if e.get("event") == "replaying the edges init_path learned"]
    assert said["replay_paths"] == [grown.old_edges] and not warnings_of(output)
    # Every old edge trains once an epoch, with the new ones; config.json records the replay,
    # so that the next growth, from this checkpoint, replays both edge sets.
    store = CheckpointStore(Directory(run.checkpoint_path, {}))
    assert sum(record["stats"]["count"] for record in store.read_stats()) == 500 + 250
    assert store.read_config()["replay_paths"] == [grown.old_edges]


def test_a_second_growth_replays_both_edge_sets_learned_before(tmp_path):
    grown = grow(tmp_path, num_epochs=1)  # a folder of its own: this test grows it again
    week2, _ = trained_run(grown.new, "week2")
    week3 = dataclasses.replace(grown.new, edge_paths=[str(tmp_path / "third")],
                                init_path=week2.checkpoint_path)
    rows = [f"n{75 + i % 5}\tr0\tn{i}\n" for i in range(40)]  # five more nodes
    import_edges(week3, [write_rows(tmp_path / "third.tsv", rows)], RELATION_COLUMN, QUIET)
    run, _ = trained_run(week3, "week3")
    store = CheckpointStore(Directory(run.checkpoint_path, {}))
    assert store.read_config()["replay_paths"] == [grown.new_edges, grown.old_edges]
    assert sum(record["stats"]["count"] for record in store.read_stats()) == 40 + 250 + 500


@pytest.mark.parametrize(("keys", "why"), [
    ({"replay_paths": []}, "every edge of edge_paths touches a new entity and replay_paths "
                           "is []"),
    ({"init_old_edge_fraction": 0.0}, "init_old_edge_fraction is 0"),
])
def test_a_run_that_trains_nothing_old_warns_of_forgetting(grown, keys, why):
    _, output = trained_run(grown.new, "warned-" + "-".join(keys), num_epochs=1, **keys)
    [warning] = warnings_of(output)
    assert f"no edge between the entities it knows trains in this run ({why})" in warning
    assert "forget the old ones" in warning and "Leave replay_paths unset" in warning


def test_the_whole_grown_graph_without_replay_does_not_warn(grown, tmp_path):
    # Imported anew into one edge set, the grown graph holds the old edges itself.
    whole = dataclasses.replace(grown.new, edge_paths=[str(tmp_path / "whole")])
    root = Path(grown.old_edges).parent
    rows = (root / "old.tsv").read_text() + (root / "new.tsv").read_text()
    import_edges(whole, [write_rows(tmp_path / "whole.tsv", [rows])], RELATION_COLUMN, QUIET)
    _, output = trained_run(whole, "whole", num_epochs=1, replay_paths=[])
    assert not warnings_of(output)


def test_old_and_new_edge_sets_one_after_the_other_warn(grown):
    _, output = trained_run(grown.new, "both", num_epochs=1,
                            edge_paths=[grown.old_edges, grown.new_edges])
    [warning] = warnings_of(output)
    assert "one after the other" in warning and "Give edge_paths the new edge sets alone" \
        in warning


def test_nothing_is_replayed_from_a_checkpoint_of_the_graph_as_it_is(grown):
    first, _ = trained_run(grown.new, "first-of-grown", num_epochs=1)
    again = dataclasses.replace(grown.new, init_path=first.checkpoint_path)
    run, output = trained_run(again, "not-grown", num_epochs=1)
    store = CheckpointStore(Directory(run.checkpoint_path, {}))
    assert sum(record["stats"]["count"] for record in store.read_stats()) == 250
    assert not warnings_of(output) and store.read_config()["replay_paths"] == []
