"""A distributed job whose data and checkpoints live on an S3-protocol server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import fsspec
import pytest
from cluster_support import check_no_partition_held_twice, run_cluster, write_config
from support.planted import write_planted_graph

from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory

NUM_EPOCHS = 3


@pytest.mark.slow
def test_every_role_reads_and_writes_s3(s3_dir, tmp_path: Path) -> None:
    graph = write_planted_graph(tmp_path / "graph", 4, num_edges=4000)
    filesystem = fsspec.filesystem("s3", **s3_dir.storage_options)
    for name in ("entities", "train"):
        filesystem.put(str(graph.root / name), f"{s3_dir.url}/{name}", recursive=True)
    checkpoint_url = f"{s3_dir.url}/checkpoints"
    config = write_config(tmp_path / "config.json", graph.config(
        entity_path=f"{s3_dir.url}/entities", edge_paths=[f"{s3_dir.url}/train"],
        checkpoint_path=checkpoint_url, storage_options=s3_dir.storage_options,
        num_epochs=NUM_EPOCHS))
    code, logs = run_cluster(config, "--trainers", "2", "--partition-servers", "2")
    assert code == 0, "\n".join(logs.lines[-30:])
    check_no_partition_held_twice(logs)

    store = CheckpointStore(Directory(checkpoint_url, s3_dir.storage_options))
    assert store.current_version() == NUM_EPOCHS
    assert store.read_metadata()["iteration/epoch_idx"] == NUM_EPOCHS - 1
    for part in range(4):
        embeddings, optimizer_state = store.read_embeddings("node", part)
        assert embeddings.shape == (100, 16) and optimizer_state is not None
    assert Counter(r["epoch_idx"] for r in store.read_stats()) == {e: 16 for e in
                                                                   range(NUM_EPOCHS)}
    losses = [r["stats"]["metrics"]["loss"] for r in store.read_stats()]
    assert sum(losses[-16:]) < sum(losses[:16])  # the last epoch fits better than the first
    assert not [name for name in store.directory.listdir()
                if name.endswith(".h5") and f".v{NUM_EPOCHS}." not in name]
