"""An edge set with no edges at all: train and eval refuse it by path instead of "succeeding"
on nothing or reporting averages over nothing (NaN)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.config import parse_config
from tessera.errors import EXIT_BAD_INPUT, FormatError
from tessera.evaluation.command import evaluate_checkpoint
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.edges import write_bucket
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

QUIET = Reporter("quiet")
NO_EDGES = "no edges in this edge set (all 4 of its buckets are empty)"


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    """A planted graph in 2 partitions, trained for one epoch, and an empty edge set `empty`."""
    graph = write_planted_graph(tmp_path_factory.mktemp("graph"), 2, num_edges=2000)
    empty = Directory(str(graph.root / "empty"))
    for lhs_part in range(2):
        for rhs_part in range(2):
            write_bucket(empty, lhs_part, rhs_part, *(np.zeros(0, np.int64),) * 3)
    train(parse_config(graph.config(num_epochs=1)), QUIET)
    return graph


def test_training_on_an_empty_edge_set_is_refused_before_any_checkpoint(
        graph: PlantedGraph, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    config = parse_config(graph.config(
        edge_paths=[str(graph.root / "train"), str(graph.root / "empty")],
        checkpoint_path=str(checkpoints)))
    with pytest.raises(FormatError, match=re.escape(f"{graph.root / 'empty'}: {NO_EDGES}")):
        train(config, QUIET)
    assert CheckpointStore(Directory(str(checkpoints))).current_version() == 0


@pytest.mark.parametrize("filtered", [False, True], ids=["sampled", "filtered"])
def test_evaluating_an_empty_edge_set_is_refused(graph: PlantedGraph, filtered: bool) -> None:
    config = parse_config(graph.config(edge_paths=[str(graph.root / "empty")]))
    with pytest.raises(FormatError, match=re.escape(NO_EDGES)):
        evaluate_checkpoint(config, QUIET, filtered=filtered)


def test_the_eval_command_exits_65_with_one_line(graph: PlantedGraph, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(edge_paths=[str(graph.root / "empty")])))
    result = subprocess.run([sys.executable, "-m", "tessera", "eval", str(config), "--quiet"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stdout == ""  # no metrics of nothing
    assert result.stderr.splitlines() == [
        f"tessera eval: error: {graph.root / 'empty'}: {NO_EDGES}; import edges into it with "
        "`tessera import`, or leave it out of edge_paths"]
