"""A `make_config` fixture: a valid training config of a tiny graph, with overrides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tessera.config import ConfigSchema, parse_config

ConfigFactory = Callable[..., ConfigSchema]


def _config(relations: list[dict[str, Any]] | None = None,
            entities: dict[str, dict[str, Any]] | None = None, **overrides: Any) -> ConfigSchema:
    """One entity type `node` and one relation `link` node -> node unless given otherwise."""
    raw: dict[str, Any] = {
        "entities": entities or {"node": {"num_partitions": 1}},
        "relations": relations or [{"name": "link", "lhs": "node", "rhs": "node"}],
        "dimension": 4,
        "entity_path": "entities",
        "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
    }
    raw.update(overrides)
    return parse_config(raw)


@pytest.fixture
def make_config() -> ConfigFactory:
    return _config
