"""End to end: new data in Git. A job whose `edge_paths` change to a grown graph (imported
into the same entity folder) trains its next generation from the last checkpoint's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from e2e.cluster import JOB_API, JOB_KIND, JOB_SECONDS, Cluster, TrainingData
from e2e.trainer_log import first_loss

from tessera.config import ConfigSchema, parse_config
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory

TRAINER = "growing-trainer-0"


def community_edges(path: Path, num_entities: int, num_edges: int, seed: int) -> str:
    """A TSV edge list of 8 communities: node i belongs to community i % 8."""
    rng = np.random.default_rng(seed)
    lhs = rng.integers(0, num_entities, num_edges)
    rhs = (rng.integers(0, num_entities // 8, num_edges) * 8 + lhs % 8) % num_entities
    path.write_text("".join(f"n{a}\tn{b}\n" for a, b in zip(lhs, rhs)))
    return str(path)


def import_config(training_data: TrainingData, paths: dict[str, Any]) -> ConfigSchema:
    """The job's config with these paths, reaching the test S3 server from here."""
    return parse_config({**training_data.config(**paths),
                         "storage_options": training_data.storage_options})


def test_changed_edge_paths_to_a_grown_graph_train_from_the_last_checkpoint(
        cluster: Cluster, s3_job: Any, training_data: TrainingData, tmp_path: Path) -> None:
    root = training_data.root
    paths = {"entity_path": f"{root}/growing/entities", "edge_paths": [f"{root}/growing/v1"]}
    import_edges(import_config(training_data, paths),
                 [community_edges(tmp_path / "v1.tsv", 320, 6000, 0)], ImportOptions(),
                 Reporter("quiet"))
    secret, job = s3_job("growing", num_epochs=4, **paths)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_phase("growing", "Succeeded", JOB_SECONDS)

    # Git brings a grown graph: imported into the same entity folder, a new edge path.
    grown = {**paths, "edge_paths": [f"{root}/growing/v2"]}
    import_edges(import_config(training_data, grown),
                 [community_edges(tmp_path / "v2.tsv", 400, 7500, 1)], ImportOptions(),
                 Reporter("quiet"))
    cluster.kube.patch(JOB_API, JOB_KIND, "growing", {"spec": {"config": {
        "edge_paths": grown["edge_paths"], "num_epochs": 1}}})
    retrained = cluster.wait_for_phase("growing", "Succeeded", JOB_SECONDS, run=2)

    generation = f"{training_data.checkpoint_path}/generation_2"
    assert retrained["status"]["run"]["initPath"] == training_data.checkpoint_path
    assert retrained["status"]["checkpoint"]["path"] == generation
    options = training_data.storage_options
    before, _ = CheckpointStore(Directory(training_data.checkpoint_path, options)) \
        .read_embeddings("node", 0)
    after, _ = CheckpointStore(Directory(generation, options)).read_embeddings("node", 0)
    assert len(before) == 320 and len(after) == 400
    # Known rows went on from their trained values (one more epoch moves them little);
    # started afresh they would point anywhere (cosine about 0).
    cosines = np.sum(before * after[:320], axis=1) / (
        np.linalg.norm(before, axis=1) * np.linalg.norm(after[:320], axis=1))
    assert np.median(cosines) > 0.9
    first, second = cluster.kubelet.logs(TRAINER)
    assert first_loss(second) < first_loss(first) - 0.5
