"""Edges naming a row their partition does not have are refused when read for training, with
the file, the position, the relation type and the partition's size in the message."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tessera.config import parse_config
from tessera.data.graph_data import GraphData
from tessera.errors import FormatError
from tessera.storage.edges import write_bucket
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory
from tessera.vocabulary import Bucket

# Entity rows per type: with two relation types between them, a right-hand id can be in
# range for one relation type and out of range for the other.
ROWS = {"user": 5, "item": 3}


def graph(tmp_path: Path, relations: list[dict[str, Any]], rel: list[int], lhs: list[int],
          rhs: list[int]) -> GraphData:
    config = parse_config({
        "entities": {name: {"num_partitions": 1} for name in ROWS},
        "relations": relations, "dimension": 4,
        "entity_path": str(tmp_path / "entities"), "edge_paths": [str(tmp_path / "edges")],
        "checkpoint_path": str(tmp_path / "checkpoints")})
    entities = Directory(config.entity_path)
    for name, count in ROWS.items():
        write_entity_count(entities, name, 0, count)
    write_bucket(Directory(config.edge_paths[0]), 0, 0,
                 *(np.array(values, dtype=np.int64) for values in (rel, lhs, rhs)))
    return GraphData(config)


ONE_TYPE = [{"name": "likes", "lhs": "user", "rhs": "user"}]
TWO_TYPES = [{"name": "likes", "lhs": "user", "rhs": "user"},
             {"name": "bought", "lhs": "user", "rhs": "item"}]


def test_edges_within_their_partitions_are_read(tmp_path: Path) -> None:
    edges = graph(tmp_path, TWO_TYPES, [0, 1, 0], [4, 0, 2], [4, 2, 0]).read_edges(
        0, Bucket(0, 0))
    assert edges.rhs.ids.tolist() == [4, 2, 0]


@pytest.mark.parametrize(("relations", "rel", "rhs", "message"), [
    (ONE_TYPE, [0, 0, 0], [1, 5, 2], "rhs id 5 at position 1 (relation 0) is out of range "
     "for entity type 'user' partition 0, which has 5 rows"),
    (ONE_TYPE, [0, 0, 0], [1, 2, -1], "rhs id -1 at position 2 (relation 0)"),
    # 4 is a row of 'user' (relation 0) but not of 'item' (relation 1).
    (TWO_TYPES, [0, 1, 1], [4, 2, 4], "rhs id 4 at position 2 (relation 1) is out of range "
     "for entity type 'item' partition 0, which has 3 rows"),
])
def test_an_id_outside_its_partition_is_refused_by_position(
        tmp_path: Path, relations: list[dict[str, Any]], rel: list[int], rhs: list[int],
        message: str) -> None:
    data = graph(tmp_path, relations, rel, [0, 1, 2], rhs)
    with pytest.raises(FormatError, match=re.escape(message)) as raised:
        data.read_edges(0, Bucket(0, 0))
    assert "edges_0_0.h5" in str(raised.value)
