"""End to end: EmbeddingJobs applied through the API train on the test S3 server, through the
operator, the API server and the kubelet: success, deletion, a crashed trainer, a bad config,
and a malformed job that the CRD's schema refuses.

Where a test needs the trainer to be mid-run, it waits for a committed checkpoint in the
trainer's log and then pauses the process (a very slow node), so that nothing depends on how
fast this machine trains.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import yaml
from e2e.cluster import (
    GC_SECONDS,
    JOB_API,
    JOB_KIND,
    JOB_SECONDS,
    JOBS,
    REPO,
    STATUS_SECONDS,
    Cluster,
    TrainingData,
)
from e2e.kube_api import PODS
from e2e.kube_client import ApiError, KubeClient, eventually
from e2e.trainer_log import COMMITTED, committed_versions

TRAINER = "umls-trainer-0"


def condition(job: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in job["status"]["conditions"] if c["type"] == kind)


def test_a_job_trains_to_success_and_deleting_it_keeps_the_checkpoints(
        cluster: Cluster, s3_job: Any, training_data: TrainingData) -> None:
    secret, job = s3_job("umls", num_epochs=6)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)
    running = cluster.wait_for_phase("umls", "Running", STATUS_SECONDS)
    shown = eventually(lambda: (cluster.job("umls") or {}).get("status", {}).get(
        "checkpoint", {}).get("version"), "progress in the status while running",
                       STATUS_SECONDS)
    cluster.resume(TRAINER)
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
    # A finished job costs nothing: an edit wakes a reconcile that decides from the watches'
    # caches, reading neither the job nor any log (this test does not read them meanwhile).
    log_reads, job_reads = cluster.api.reads(PODS, TRAINER, "log"), cluster.api.reads(JOBS,
                                                                                      "umls")
    cluster.kube.patch(JOB_API, JOB_KIND, "umls",
                       {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    time.sleep(3.0)
    assert cluster.api.reads(PODS, TRAINER, "log") == log_reads
    assert cluster.api.reads(JOBS, "umls") == job_reads

    assert cluster.phases("umls") == ["Pending", "Running", "Succeeded"]
    while_running = [status for status in cluster.statuses("umls")
                     if status["phase"] == "Running" and "loss" in status.get("progress", {})]
    assert while_running and shown >= 1
    progress = while_running[-1]["progress"]
    assert 1 <= progress["epoch"] <= 6 and progress["numEpochs"] == 6
    assert progress["edgesPerSecond"] > 0 and math.isfinite(progress["loss"])
    assert progress["bucketsTotal"] == 6  # one bucket an epoch
    assert while_running[-1]["readyPods"] == {"trainers": 1}
    assert running["status"]["startTime"] <= finished["status"]["completionTime"]

    status = finished["status"]
    assert status["checkpoint"] == {"path": training_data.checkpoint_path, "version": 6}
    assert status["progress"]["epochs"] == "6/6"
    assert status["progress"]["percentComplete"] == "100%"
    assert status["restarts"] == 0
    assert condition(finished, "Succeeded")["reason"] == "TrainingFinished"
    assert f"checkpoint version 6 in {training_data.checkpoint_path}" in status["message"]
    eventually(lambda: {event["reason"] for event in cluster.kube.list("v1", "Event")
                        if event["involvedObject"]["name"] == "umls"} >= {
        "PodsCreated", "TrainingFinished"}, "an Event for each transition", STATUS_SECONDS)
    assert training_data.checkpoint_version(training_data.checkpoint_path) == 6
    [pod] = cluster.pods("umls")
    assert pod["status"]["phase"] == "Succeeded"
    assert len(cluster.kubelet.logs(TRAINER)) == 1  # one run, nothing restarted

    cluster.kube.delete(JOB_API, JOB_KIND, "umls")
    eventually(lambda: cluster.job("umls") is None and not cluster.pods("umls")
               and not cluster.kube.list("v1", "ConfigMap", "tessera.dev/job=umls")
               and not cluster.kube.list("networking.k8s.io/v1", "NetworkPolicy",
                                         "tessera.dev/job=umls"),
               "the job and its children to be deleted", GC_SECONDS)
    assert training_data.checkpoint_version(training_data.checkpoint_path) == 6


def test_a_killed_trainer_restarts_and_resumes_from_the_last_checkpoint(
        cluster: Cluster, s3_job: Any) -> None:
    secret, job = s3_job("umls", num_epochs=5)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    assert cluster.kubelet.kill(TRAINER)  # SIGKILL, as the OOM killer would
    restarting = cluster.wait_for_phase("umls", "Restarting", STATUS_SECONDS)
    assert restarting["status"]["restarts"] == 1
    assert "exit code 137" in restarting["status"]["message"]
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)

    assert cluster.phases("umls") == ["Pending", "Running", "Restarting", "Running",
                                      "Succeeded"]
    assert finished["status"]["restarts"] == 1
    assert finished["status"]["checkpoint"]["version"] == 5
    first, second = cluster.kubelet.logs(TRAINER)
    before, after = committed_versions(first), committed_versions(second)
    # A trainer announces a version after committing it: killed between the two, its last
    # commit is in storage but not in its log, and the second run starts one version later.
    assert before and after and after[0] - before[-1] in (1, 2)
    assert after == list(range(after[0], 6))


def test_a_bad_config_fails_the_job_at_once_naming_the_file(
        cluster: Cluster, s3_job: Any, training_data: TrainingData) -> None:
    missing = f"{training_data.root}/no-such-edges"
    secret, job = s3_job("umls", edge_paths=[missing])
    cluster.kube.apply(secret)
    cluster.kube.apply(job)

    failed = cluster.wait_for_phase("umls", "Failed", JOB_SECONDS)
    message = condition(failed, "Failed")["message"]
    assert condition(failed, "Failed")["reason"] == "BadInput"
    assert "exit code 65" in message and missing in message and "edge_paths" in message
    assert failed["status"]["restarts"] == 0
    assert cluster.phases("umls")[-1] == "Failed"
    assert "Restarting" not in cluster.phases("umls")
    # No crash loop: the failed pod stays, and no second one is started.
    assert [pod["status"]["phase"] for pod in cluster.pods("umls")] == ["Failed"]
    assert len(cluster.kubelet.logs(TRAINER)) == 1


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("dimension", "wide", "spec.config.dimension"),
    ("num_epochs", -1, "spec.config.num_epochs"),
    ("relation_types", [], 'unknown field "spec.config.relation_types"'),
])
def test_the_crd_schema_rejects_a_malformed_job_at_apply_time(
        kube: KubeClient, field: str, value: Any, problem: str) -> None:
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    job["spec"]["config"][field] = value
    with pytest.raises(ApiError) as rejected:
        kube.apply(job)
    assert rejected.value.status == 422
    assert problem in str(rejected.value)
    assert kube.get(JOB_API, JOB_KIND, job["metadata"]["name"]) is None
