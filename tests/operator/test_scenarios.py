"""Whole job lifetimes, reconciled step by step against a pretend cluster.

Each test drives `next_action` and `desired_status` the way the handlers will, moving pods as
a kubelet would, and checks what a user sees after each step: the phase, the conditions, the
counters, the Events.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from operator_support import CHECKPOINTS_OF_DEMO, Cluster, job_object, lease_held_error

from tessera_operator import conditions as cond
from tessera_operator.decisions import ActionKind
from tessera_operator.progress import parse_progress

TRAINER = "demo-trainer-0"
PROGRESS = [
    '{"time": 1740830400.0, "progress": "train", "done": 400, "total": 1000, "rate": 2000.0, '
    '"epoch": "2/5", "bucket": "(1, 0)", "loss": 0.42, "mrr": 0.31}']
FINISHED = PROGRESS + [
    '{"time": 1740830500.0, "event": "training finished", "edges": 1000, "seconds": 0.5, '
    '"edges_per_s": 2000, "checkpoint_version": 10, "checkpoint": "s3://bucket/demo/checkpoints"}']


def started_cluster() -> Cluster:
    cluster = Cluster(job_object())
    assert cluster.reconcile().kind is ActionKind.CREATE
    cluster.run_all()
    assert cluster.reconcile().kind is ActionKind.WAIT
    return cluster


def test_a_job_from_creation_to_deletion() -> None:
    cluster = Cluster(job_object())
    cluster.job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 3600
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert cluster.status["phase"] == "Pending" and set(cluster.pods) == {TRAINER}
    assert cluster.status["startTime"] == "2025-03-01T12:00:00Z"
    config = json.loads(cluster.config_maps["demo-config"]["data"]["config.json"])
    assert config["checkpoint_path"] == CHECKPOINTS_OF_DEMO
    cluster.run_all()
    cluster.wait(30)
    cluster.reconcile(parse_progress(PROGRESS))
    status = cluster.status
    assert status["phase"] == "Running" and status["readyPods"] == {"trainers": 1}
    assert status["progress"] == {
        "numEpochs": 5, "epoch": 2, "epochs": "2/5", "edgesPerSecond": 2000.0, "loss": 0.42,
        "percentComplete": "40%", "updateTime": "2025-03-01T12:00:00Z"}
    assert status["metrics"] == {"mrr": 0.31}
    cluster.set_pod(TRAINER, "Succeeded", exit_code=0)
    cluster.wait(60)
    assert cluster.reconcile(parse_progress(FINISHED)).kind is ActionKind.SUCCEED
    status = cluster.status
    assert status["phase"] == "Succeeded"
    assert status["checkpoint"] == {"path": CHECKPOINTS_OF_DEMO, "version": 10}
    assert status["progress"]["percentComplete"] == "100%" and status["progress"]["epoch"] == 5
    assert status["completionTime"] == "2025-03-01T12:01:30Z"
    assert TRAINER in cluster.pods  # kept for `kubectl logs`
    cluster.wait(3599)
    assert cluster.reconcile().requeue_after == 1
    cluster.wait(1)
    assert cluster.reconcile().kind is ActionKind.DELETE_JOB and cluster.deleted
    assert [event[1] for event in cluster.events] == [
        cond.PODS_CREATED, cond.TRAINING_FINISHED, cond.TTL_EXPIRED]


def test_a_reconcile_that_changes_nothing_writes_nothing() -> None:
    cluster = started_cluster()
    writes = cluster.status_writes
    cluster.wait(120)
    for _ in range(3):
        assert cluster.reconcile().kind is ActionKind.WAIT
    assert cluster.status_writes == writes


def test_failures_restart_with_back_off_until_the_limit() -> None:
    cluster = started_cluster()  # backoffLimit 2
    running_since = cluster.condition(cond.RUNNING)["lastTransitionTime"]
    for restart, delay in ((1, 10), (2, 20)):
        cluster.set_pod(TRAINER, "Failed", exit_code=75, message="storage unavailable")
        action = cluster.reconcile()
        assert (action.kind, action.reason) == (ActionKind.RESTART, cond.POD_FAILED)
        assert cluster.status["phase"] == "Restarting"
        assert cluster.status["restarts"] == restart
        assert cluster.reconcile().kind is ActionKind.WAIT  # the old pod is still going
        cluster.settle()
        assert cluster.reconcile().requeue_after == delay
        cluster.wait(delay)
        assert cluster.reconcile().kind is ActionKind.CREATE
        assert cluster.pods[TRAINER]["metadata"]["labels"]["tessera.dev/run"] == str(restart + 1)
        cluster.run_all()
        cluster.reconcile()
        assert cluster.status["phase"] == "Running"
        assert cluster.condition(cond.RESTARTING)["status"] == "False"
    assert cluster.condition(cond.RUNNING)["lastTransitionTime"] != running_since
    assert cluster.status["checkpoint"]["path"] == CHECKPOINTS_OF_DEMO  # resumes in place
    cluster.set_pod(TRAINER, "Failed", exit_code=137, message="")
    assert cluster.reconcile().kind is ActionKind.FAIL
    assert cluster.status["phase"] == "Failed"
    assert cluster.condition(cond.FAILED)["reason"] == cond.BACKOFF_LIMIT_EXCEEDED
    assert [e[0] for e in cluster.events].count("Warning") == 3


def test_scaling_mid_run_waits_out_a_lease_left_behind_without_charging_it() -> None:
    now = datetime.now(timezone.utc).replace(microsecond=0)  # the lease's clock
    cluster = Cluster(job_object(), now=now)  # backoffLimit 2
    cluster.reconcile()
    cluster.run_all()
    cluster.reconcile()
    cluster.edit_spec(lambda spec: spec.setdefault("trainers", {}).update(replicas=2))
    assert cluster.reconcile().reason == cond.SPEC_CHANGED
    cluster.settle()  # the trainer is gone, SIGKILLed before it could release its lease
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert set(cluster.pods) == {"demo-lock-server", TRAINER, "demo-trainer-1"}
    cluster.run_all()
    cluster.reconcile()
    expires = now + timedelta(seconds=50)
    cluster.set_pod("demo-lock-server", "Failed", exit_code=75,
                    message=lease_held_error(TRAINER, expires))

    assert cluster.reconcile().kind is ActionKind.HOLD
    assert cluster.status["phase"] == "Restarting"
    assert "restarting when it expires" in cluster.status["message"]
    writes = cluster.status_writes
    cluster.wait(30)
    assert cluster.reconcile().requeue_after == 20 and cluster.status_writes == writes
    cluster.wait(20)
    assert cluster.reconcile().reason == cond.PREDECESSOR_LEASE
    cluster.settle()
    assert cluster.reconcile().kind is ActionKind.CREATE  # at once: no back-off
    cluster.run_all()
    cluster.reconcile()
    assert cluster.status["phase"] == "Running"
    assert (cluster.status["run"]["number"], cluster.status["restarts"]) == (3, 0)
    assert [event[:2] for event in cluster.events] == [
        ("Normal", cond.PODS_CREATED), ("Normal", cond.SPEC_CHANGED),
        ("Normal", cond.PODS_CREATED), ("Normal", cond.PREDECESSOR_LEASE),
        ("Normal", cond.PODS_CREATED)]


def test_bad_input_fails_at_once_with_the_trainers_message() -> None:
    cluster = started_cluster()
    cluster.set_pod(TRAINER, "Failed", exit_code=65, message=(
        '{"progress": "train", "done": 0}\n'
        "tessera train: error: relations[0].lhs: unknown entity type 'usr'"))
    assert cluster.reconcile().kind is ActionKind.FAIL
    assert cluster.status["phase"] == "Failed" and cluster.status["restarts"] == 0
    assert cluster.status["message"].endswith(
        "tessera train: error: relations[0].lhs: unknown entity type 'usr'")
    assert cluster.reconcile().kind is ActionKind.WAIT  # and stays failed


def test_an_invalid_spec_fails_without_pods_until_fixed() -> None:
    cluster = Cluster(job_object())
    cluster.job["spec"]["config"]["relations"][0]["lhs"] = "usr"
    assert cluster.reconcile().kind is ActionKind.FAIL
    assert not cluster.pods and cluster.status["phase"] == "Failed"
    assert cluster.status["message"].startswith("spec.config.relations[0].lhs: unknown entity")
    assert cluster.reconcile().kind is ActionKind.WAIT
    cluster.edit_spec(lambda spec: spec["config"]["relations"][0].update(lhs="user"))
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert cluster.status["phase"] == "Pending" and set(cluster.pods) == {TRAINER}
    assert cluster.condition(cond.FAILED)["status"] == "False"


def test_suspend_and_resume_continue_from_the_checkpoint() -> None:
    cluster = started_cluster()
    cluster.edit_spec(lambda spec: spec["runPolicy"].update(suspend=True))
    assert cluster.reconcile().kind is ActionKind.SUSPEND
    assert cluster.status["phase"] == "Suspended"
    cluster.settle()
    assert cluster.reconcile().kind is ActionKind.WAIT and not cluster.pods
    assert cluster.status["phase"] == "Suspended" and cluster.status["readyPods"] == {
        "trainers": 0}
    cluster.wait(3600)
    cluster.edit_spec(lambda spec: spec["runPolicy"].update(suspend=False))
    assert cluster.reconcile().kind is ActionKind.RESUME
    assert "startTime" not in cluster.status  # the deadline counts from the new pods
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert cluster.status["run"]["number"] == 2 and cluster.status["restarts"] == 0
    assert cluster.status["startTime"] == "2025-03-01T13:00:00Z"
    config = json.loads(cluster.config_maps["demo-config"]["data"]["config.json"])
    assert config["checkpoint_path"] == CHECKPOINTS_OF_DEMO and config["init_path"] is None


def test_a_changed_config_retrains_from_the_last_checkpoint() -> None:
    cluster = started_cluster()
    cluster.set_pod(TRAINER, "Succeeded", exit_code=0)
    cluster.reconcile(parse_progress(FINISHED))
    assert cluster.status["phase"] == "Succeeded"
    cluster.edit_spec(lambda spec: spec["config"].update(num_epochs=8))
    action = cluster.reconcile()
    assert action.kind is ActionKind.NEW_RUN and action.delete_pods == (TRAINER,)
    status = cluster.status
    assert status["phase"] == "Pending" and "completionTime" not in status
    assert status["checkpoint"] == {"path": f"{CHECKPOINTS_OF_DEMO}/generation_2"}
    assert status["run"]["initPath"] == CHECKPOINTS_OF_DEMO
    assert status["progress"] == {"numEpochs": 8, "epoch": 0, "epochs": "0/8"}
    assert "metrics" not in status
    cluster.settle()
    assert cluster.reconcile().kind is ActionKind.CREATE
    config = json.loads(cluster.config_maps["demo-config"]["data"]["config.json"])
    assert (config["checkpoint_path"], config["init_path"], config["num_epochs"]) == (
        f"{CHECKPOINTS_OF_DEMO}/generation_2", CHECKPOINTS_OF_DEMO, 8)


def test_a_vanished_pod_restarts_the_run() -> None:
    cluster = started_cluster()
    del cluster.pods[TRAINER]
    action = cluster.reconcile()
    assert (action.kind, action.reason) == (ActionKind.RESTART, cond.POD_VANISHED)
    assert cluster.status["restarts"] == 1


def test_an_interrupted_create_is_finished_without_duplicates() -> None:
    cluster = Cluster(job_object())
    cluster.reconcile()
    del cluster.job["status"]  # the operator died before writing the status
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert list(cluster.pods) == [TRAINER]
    cluster.run_all()
    cluster.reconcile()
    assert cluster.status["phase"] == "Running" and cluster.status["restarts"] == 0


def test_the_deadline_fails_a_run_that_takes_too_long() -> None:
    cluster = Cluster(job_object())
    cluster.job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 600
    cluster.reconcile()
    cluster.run_all()
    cluster.wait(300)
    assert cluster.reconcile().requeue_after == 300
    cluster.wait(300)
    action = cluster.reconcile()
    assert (action.kind, action.delete_pods) == (ActionKind.FAIL, (TRAINER,))
    assert cluster.condition(cond.FAILED)["reason"] == cond.DEADLINE_EXCEEDED


def test_no_credentials_reach_the_status_or_the_events() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    cluster = started_cluster()
    cluster.set_pod(TRAINER, "Failed", exit_code=75, message=(
        f"ClientError: signature mismatch for aws_secret_access_key={secret} "
        "https://bucket.s3.amazonaws.com/k?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F2025"))
    cluster.reconcile(parse_progress([f'{{"event": "retry", "secret": "{secret}"}}']))
    text = json.dumps([cluster.status, cluster.events])
    assert "ClientError" in text
    assert secret not in text and "AKIAIOSFODNN7EXAMPLE" not in text


def test_a_suspended_job_whose_spec_is_fixed_stays_suspended_not_failed() -> None:
    cluster = Cluster(job_object())
    cluster.job["spec"]["runPolicy"]["suspend"] = True
    cluster.job["spec"]["image"] = ""
    assert cluster.reconcile().kind is ActionKind.FAIL
    assert cluster.status["phase"] == "Failed" and "completionTime" in cluster.status
    cluster.edit_spec(lambda spec: spec.update(image="tessera-trainer:0.1.0"))
    assert cluster.reconcile().kind is ActionKind.WAIT and not cluster.pods
    assert cluster.status["phase"] == "Suspended" and "completionTime" not in cluster.status
    assert cluster.condition(cond.FAILED)["reason"] == cond.SPEC_FIXED
    cluster.edit_spec(lambda spec: spec["runPolicy"].update(suspend=False))
    assert cluster.reconcile().kind is ActionKind.CREATE
    assert cluster.status["phase"] == "Pending"


def test_an_invalid_spec_quoting_a_credential_is_reported_once_and_redacted() -> None:
    cluster = Cluster(job_object())
    cluster.job["spec"]["storage"]["secretRef"] = {"name": "creds", "password": "hunter2"}
    for _ in range(3):
        cluster.reconcile()
    assert [event[1] for event in cluster.events] == [cond.INVALID_SPEC]
    assert cluster.status["message"].startswith("spec.storage.secretRef.password: unknown")
    cluster.job["spec"]["image"] = {"token": "ghp_s3cr3t"}
    cluster.reconcile()
    assert "ghp_s3cr3t" not in json.dumps([cluster.status, cluster.events])
