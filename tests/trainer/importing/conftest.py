"""The `make_config` fixture: a config for a tiny graph, its outputs under tmp_path."""

from __future__ import annotations

from typing import Any

import pytest

from tessera.config import ConfigSchema, parse_config


@pytest.fixture
def make_config(tmp_path):
    def make(root: str | None = None, *, entities: dict[str, Any] | None = None,
             relations: list[dict[str, Any]] | None = None, num_edge_paths: int = 1,
             **overrides: Any) -> ConfigSchema:
        root = root or str(tmp_path / "out")
        raw = {
            "entities": entities or {"node": {"num_partitions": 1}},
            "relations": relations or [{"name": "link", "lhs": "node", "rhs": "node"}],
            "dimension": 4,
            "entity_path": f"{root}/entities",
            "edge_paths": [f"{root}/edges{i}" for i in range(num_edge_paths)],
            "checkpoint_path": f"{root}/checkpoints",
            **overrides,
        }
        return parse_config(raw)

    return make
