"""End to end: a job's lifecycle follows its pods whatever happens around them: pod logs the
API server cannot read (the kubelet unreachable, the log permission missing), and a pod stuck
terminating on a node that does not answer.

The log faults are the API server's answers to pods/log (`ApiServer.fail_logs`); the stuck
pod is one the kubelet leaves running after its deletion (`Kubelet.hold_deletions`).
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e.cluster import JOB_SECONDS, STATUS_SECONDS, Cluster, TrainingData
from e2e.kube_api import PODS
from e2e.kube_client import eventually
from e2e.trainer_log import COMMITTED, committed_versions

TRAINER = "umls-trainer-0"
PHASE_FOLLOWS_SECONDS = 15.0  # from the pod's end to the job's phase, whatever the logs do
UNAVAILABLE = {500: "pod log read failed (HTTP 500)", 503: "pod log read failed (HTTP 503)",
               403: "pod log read refused (HTTP 403)"}


def pod_phase(cluster: Cluster, phase: str) -> bool:
    return [pod["status"].get("phase") for pod in cluster.pods("umls")] == [phase]


@pytest.mark.parametrize("fault", sorted(UNAVAILABLE))
def test_a_failing_trainer_fails_the_job_while_its_log_cannot_be_read(
        cluster: Cluster, s3_job: Any, training_data: TrainingData, fault: int) -> None:
    cluster.api.fail_logs(fault)
    secret, job = s3_job("umls", edge_paths=[f"{training_data.root}/no-such-edges"])
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    eventually(lambda: pod_phase(cluster, "Failed"), "the trainer to fail", JOB_SECONDS)
    failed = cluster.wait_for_phase("umls", "Failed", PHASE_FOLLOWS_SECONDS)

    status = failed["status"]
    assert "exit code 65" in status["message"] and "edge_paths" in status["message"]
    assert status["message"].endswith(f"progress unavailable: {UNAVAILABLE[fault]}"
                                      + ("" if fault != 403 else ": the operator's role needs "
                                         "get on pods/log") + "; none reported yet")
    assert status["progress"]["readError"].startswith(UNAVAILABLE[fault])
    assert cluster.api.reads(PODS, TRAINER, "log") >= 1  # it did try
    assert cluster.phases("umls")[-1] == "Failed" and "Restarting" not in cluster.phases("umls")


@pytest.mark.parametrize("fault", [503, 403])
def test_a_job_succeeds_while_its_log_cannot_be_read_and_keeps_the_last_progress(
        cluster: Cluster, s3_job: Any, training_data: TrainingData, fault: int) -> None:
    secret, job = s3_job("umls", num_epochs=4)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)
    # The trainer may have committed again before it stopped: the status must show the last
    # version its log holds before the fault, or the follower's next record would move it.
    def last_said_is_shown() -> int | None:
        said = committed_versions(cluster.kubelet.logs(TRAINER)[-1])[-1]
        status = (cluster.job("umls") or {}).get("status", {})
        return said if status.get("checkpoint", {}).get("version") == said else None

    shown = eventually(last_said_is_shown, "the last commit in the status", STATUS_SECONDS)

    cluster.api.fail_logs(fault)
    cluster.resume(TRAINER)
    eventually(lambda: pod_phase(cluster, "Succeeded"), "the trainer to finish", JOB_SECONDS)
    finished = cluster.wait_for_phase("umls", "Succeeded", PHASE_FOLLOWS_SECONDS)

    status = finished["status"]
    assert status["message"].startswith("training finished")
    assert f"progress unavailable: {UNAVAILABLE[fault]}" in status["message"]
    assert "; last known: epoch " in status["message"]
    # What the trainer said before the fault stays; the end is known from the pods.
    assert status["checkpoint"] == {"path": training_data.checkpoint_path, "version": shown}
    assert status["progress"]["percentComplete"] == "100%"
    assert status["progress"]["epochs"] == "4/4" and "eta" not in status["progress"]
    assert cluster.phases("umls") == ["Pending", "Running", "Succeeded"]


def test_a_pod_stuck_terminating_shows_the_restart_never_pending(cluster: Cluster,
                                                                  s3_job: Any) -> None:
    secret, job = s3_job("umls", num_epochs=5)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)  # mid-run, so that it cannot finish while it is stuck
    cluster.wait_for_phase("umls", "Running", STATUS_SECONDS)

    cluster.kubelet.hold_deletions()
    cluster.kube.delete("v1", "Pod", TRAINER)  # `kubectl delete pod`, a drain, an eviction
    restarting = cluster.wait_for_phase("umls", "Restarting", STATUS_SECONDS)
    [stuck] = cluster.pods("umls")
    assert stuck["metadata"].get("deletionTimestamp") and stuck["status"]["phase"] == "Running"
    assert restarting["status"]["restarts"] == 1
    assert f"{TRAINER} is being deleted" in restarting["status"]["message"]
    assert cluster.phases("umls") == ["Pending", "Running", "Restarting"]

    cluster.kubelet.release_deletions()
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
    assert cluster.phases("umls") == ["Pending", "Running", "Restarting", "Running",
                                      "Succeeded"]
    assert finished["status"]["restarts"] == 1
    first, second = cluster.kubelet.logs(TRAINER)
    before, after = committed_versions(first), committed_versions(second)
    # Paused between a commit and its announcement, the first run logged one version less.
    assert before and after and after[0] - before[-1] in (1, 2)
    assert after == list(range(after[0], 6))
