"""End to end on the real control plane only: what the emulator cannot show. kube-apiserver
killed and started again mid-run (the operator, the kubelet and the test's clients reconnect;
the job succeeds with its one pod), and a deadline and a TTL carried out against the real
garbage collector (the job's children go with it, its checkpoints stay).

The other faults (pod logs unreachable, a pod stuck terminating) run on both API servers in
`test_job_faults`.
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e.cluster import JOB_SECONDS, NAMESPACE, STATUS_SECONDS, Cluster, TrainingData
from e2e.kube_api import PODS
from e2e.kube_client import eventually
from e2e.real_api import RealApi
from e2e.trainer_log import COMMITTED, committed_versions

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

TRAINER = "umls-trainer-0"
API_DOWN_SECONDS = 8.0
DEADLINE_SECONDS = 20
TTL_SECONDS = 5


REAL_ONLY = pytest.mark.parametrize("cluster", ["real"], indirect=True)


@REAL_ONLY
def test_the_job_succeeds_across_an_api_server_restart_with_one_pod(
        cluster: Cluster, s3_job: Any) -> None:
    secret, job = s3_job("umls", num_epochs=5)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)
    cluster.wait_for_phase("umls", "Running", STATUS_SECONDS)

    cluster.resume(TRAINER)  # it trains on while the API server is down, and may finish then
    assert cluster.control_plane is not None and isinstance(cluster.api, RealApi)
    cluster.control_plane.restart_api_server(API_DOWN_SECONDS)
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)

    assert finished["status"]["restarts"] == 0
    assert finished["status"]["checkpoint"]["version"] == 5
    assert cluster.phases("umls") == ["Pending", "Running", "Succeeded"]
    assert cluster.api.creations(PODS, NAMESPACE) == [TRAINER]  # no duplicate, ever
    [log] = cluster.kubelet.logs(TRAINER)
    assert committed_versions(log)[-1] == 5


@REAL_ONLY
def test_a_job_past_its_deadline_fails_and_its_ttl_deletes_it_and_its_children(
        cluster: Cluster, s3_job: Any, training_data: TrainingData) -> None:
    secret, job = s3_job("umls", num_epochs=1000)
    job["spec"]["runPolicy"] = {"activeDeadlineSeconds": DEADLINE_SECONDS,
                                "ttlSecondsAfterFinished": TTL_SECONDS}
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)

    failed = cluster.wait_for_phase("umls", "Failed", DEADLINE_SECONDS + STATUS_SECONDS)
    [failure] = [c for c in failed["status"]["conditions"] if c["type"] == "Failed"]
    assert failure["reason"] == "DeadlineExceeded"
    assert f"activeDeadlineSeconds ({DEADLINE_SECONDS} s)" in failure["message"]
    eventually(lambda: not [pod for pod in cluster.pods("umls")
                            if pod["status"].get("phase") == "Running"],
               "the trainer to be stopped", STATUS_SECONDS)

    eventually(lambda: cluster.job("umls") is None, "the TTL to delete the job",
               TTL_SECONDS + STATUS_SECONDS)
    # kube-controller-manager's garbage collector deletes what the job owned.
    eventually(lambda: not cluster.pods("umls") and not cluster.kube.list(
        "v1", "ConfigMap", "tessera.dev/job=umls"), "the job's children to be deleted",
               STATUS_SECONDS)
    assert training_data.checkpoint_version(training_data.checkpoint_path) >= 1
    assert cluster.phases("umls")[-1] == "Failed"
