"""`tessera neighbors` and `tessera.load`: exact nearest neighbours by the model's own scores,
checked against a brute-force computation written out here in NumPy, on real checkpoint
files on a local disk and on the test S3 server.

Each checkpoint is initialised with random embeddings and random operator parameters (not
trained: what matters is that the search scores as the model would), then committed by the
checkpoint store as training commits it.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tessera
from tessera.cli import main
from tessera.config import parse_config
from tessera.errors import BadInputError
from tessera.model import EmbeddingModel
from tessera.model.model_io import save_model
from tessera.progress import Reporter
from tessera.querying import names
from tessera.querying.trained import Neighbor, TrainedModel
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.entities import (
    write_dynamic_relation_count,
    write_entity_count,
    write_entity_names,
    write_relation_names,
)
from tessera.storage.fs import Directory

COUNTS = {"node": [23, 31, 17], "item": [40]}
DIMENSION = 8


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def node_names(part: int, count: int) -> list[str]:
    return [f"n{part}_{offset}" for offset in range(count)]


def item_names(count: int) -> list[str]:
    names = [f"i{offset}" for offset in range(count)]
    names[5] = "n0_3"  # the same name as a node: ambiguous without an entity type
    return names


def base_config(root: str, **overrides: Any) -> dict[str, Any]:
    config = {
        "entities": {"node": {"num_partitions": 3}, "item": {"num_partitions": 1}},
        "relations": [
            {"name": "link", "lhs": "node", "rhs": "node", "operator": "translation"},
            {"name": "buys", "lhs": "node", "rhs": "item", "operator": "linear"}],
        "dimension": DIMENSION, "comparator": "dot", "global_emb": False,
        "entity_path": f"{root}/entities", "edge_paths": [],
        "checkpoint_path": f"{root}/checkpoints",
    }
    config.update(overrides)
    return config


def write_checkpoint(config_dict: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """Entity files and a committed version-1 checkpoint of random values; returns what was
    written: {type: [rows of each partition]} and the model."""
    config = parse_config(config_dict)
    entities = Directory.from_config(config.entity_path, config)
    generator = np.random.default_rng(seed)
    tables: dict[str, list[np.ndarray]] = {}
    num_relations = len(config.relations)
    if config.dynamic_relations:
        num_relations = 3
        write_dynamic_relation_count(entities, num_relations)
        write_relation_names(entities, ["r0", "r1", "r2"])
    store = CheckpointStore.from_config(config)
    for kind, counts in COUNTS.items():
        if kind not in config.entities:
            continue
        tables[kind] = []
        for part, count in enumerate(counts):
            write_entity_count(entities, kind, part, count)
            names = item_names(count) if kind == "item" else node_names(part, count)
            write_entity_names(entities, kind, part, names)
            rows = generator.normal(size=(count, DIMENSION)).astype(np.float32)
            store.write_embeddings(1, kind, part, rows)
            tables[kind].append(rows)
    torch.manual_seed(seed)
    model = EmbeddingModel(config, num_relations)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    save_model(store, 1, model, None, {})
    store.commit(1, config.to_dict())
    return {"tables": tables, "model": model, "config": config}


def compare(comparator: str, queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Brute force: [n, m] scores, written out from each comparator's definition."""
    if comparator == "dot":
        return queries @ candidates.T
    if comparator == "cos":
        unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        unit_c = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
        return unit_q @ unit_c.T
    difference = queries[:, None, :] - candidates[None, :, :]
    if comparator == "l1":
        return -np.abs(difference).sum(-1)
    squared = (difference ** 2).sum(-1)
    return -np.sqrt(squared) if comparator == "l2" else -squared


def expected_top(scores: np.ndarray, names: list[str], k: int,
                 exclude: int | None) -> list[tuple[str, float]]:
    order = [i for i in np.argsort(-scores, kind="stable") if i != exclude][:k]
    return [(names[i], float(scores[i])) for i in order]


def all_node_names() -> list[str]:
    return [name for part, count in enumerate(COUNTS["node"])
            for name in node_names(part, count)]


def assert_same(found: list[Neighbor],
                expected: list[tuple[str, float]]) -> None:
    assert [n.name for n in found] == [name for name, _ in expected]
    np.testing.assert_allclose([n.score for n in found], [s for _, s in expected], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("comparator", ["dot", "cos", "l2", "squared_l2", "l1"])
def test_similarity_matches_brute_force(tmp_path: Path, comparator: str) -> None:
    written = write_checkpoint(base_config(str(tmp_path), comparator=comparator))
    table = np.concatenate(written["tables"]["node"])
    names = all_node_names()
    model = tessera.load(base_config(str(tmp_path), comparator=comparator))
    queries = ["n0_0", "n1_7", "n2_16"]
    found = model.neighbors_of_each(queries, k=5, entity_type="node")
    for query in queries:
        index = names.index(query)
        scores = compare(comparator, table[index:index + 1], table)[0]
        assert_same(found[query], expected_top(scores, names, 5, exclude=index))
        assert query not in [n.name for n in found[query]]


def test_global_embedding_max_norm_and_bias_are_applied(tmp_path: Path) -> None:
    config = base_config(str(tmp_path), comparator="dot", global_emb=True, max_norm=1.5,
                         bias=True)
    written = write_checkpoint(config)
    table = np.concatenate(written["tables"]["node"])
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    table = np.where(norms > 1.5, table * 1.5 / (norms + 1e-7), table)
    table = table + written["model"].global_embedding("node").detach().numpy()
    scores = (table[1:, 1:] @ table[0, 1:]) + table[1:, 0] + table[0, 0]
    expected = expected_top(np.concatenate([[-np.inf], scores]), all_node_names(), 4, 0)
    assert_same(tessera.load(config).neighbors("n0_0", k=4), expected)


@pytest.mark.parametrize("side", ["rhs", "lhs"])
def test_relation_scores_through_the_operator(tmp_path: Path, side: str) -> None:
    """Without dynamic relations the right-hand side goes through the operator: (n, buys, ?)
    scores items as u . (A v); (?, buys, i) scores nodes as u . (A i)."""
    written = write_checkpoint(base_config(str(tmp_path)))
    matrix = written["model"].rhs_operators[1].linear_transformation.detach().numpy()
    nodes = np.concatenate(written["tables"]["node"])
    items = written["tables"]["item"][0]
    model = tessera.load(base_config(str(tmp_path)))
    if side == "rhs":
        scores = (items @ matrix.T) @ nodes[all_node_names().index("n1_2")]
        expected = expected_top(scores, item_names(40), 6, exclude=None)
        found = model.neighbors("n1_2", k=6, relation="buys")
    else:
        scores = nodes @ (matrix @ items[7])
        expected = expected_top(scores, all_node_names(), 6, exclude=None)
        found = model.neighbors("i7", k=6, relation="buys", side="lhs")
    assert_same(found, expected)


def test_rotate_relation_scores_rotated_items_by_distance(tmp_path: Path) -> None:
    """RotatE (`rotate` with `l2`): (n, buys, ?) scores item i as -|n - i exp(i phase)|, the
    phases read back from the model file."""
    config = base_config(str(tmp_path), comparator="l2", relations=[
        {"name": "link", "lhs": "node", "rhs": "node", "operator": "translation"},
        {"name": "buys", "lhs": "node", "rhs": "item", "operator": "rotate"}])
    written = write_checkpoint(config)
    phase = written["model"].rhs_operators[1].phase.detach().numpy()
    items = written["tables"]["item"][0]
    half = DIMENSION // 2
    rotated = (items[:, :half] + 1j * items[:, half:]) * np.exp(1j * phase)
    items_rotated = np.concatenate([rotated.real, rotated.imag], axis=1)
    query = np.concatenate(written["tables"]["node"])[all_node_names().index("n2_5")]
    expected = expected_top(compare("l2", query[None, :], items_rotated)[0], item_names(40), 6,
                            exclude=None)
    assert_same(tessera.load(config).neighbors("n2_5", k=6, relation="buys"), expected)


@pytest.mark.parametrize("side", ["rhs", "lhs"])
def test_dynamic_relations_use_each_sides_operator(tmp_path: Path, side: str) -> None:
    """With dynamic relations the uncorrupted side is transformed: (n, r1, ?) scores
    (g_r1 * n) . v; (?, r1, n) scores u . (h_r1 * n) (diagonal operators)."""
    config = base_config(str(tmp_path), dynamic_relations=True, entities={
        "node": {"num_partitions": 3}}, relations=[
        {"name": "all", "lhs": "node", "rhs": "node", "operator": "diagonal"}])
    written = write_checkpoint(config)
    nodes = np.concatenate(written["tables"]["node"])
    operator = (written["model"].lhs_operators if side == "rhs"
                else written["model"].rhs_operators)[0]
    diagonal = operator.diagonals.detach().numpy()[1]
    query = nodes[all_node_names().index("n2_4")]
    expected = expected_top(nodes @ (diagonal * query), all_node_names(), 5, exclude=None)
    assert_same(tessera.load(config).neighbors("n2_4", k=5, relation="r1", side=side),
                expected)


def test_small_blocks_give_the_same_result(tmp_path: Path) -> None:
    """Streaming: one row at a time, or blocks that cut partitions unevenly, or one block per
    partition, the hits are the same."""
    write_checkpoint(base_config(str(tmp_path), comparator="cos"))
    model = tessera.load(base_config(str(tmp_path), comparator="cos"))
    queries = ["n0_1", "n2_3", "i9"]
    results = [model.neighbors_of_each(queries, k=7, block_rows=rows)
               for rows in (1, 5, 64, None)]
    for result in results[1:]:  # scores may differ in the last bit: products of other shapes
        for query in queries:
            assert_same(result[query], [(n.name, n.score) for n in results[0][query]])
    assert [len(hits) for hits in results[0].values()] == [7, 7, 7]


def test_embedding_is_the_stored_row(tmp_path: Path) -> None:
    written = write_checkpoint(base_config(str(tmp_path)))
    model = tessera.load(base_config(str(tmp_path)))
    np.testing.assert_array_equal(model.embedding("n1_30").numpy(),
                                  written["tables"]["node"][1][30])
    np.testing.assert_array_equal(model.embedding("n0_3", entity_type="item").numpy(),
                                  written["tables"]["item"][0][5])
    assert model.entity_names("item") == item_names(40)
    assert model.relation_names == ["link", "buys"]


def test_unknown_and_ambiguous_names_are_refused(tmp_path: Path) -> None:
    write_checkpoint(base_config(str(tmp_path)))
    model = tessera.load(base_config(str(tmp_path)))
    with pytest.raises(BadInputError, match=r"unknown entity 'n1_3x': did you mean 'n1_3'"):
        model.neighbors("n1_3x")
    with pytest.raises(BadInputError, match="'n0_3' exists in entity types item, node; "
                                            "choose one with --entity-type"):
        model.neighbors("n0_3")
    assert len(model.neighbors("n0_3", entity_type="node", k=3)) == 3
    with pytest.raises(BadInputError, match="unknown relation 'sells'; the relations are "
                                            "link, buys"):
        model.neighbors("n0_1", relation="sells")


def test_the_command_prints_neighbours_and_progress_with_a_total(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_checkpoint(base_config(str(tmp_path)))
    (tmp_path / "config.json").write_text(json.dumps(base_config(str(tmp_path))))
    assert main(["neighbors", str(tmp_path / "config.json"), "n0_1", "n1_1", "-k", "3",
                 "--entity-type", "node", "--log-format", "json"]) == 0
    out, err = capsys.readouterr()
    lines = [line.split("\t") for line in out.splitlines()]
    assert [line[:2] for line in lines] == [["n0_1", "1"], ["n0_1", "2"], ["n0_1", "3"],
                                            ["n1_1", "1"], ["n1_1", "2"], ["n1_1", "3"]]
    expected = tessera.load(base_config(str(tmp_path))).neighbors("n1_1", k=3)
    assert [line[2] for line in lines[3:]] == [n.name for n in expected]
    records = [json.loads(line) for line in err.splitlines()]
    progress = [r for r in records if r.get("progress") == "neighbors"]
    assert progress and progress[0]["total"] == sum(COUNTS["node"])
    assert any(r.get("event") == "neighbors done" for r in records)


def test_the_command_refuses_an_unknown_name_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_checkpoint(base_config(str(tmp_path)))
    (tmp_path / "config.json").write_text(json.dumps(base_config(str(tmp_path))))
    assert main(["neighbors", str(tmp_path / "config.json"), "i99", "--quiet"]) == 65
    err = capsys.readouterr().err
    assert err.splitlines() == ["tessera neighbors: error: unknown entity 'i99': did you "
                                "mean 'i9', 'i39', 'i29'?"]


def test_json_output_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_checkpoint(base_config(str(tmp_path / "real")))
    (tmp_path / "config.json").write_text(json.dumps(base_config(str(tmp_path / "elsewhere"))))
    assert main(["neighbors", str(tmp_path / "config.json"), "n2_2", "--k", "2", "--json",
                 "--relation", "link", "--quiet",
                 "-p", f"entity_path={tmp_path / 'real' / 'entities'}",
                 "-p", f"checkpoint_path={tmp_path / 'real' / 'checkpoints'}"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["relation"] == "link" and document["side"] == "rhs"
    (query,) = document["queries"]
    assert query["name"] == "n2_2" and len(query["neighbors"]) == 2
    assert set(query["neighbors"][0]) == {"name", "entity_type", "score"}


def test_queries_a_checkpoint_on_object_storage(tmp_path: Path, s3_dir: Any) -> None:
    local = write_checkpoint(base_config(str(tmp_path), comparator="l2"))
    remote = base_config(s3_dir.url, comparator="l2", storage_options=s3_dir.storage_options)
    target = Directory(s3_dir.url, s3_dir.storage_options)
    for folder in ("entities", "checkpoints"):
        for path in sorted((tmp_path / folder).iterdir()):
            with target.subdirectory(folder).writing(path.name) as temp_path:
                shutil.copyfile(path, temp_path)
    stream = Pipe()
    model = TrainedModel(parse_config(remote), Reporter("json", stream))
    found = model.neighbors_of_each(["n1_5", "n2_0"], k=4, block_rows=7)
    table = np.concatenate(local["tables"]["node"])
    for query in ("n1_5", "n2_0"):
        index = all_node_names().index(query)
        scores = compare("l2", table[index:index + 1], table)[0]
        assert_same(found[query], expected_top(scores, all_node_names(), 4, exclude=index))
    assert '"total": 71' in stream.getvalue()


def test_importing_tessera_does_not_import_torch() -> None:
    """`tessera.load` is on the package, but torch comes only with the first call."""
    code = "import sys, tessera; assert callable(tessera.load); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_large_partitions_suggest_names_sharing_an_end(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Past COMPARE_ALL_UP_TO names, only names that share 3 characters at one end are
    compared (difflib on a million names is too slow for an error message)."""
    write_checkpoint(base_config(str(tmp_path)))
    model = tessera.load(base_config(str(tmp_path)))
    monkeypatch.setattr(names, "COMPARE_ALL_UP_TO", 10)
    with pytest.raises(BadInputError, match=r"unknown entity 'n1_30x': did you mean 'n1_30'"):
        model.neighbors("n1_30x")
    with pytest.raises(BadInputError, match="unknown entity 'xn1_30': did you mean 'n1_30'"):
        model.neighbors("xn1_30")  # shares its end
