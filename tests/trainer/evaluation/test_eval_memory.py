"""`tessera eval` holds one bucket's partitions at a time, as training does.

A graph larger than memory is evaluated bucket by bucket; if the previous bucket's tables were
still held while the next bucket's are read, memory would follow four partitions, not two.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from tessera.config import parse_config
from tessera.evaluation.command import evaluate_checkpoint
from tessera.progress import Reporter
from tessera.storage.edges import write_bucket
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory
from tessera.training.coordinator import train

PARTITIONS = 4
ROWS = 20_000  # per partition: its table (8 MB at dimension 100) dwarfs everything else
DIMENSION = 100


def test_raw_eval_peak_memory_is_two_partitions_not_four(tmp_path: Path) -> None:
    config = parse_config({
        "entities": {"node": {"num_partitions": PARTITIONS}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node"}],
        "dimension": DIMENSION, "num_epochs": 1, "batch_size": 100, "num_batch_negs": 10,
        "num_uniform_negs": 10, "eval_fraction": 0, "workers": 1, "hogwild_delay": 0,
        "entity_path": str(tmp_path / "entities"), "edge_paths": [str(tmp_path / "edges")],
        "checkpoint_path": str(tmp_path / "checkpoints")})
    rng = np.random.default_rng(0)
    for part in range(PARTITIONS):
        write_entity_count(Directory(str(tmp_path / "entities")), "node", part, ROWS)
    for lhs_part in range(PARTITIONS):
        for rhs_part in range(PARTITIONS):
            lhs, rhs = rng.integers(0, ROWS, (2, 50))
            write_bucket(Directory(str(tmp_path / "edges")), lhs_part, rhs_part,
                         np.zeros(50, np.int64), lhs, rhs)
    train(config, Reporter("quiet"))

    tracemalloc.start()
    try:
        metrics = evaluate_checkpoint(config, Reporter("quiet"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert metrics["count"] == 2 * 50 * PARTITIONS ** 2
    partition_bytes = ROWS * DIMENSION * 4
    # Two tables, the next one read into place; four (or three and a read) without the fix.
    assert peak < 2.5 * partition_bytes, f"peak {peak / partition_bytes:.2f} partitions"
