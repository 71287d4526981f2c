"""The small workspace of the fault tests: two TSV edge lists of 60 entities and two
relations, imported into two partitions and trained once, run from its own folder (the
config's paths are relative), so that each test can break a copy of it."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import yaml

from tessera.cli import main

CONFIG: dict[str, Any] = {
    "entities": {"node": {"num_partitions": 2}},
    "relations": [
        {"name": "likes", "lhs": "node", "rhs": "node", "operator": "translation"},
        {"name": "knows", "lhs": "node", "rhs": "node", "operator": "diagonal"},
    ],
    "dimension": 8, "num_epochs": 2, "num_edge_chunks": 2, "batch_size": 50,
    "num_batch_negs": 10, "num_uniform_negs": 10, "workers": 1, "hogwild_delay": 0,
    "entity_path": "entities", "edge_paths": ["edges/train", "edges/test"],
    "checkpoint_path": "ckpt",
}
IMPORT = ("import", "config.yaml", "train.tsv", "test.tsv", "--rel-col", "1", "--rhs-col", "2")
TRAIN = ("train", "config.yaml", "-p", "edge_paths=edges/train")
EVAL = ("eval", "config.yaml", "-p", "edge_paths=edges/test")


def write_config(root: Path, config: dict[str, Any]) -> None:
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def build_workspace(root: Path, config: dict[str, Any] = CONFIG) -> None:
    """Write the edge lists and `config` into `root`, then import and train there."""
    rng = random.Random(0)
    names = [f"e{i}" for i in range(60)]
    for name, count in (("train.tsv", 600), ("test.tsv", 60)):
        (root / name).write_text("".join(
            f"{rng.choice(names)}\t{rng.choice(['likes', 'knows'])}\t{rng.choice(names)}\n"
            for _ in range(count)))
    write_config(root, config)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main([*IMPORT, "--quiet"]) == 0
        assert main([*TRAIN, "--quiet"]) == 0
    finally:
        os.chdir(cwd)
