"""End to end: a GPU job through the API server. Config `num_gpus` puts `nvidia.com/gpu` on the
trainer pods only, each role gets its own node selector and tolerations, and a trainer that no
node can take (the test node offers one GPU, the job asks for two per trainer) is named in the
job's status instead of leaving it silently Pending."""

from __future__ import annotations

from typing import Any

from e2e.cluster import STATUS_SECONDS, Cluster
from e2e.kube_client import eventually

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SERVERS = ("gpu-lock-server", "gpu-partition-server-0")


def running_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Running"), {})


def test_a_gpu_job_places_each_role_and_names_the_trainer_no_node_can_take(
        cluster: Cluster, s3_job: Any) -> None:
    secret, job = s3_job("gpu", num_gpus=2)
    spec = job["spec"]
    spec["trainers"].update(nodeSelector={"nvidia.com/gpu.present": "true"},
                            tolerations=[GPU_TOLERATION])
    spec["partitionServers"] = {"replicas": 1, "nodeSelector": {"node-pool": "training"}}
    spec["lockServer"] = {"nodeSelector": {"node-pool": "training"}}
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    def unschedulable() -> dict[str, Any] | None:
        status = (cluster.job("gpu") or {}).get("status") or {}
        return status if running_condition(status).get("reason") == "PodsUnschedulable" \
            else None

    status = eventually(unschedulable, "the job to say that its trainer cannot be scheduled",
                        STATUS_SECONDS)
    assert status["phase"] == "Pending"
    assert status["message"] == running_condition(status)["message"] == (
        "run 1: 1 pod(s) cannot be scheduled; gpu-trainer-0: Unschedulable: 0/1 nodes are "
        "available: 1 Insufficient nvidia.com/gpu.")

    # The pods as the API server stores them: the servers, placed on the CPU pool, run; the
    # trainer asks for the GPUs on the GPU pool and waits, unbound.
    def servers_bound() -> dict[str, dict[str, Any]] | None:
        pods = {pod["metadata"]["name"]: pod for pod in cluster.pods("gpu")}
        bound = all(pods.get(name, {}).get("spec", {}).get("nodeName") == "node-0"
                    for name in SERVERS)
        return pods if bound else None

    pods = eventually(servers_bound, "the servers to be scheduled", STATUS_SECONDS)
    assert set(pods) == {*SERVERS, "gpu-trainer-0"}
    trainer = pods["gpu-trainer-0"]
    assert trainer["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "2Gi", "nvidia.com/gpu": "2"}}
    assert trainer["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert GPU_TOLERATION in trainer["spec"]["tolerations"]
    assert "nodeName" not in trainer["spec"]
    (scheduled,) = [c for c in trainer["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    for name in SERVERS:
        server = pods[name]["spec"]
        assert server["nodeSelector"] == {"node-pool": "training"}
        assert "nvidia.com/gpu" not in str(server["containers"][0]["resources"])
        assert GPU_TOLERATION not in server.get("tolerations", [])
