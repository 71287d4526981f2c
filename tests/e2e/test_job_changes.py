"""End to end: what users and operations do to a running EmbeddingJob: suspend and resume it,
change its training config (GitOps retraining from the last checkpoint), scale its trainers,
restart the operator.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from e2e.cluster import JOB_API, JOB_KIND, JOB_SECONDS, STATUS_SECONDS, Cluster, TrainingData
from e2e.kube_client import eventually
from e2e.trainer_log import COMMITTED, committed_versions, records

from tessera.storage.lease import LEASE_FILE, LeaseRecord
from tessera_operator.conditions import PREDECESSOR_LEASE, RESTARTING
from tessera_operator.run_config import CONFIG_FILE

TRAINER = "umls-trainer-0"
LOCK_SERVER = "umls-lock-server"
LOCK_SERVER_STARTED = "lock server waiting for peers"  # with the version it resumes from
HANDOVER_SECONDS = 40.0  # from the edit to the new run's first commit, with no lease to wait
LEFT_LEASE_SECONDS = 25.0  # how long a lease left behind still holds the new trainer up


def test_a_suspended_job_stops_its_pods_and_resumes_from_the_checkpoint(
        cluster: Cluster, s3_job: Any, training_data: TrainingData) -> None:
    secret, job = s3_job("umls", num_epochs=5)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)  # mid-run, however fast this machine trains

    cluster.kube.patch(JOB_API, JOB_KIND, "umls", {"spec": {"runPolicy": {"suspend": True}}})
    suspended = cluster.wait_for_phase("umls", "Suspended", STATUS_SECONDS)
    eventually(lambda: not cluster.pods("umls"), "the pods to be deleted", STATUS_SECONDS)
    assert "suspended" in suspended["status"]["message"]
    stored = training_data.checkpoint_version(training_data.checkpoint_path)

    cluster.kube.patch(JOB_API, JOB_KIND, "umls", {"spec": {"runPolicy": {"suspend": False}}})
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
    assert cluster.phases("umls") == ["Pending", "Running", "Suspended", "Pending", "Running",
                                      "Succeeded"]
    assert finished["status"]["restarts"] == 0  # asked for, not a failure
    first, second = cluster.kubelet.logs(TRAINER)
    before = committed_versions(first)
    # Stopped between a commit and its announcement, the first run logged one version less.
    assert before and stored in (before[-1], before[-1] + 1)
    assert committed_versions(second) == list(range(stored + 1, 6))


@pytest.mark.parametrize("during_a_run", [False, True], ids=["after-success", "mid-run"])
def test_a_changed_config_trains_a_new_generation_from_the_last_checkpoint(
        cluster: Cluster, s3_job: Any, training_data: TrainingData, during_a_run: bool) -> None:
    secret, job = s3_job("umls", num_epochs=4)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    if during_a_run:
        cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
        cluster.pause(TRAINER)
        # The edit comes at once, whether or not the operator's stream of the log has handed
        # the commit over yet: the new run must start from it all the same.
        first_phases = ["Pending", "Running"]
    else:
        cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
        first_phases = ["Pending", "Running", "Succeeded"]

    cluster.kube.patch(JOB_API, JOB_KIND, "umls", {"spec": {"config": {"num_epochs": 3}}})
    # The pod name is reused, so the second run's trainer starts only once the first one's
    # process is gone: from then on the first generation holds what that process committed.
    eventually(lambda: len(cluster.kubelet.logs(TRAINER)) == 2, "the second run's trainer",
               JOB_SECONDS)
    previous = training_data.checkpoint_version(training_data.checkpoint_path)
    retrained = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS, run=2)

    first, second = cluster.kubelet.logs(TRAINER)
    # A trainer announces a version after committing it; stopped between the two (paused,
    # then deleted), its last commit is in storage but not in its log.
    announced = committed_versions(first)[-1]
    assert previous == announced or (during_a_run and previous == announced + 1)
    generation = f"{training_data.checkpoint_path}/generation_2"
    assert retrained["status"]["observedGeneration"] == 2
    assert retrained["status"]["checkpoint"] == {"path": generation, "version": 3}
    assert retrained["status"]["run"]["initPath"] == training_data.checkpoint_path
    [config_map] = cluster.kube.list("v1", "ConfigMap", "tessera.dev/job=umls")
    config = json.loads(config_map["data"][CONFIG_FILE])
    assert (config["init_path"], config["checkpoint_path"], config["num_epochs"]) == (
        training_data.checkpoint_path, generation, 3)
    # The first generation's checkpoints stay; the second has its own.
    assert training_data.checkpoint_version(training_data.checkpoint_path) == previous
    assert training_data.checkpoint_version(generation) == 3
    # Starting from trained embeddings, the new run's first bucket beats the first run's.
    assert training_data.first_chunk_loss(generation) < \
        training_data.first_chunk_loss(training_data.checkpoint_path) - 0.5
    assert cluster.phases("umls") == [*first_phases, "Pending", "Running", "Succeeded"]
    # The second run's status never shows the first run's checkpoints or epochs.
    second_run = [status for status in cluster.statuses("umls")
                  if status["run"]["number"] == 2]
    assert all(status["checkpoint"]["path"] == generation and
               status["checkpoint"].get("version", 0) <= 3 and
               status["progress"]["epoch"] <= 3 for status in second_run)


def test_a_restarted_operator_adopts_the_running_pods(cluster: Cluster, s3_job: Any) -> None:
    secret, job = s3_job("umls", num_epochs=4)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)
    cluster.wait_for_phase("umls", "Running", STATUS_SECONDS)

    cluster.operator.stop()
    cluster.operator.start()
    eventually(lambda: cluster.operator.output().count("Daemon 'run_job' is invoked") == 2,
               "the new operator to reconcile the job", STATUS_SECONDS)
    cluster.resume(TRAINER)
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)

    assert finished["status"]["restarts"] == 0
    assert cluster.phases("umls") == ["Pending", "Running", "Succeeded"]
    assert len(cluster.pod_uids(TRAINER)) == 1  # one pod, ever
    assert len(cluster.kubelet.logs(TRAINER)) == 1


RUN_2_PODS = (LOCK_SERVER, TRAINER, "umls-trainer-1")


def test_trainers_scaled_mid_run_resume_from_the_last_checkpoint_uncharged(
        cluster: Cluster, s3_job: Any, training_data: TrainingData) -> None:
    """1 -> 2 -> 1 trainers. Scaling up is the usual hand-over: the trainer stops on SIGTERM
    and releases its lease, so the new lock server takes it at once. Scaling down, the lock
    server outlives its grace period (SIGKILLed: a hung node, an image without the handler)
    and leaves its lease behind: the new trainer waits for it to expire, not charged."""
    secret, job = s3_job("umls", num_epochs=6)
    job["spec"]["runPolicy"]["backoffLimit"] = 0  # one charged restart fails the job
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)  # mid-run, however fast this machine trains
    scale(cluster, 2)
    eventually(lambda: len(cluster.kubelet.logs(TRAINER)) == 2, "run 2's trainer", JOB_SECONDS)
    cluster.wait_for_log(TRAINER, COMMITTED, HANDOVER_SECONDS)
    assert len(cluster.kubelet.logs(LOCK_SERVER)) == 1  # it took the lease at once

    for pod in RUN_2_PODS:  # a hung node: nobody's missed heartbeat aborts the run meanwhile
        cluster.pause(pod)
    cluster.kubelet.hold_deletions()
    scale(cluster, 1)
    eventually(lambda: all(pod["metadata"].get("deletionTimestamp")
                           for pod in cluster.pods("umls")), "run 2's pods to be deleted",
               STATUS_SECONDS)
    for pod in RUN_2_PODS:
        cluster.kubelet.kill(pod)  # their grace period is over
    left = expire_soon(training_data, LEFT_LEASE_SECONDS)
    assert left.host == LOCK_SERVER
    stored = training_data.checkpoint_version(training_data.checkpoint_path)
    cluster.kubelet.release_deletions()
    finished = eventually(lambda: finished_job(cluster), "the job to finish", JOB_SECONDS)

    status = finished["status"]
    assert (status["phase"], status["restarts"]) == ("Succeeded", 0), status["message"]
    assert status["checkpoint"]["version"] == 6
    waited = {c["message"] for s in cluster.statuses("umls") for c in s["conditions"]
              if (c["type"], c["reason"]) == (RESTARTING, PREDECESSOR_LEASE)}
    assert len(waited) == 2  # until the lease expires, then restarting
    assert all(f"held by {LOCK_SERVER}" in message and "not counted against backoffLimit"
               in message for message in waited)
    first, _, blocked, last = cluster.kubelet.logs(TRAINER)
    # Each run resumed from the last checkpoint: run 2 from run 1's (which, paused between
    # a commit and its announcement, logged one version less), run 4 from run 2's.
    [resumed] = [record["checkpoint_version"] for record in records(
        cluster.kubelet.logs(LOCK_SERVER)[0]) if record.get("event") == LOCK_SERVER_STARTED]
    assert resumed - committed_versions(first)[-1] in (0, 1) and stored > resumed
    assert f"on host {LOCK_SERVER})" in blocked and not committed_versions(blocked)
    assert committed_versions(last) == list(range(stored + 1, 7))
    assert "took over the checkpoint lease of a stopped run" in last


def scale(cluster: Cluster, trainers: int) -> None:
    cluster.kube.patch(JOB_API, JOB_KIND, "umls", {"spec": {"trainers": {"replicas": trainers}}})


def expire_soon(data: TrainingData, seconds: float) -> LeaseRecord:
    """Bring the expiry of the lease a killed holder left forward to `seconds` from now (a
    real one takes up to a minute, which the test need not sit out); returns it as it was."""
    path = f"{data.checkpoint_path}/{LEASE_FILE}"
    lease = LeaseRecord.from_json(data.read(path), path)
    soon = dataclasses.replace(lease, expires=datetime.now(timezone.utc)
                               + timedelta(seconds=seconds))
    data.filesystem().pipe_file(path.removeprefix("s3://"), soon.to_json().encode())
    return lease


def finished_job(cluster: Cluster) -> dict[str, Any] | None:
    job = cluster.job("umls") or {}
    return job if job.get("status", {}).get("phase") in ("Succeeded", "Failed") else None
