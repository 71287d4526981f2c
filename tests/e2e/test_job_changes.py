"""End to end: what users and operations do to a running EmbeddingJob: suspend and resume it,
change its training config (GitOps retraining from the last checkpoint), restart the operator.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e.cluster import JOB_API, JOB_KIND, JOB_SECONDS, STATUS_SECONDS, Cluster, TrainingData
from e2e.kube_client import eventually
from e2e.trainer_log import COMMITTED, committed_versions, first_loss

from tessera_operator.run_config import CONFIG_FILE

TRAINER = "umls-trainer-0"


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
    # Starting from trained embeddings, the new run's first epoch beats the first run's.
    assert first_loss(second) < first_loss(first) - 0.5
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
