"""End to end: the partitioned example job (a lock server, two partition servers, two
trainers) trains the planted graph in four partitions on the test S3 server."""

from __future__ import annotations

from typing import Any

import yaml
from e2e.cluster import REPO, Cluster, TrainingData
from e2e.trainer_log import committed_versions

JOB_SECONDS = 180.0
# The test kubelet runs pods without network namespaces, so only one pod at a time can listen
# on the metrics port (8081) that every pod of a cluster has to itself; the others say so.
PORT_TAKEN = '"event": "metrics not served"'
PODS = ["freebase-lock-server", "freebase-partition-server-0", "freebase-partition-server-1",
        "freebase-trainer-0", "freebase-trainer-1"]


def test_the_partitioned_example_trains_with_partition_servers(
        cluster: Cluster, s3_server: Any, partitioned_data: TrainingData) -> None:
    job = yaml.safe_load((REPO / "crds" / "examples" / "partitioned.yaml").read_text())
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"},
              "stringData": {"AWS_ACCESS_KEY_ID": s3_server.key,
                             "AWS_SECRET_ACCESS_KEY": s3_server.secret}}
    job["spec"]["storage"] = {"secretRef": {"name": "s3"}, "endpoint": s3_server.endpoint_url}
    job["spec"]["config"] = partitioned_data.config(num_epochs=2)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    finished = cluster.wait_for_phase("freebase", "Succeeded", JOB_SECONDS)
    assert cluster.phases("freebase") == ["Pending", "Running", "Succeeded"]
    everyone = {"lockServer": 1, "partitionServers": 2, "trainers": 2}
    assert any(status.get("readyPods") == everyone for status in cluster.statuses("freebase"))
    assert finished["status"]["checkpoint"]["version"] == 2
    assert partitioned_data.checkpoint_version(partitioned_data.checkpoint_path) == 2
    for pod in PODS:  # each role ran once, and finished on its own
        [log] = cluster.kubelet.logs(pod)
        lines = [line for line in log.splitlines() if PORT_TAKEN not in line]
        assert "error" not in "\n".join(lines).lower(), log[-2000:]
    assert committed_versions(cluster.kubelet.logs("freebase-trainer-0")[0])[-1] == 2
