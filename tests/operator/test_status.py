"""desired_status details: merge patches, ready pods, progress kept over short log tails, and
agreement with the status schema of the CRD."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from operator_support import START, job_object, pod_object

from tessera_operator import crd
from tessera_operator.decisions import Action, ActionKind, next_action
from tessera_operator.job import view_job
from tessera_operator.pods import observe_pod
from tessera_operator.progress import TrainingProgress, parse_progress
from tessera_operator.status import desired_status, format_duration, status_patch


def closed(node: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema node as the API server enforces it: objects with properties are closed
    (pruning plus strict field validation), nullable means null is allowed."""
    out = {key: value for key, value in node.items() if not key.startswith("x-kubernetes")}
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {name: closed(child) for name, child in out["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = closed(out["items"])
    return out


def distributed_job(**status: Any) -> dict[str, Any]:
    job = job_object()
    job["spec"]["trainers"] = {"replicas": 2}
    job["spec"]["partitionServers"] = {"replicas": 1}
    if status:
        job["status"] = status
    return job


def test_patch_is_none_when_nothing_changed_and_removes_what_went() -> None:
    current = {"phase": "Running", "progress": {"epoch": 2, "loss": 0.5},
               "completionTime": "2025-03-01T12:00:00Z", "kopf": {"progress": {}}}
    assert status_patch(current, {"phase": "Running",
                                  "progress": {"epoch": 2, "loss": 0.5},
                                  "completionTime": "2025-03-01T12:00:00Z"}) is None
    assert status_patch(current, {"phase": "Running", "progress": {"epoch": 3}}) == {
        "completionTime": None, "progress": {"epoch": 3, "loss": None}}


def test_ready_pods_count_running_pods_of_the_current_run_per_role() -> None:
    view = view_job(distributed_job())
    action = next_action(view, [], START)
    status = desired_status(view, [], None, action, START)
    assert status["readyPods"] == {"lockServer": 0, "partitionServers": 0, "trainers": 0}
    pods = [observe_pod(pod_object(name, role=role, run=run, phase=phase)) for name, role, run,
            phase in [("demo-lock-server", "lock-server", 1, "Running"),
                      ("demo-partition-server-0", "partition-server", 1, "Pending"),
                      ("demo-trainer-0", "trainer", 1, "Running"),
                      ("demo-trainer-1", "trainer", 1, "Running"),
                      ("demo-trainer-9", "trainer", 0, "Running")]]
    view = view_job(distributed_job(**status))
    status = desired_status(view, pods, None, next_action(view, pods, START), START)
    assert status["readyPods"] == {"lockServer": 1, "partitionServers": 0, "trainers": 2}


def test_a_job_still_runs_while_some_of_its_pods_have_finished() -> None:
    view = view_job(distributed_job())
    status = desired_status(view, [], None, next_action(view, [], START), START)
    pods = [observe_pod(pod_object(name, role=role, phase=phase, exit_code=code))
            for name, role, phase, code in [
                ("demo-lock-server", "lock-server", "Running", None),
                ("demo-partition-server-0", "partition-server", "Running", None),
                ("demo-trainer-0", "trainer", "Succeeded", 0),
                ("demo-trainer-1", "trainer", "Running", None)]]
    view = view_job(distributed_job(**status))
    status = desired_status(view, pods, None, next_action(view, pods, START), START)
    assert (status["phase"], status["message"]) == ("Running",
                                                    "run 1: 3 pod(s) running, 1 finished")
    assert status["readyPods"] == {"lockServer": 1, "partitionServers": 1, "trainers": 1}


def unschedulable(name: str, role: str, message: str) -> dict[str, Any]:
    """A pending pod the scheduler found no node for, as kube-scheduler reports it."""
    pod = pod_object(name, role=role, phase="Pending")
    pod["status"]["containerStatuses"] = []
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                    "reason": "Unschedulable", "message": message}]
    return pod


def test_a_pod_no_node_can_take_is_named_in_the_status() -> None:
    view = view_job(distributed_job())
    status = desired_status(view, [], None, next_action(view, [], START), START)
    no_gpu = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods = [observe_pod(pod) for pod in [
        pod_object("demo-lock-server", role="lock-server", phase="Pending",
                   waiting=("ContainerCreating", "")),
        pod_object("demo-partition-server-0", role="partition-server"),
        pod_object("demo-trainer-0", role="trainer"),
        unschedulable("demo-trainer-1", "trainer", no_gpu)]]
    view = view_job(distributed_job(**status))
    status = desired_status(view, pods, None, next_action(view, pods, START), START)
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    # The lock server comes first but is only starting: the trainer that cannot start is named.
    assert (running["status"], running["reason"]) == ("False", "PodsUnschedulable")
    assert running["message"] == (f"run 1: 1 pod(s) cannot be scheduled; demo-trainer-1: "
                                  f"Unschedulable: {no_gpu}")
    assert (status["phase"], status["message"]) == ("Pending", running["message"])
    # Once the scheduler placed it, the job waits for it as for any starting pod.
    pods[3] = observe_pod(pod_object("demo-trainer-1", role="trainer", phase="Pending",
                                     waiting=("ContainerCreating", "")))
    view = view_job(distributed_job(**status))
    status = desired_status(view, pods, None, next_action(view, pods, START), START)
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert (running["reason"], running["message"]) == (
        "PodsPending", "run 1: waiting for 2 pod(s); demo-lock-server: ContainerCreating")


def test_what_a_short_log_tail_does_not_say_keeps_its_value() -> None:
    view = view_job(job_object())
    pods = [observe_pod(pod_object("demo-trainer-0"))]
    first = parse_progress(['{"progress": "train", "done": 1, "total": 4, "mrr": 0.5, '
                            '"epoch": "1/5", "loss": 0.9}'])
    status = desired_status(view, pods, first, Action(ActionKind.WAIT), START)
    later = parse_progress(['{"progress": "train", "done": 3, "total": 4, "loss": 0.4}'])
    view = view_job(job_object(status=status))
    status = desired_status(view, pods, later, Action(ActionKind.WAIT), START)
    assert status["metrics"] == {"mrr": 0.5}
    assert (status["progress"]["epochs"], status["progress"]["loss"],
            status["progress"]["percentComplete"]) == ("1/5", 0.4, "75%")


def test_a_new_run_does_not_take_the_previous_runs_progress() -> None:
    first = job_object()
    view = view_job(first)
    status = desired_status(view, [], None, next_action(view, [], START), START)
    old_trainer = [observe_pod(pod_object("demo-trainer-0", phase="Succeeded", exit_code=0))]
    said = parse_progress(['{"event": "checkpoint committed", "checkpoint_version": 5, '
                           '"epoch": 5}'])
    view = view_job(job_object(status=status))
    status = desired_status(view, old_trainer, said, next_action(view, old_trainer, START,
                                                                 said), START)
    assert status["phase"] == "Succeeded" and status["checkpoint"]["version"] == 5

    edited = job_object(status=status, generation=2)
    edited["spec"]["config"]["num_epochs"] = 3
    view = view_job(edited)
    action = next_action(view, old_trainer, START, said)
    status = desired_status(view, old_trainer, said, action, START)
    assert action.kind is ActionKind.NEW_RUN
    assert status["checkpoint"] == {"path": "s3://bucket/demo/checkpoints/generation_2"}
    assert status["progress"]["epochs"] == "0/3"


def test_an_invalid_spec_gives_a_failed_status_without_a_run() -> None:
    job = job_object()
    job["spec"]["image"] = ""
    view = view_job(job)
    status = desired_status(view, [], None, next_action(view, [], START), START)
    assert status["phase"] == "Failed"
    assert status["message"] == "spec.image: expected a non-empty string, got ''"
    assert "run" not in status and "startTime" not in status
    assert status["completionTime"] == "2025-03-01T12:00:00Z"


def pods_whose_trainers_are(phase: str, exit_code: int | None) -> list[Any]:
    servers = [pod_object("demo-lock-server", role="lock-server"),
               pod_object("demo-partition-server-0", role="partition-server")]
    trainers = [pod_object(f"demo-trainer-{rank}", phase=phase, exit_code=exit_code,
                           message="tessera train: error: bad") for rank in (0, 1)]
    return [observe_pod(pod) for pod in servers + trainers]


MOMENTS = {"created": ("Pending", None), "running": ("Running", ("Running", None)),
           "unreadable": ("Running", ("Running", None)),
           "succeeded": ("Succeeded", ("Succeeded", 0)), "failed": ("Failed", ("Failed", 65))}


@pytest.mark.parametrize("moment", sorted(MOMENTS))
def test_statuses_fit_the_crds_status_schema(moment: str) -> None:
    phase, trainers = MOMENTS[moment]
    progress = parse_progress(['{"time": 1740830400.0, "progress": "train", "done": 5, '
                               '"total": 10, "rate": 3.5, "eta_s": 2.0, "epoch": "1/5", '
                               '"loss": 0.1, "mrr": 0.2, "buckets_done": 2, '
                               '"buckets_total": 4}',
                               '{"time": 1740830401.0, "event": "checkpoint committed", '
                               '"checkpoint_version": 1, "chunks_done": 1, "chunks_total": 5}'])
    view = view_job(distributed_job())
    status = desired_status(view, [], None, next_action(view, [], START), START)
    if trainers is not None:
        view = view_job(distributed_job(**status))
        pods = pods_whose_trainers_are(*trainers)
        status = desired_status(view, pods, progress, next_action(view, pods, START), START)
    if moment == "unreadable":
        view = view_job(distributed_job(**status))
        progress = TrainingProgress.unreadable("pod log read failed (HTTP 502)")
        status = desired_status(view, pods, progress, next_action(view, pods, START), START)
        assert status["progress"]["readError"] and status["progress"]["eta"]
    assert status["phase"] == phase
    checked = status
    validator = jsonschema.Draft4Validator(closed(crd.status_schema()))
    assert [error.message for error in validator.iter_errors(checked)] == []
    assert list(validator.iter_errors({**checked, "state": phase}))  # the schema is closed


EPOCH_5_OF_8 = [  # the throttled record still says epoch 1; commits moved on to epoch 5
    '{"time": 1740830400.0, "progress": "train", "done": 100, "total": 800, "rate": 10.0, '
    '"eta_s": 70.0, "epoch": "1/8", "loss": 0.9}',
    *(f'{{"time": {1740830400.0 + 10 * n}, "event": "checkpoint committed", '
      f'"checkpoint_version": {n}, "epoch": {n}, "chunks_done": {n}, "chunks_total": 8}}'
      for n in range(1, 6))]


WAIT = Action(ActionKind.WAIT)


def running_status(progress: Any, status: dict[str, Any] | None = None,
                   action: Action = WAIT) -> dict[str, Any]:
    job = job_object(status=status or {"run": {"number": 1}})
    job["spec"]["config"]["num_epochs"] = 8
    pods = [observe_pod(pod_object("demo-trainer-0"))]
    return desired_status(view_job(job), pods, progress, action, START)


def test_the_percentage_follows_the_epoch_and_the_eta_the_freshest_rate() -> None:
    status = running_status(parse_progress(EPOCH_5_OF_8))
    progress = status["progress"]
    assert (progress["epochs"], progress["percentComplete"]) == ("5/8", "62%")
    assert (progress["chunksDone"], progress["chunksTotal"]) == (5, 8)
    # Commits every 10 s: 3 chunks to go at 12:00:50 -> 30 s more.
    assert (progress["eta"], progress["estimatedCompletionTime"]) == (
        "30s", "2025-03-01T12:01:20Z")
    assert progress["updateTime"] == "2025-03-01T12:00:50Z"


def test_a_resumed_trainer_does_not_lower_the_percentage() -> None:
    before = running_status(parse_progress(EPOCH_5_OF_8))
    resumed = parse_progress(['{"time": 1740830500.0, "progress": "train", "done": 10, '
                              '"total": 300, "rate": 10.0, "eta_s": 29.0, "epoch": "6/8"}'])
    progress = running_status(resumed, before)["progress"]
    assert (progress["epochs"], progress["percentComplete"]) == ("6/8", "62%")
    assert progress["eta"] == "29s"


def test_a_failed_log_read_keeps_the_last_progress_and_says_so() -> None:
    before = running_status(parse_progress(EPOCH_5_OF_8))
    failed = running_status(TrainingProgress.unreadable("pod log read failed (HTTP 503)"),
                            before)
    assert failed["phase"] == "Running"
    assert failed["message"] == (
        "run 1: 1 pod(s) running; progress unavailable: pod log read failed (HTTP 503); "
        "last known: epoch 5/8, 62%, reported at 2025-03-01T12:00:50Z")
    assert {key: value for key, value in failed["progress"].items() if key != "readError"} \
        == before["progress"]
    assert failed["checkpoint"] == before["checkpoint"]
    quiet = running_status(None, failed)  # no read (the pod is restarting): still stale
    assert quiet["message"] == failed["message"]
    read = running_status(parse_progress(EPOCH_5_OF_8), failed)
    assert read == before  # a read that works says the progress is current again


def test_a_read_that_fails_before_any_progress() -> None:
    status = running_status(TrainingProgress.unreadable("pod log read failed (HTTP 500)"))
    assert status["message"].endswith(
        "; progress unavailable: pod log read failed (HTTP 500); none reported yet")


def test_the_end_of_a_run_drops_the_estimate() -> None:
    before = running_status(parse_progress(EPOCH_5_OF_8))
    succeeded = running_status(None, before, Action(ActionKind.SUCCEED, "TrainingFinished"))
    assert succeeded["progress"]["percentComplete"] == "100%"
    assert "eta" not in succeeded["progress"]
    assert "estimatedCompletionTime" not in succeeded["progress"]


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (-5, "0s"), (44.6, "45s"), (60, "1m"), (250, "4m10s"), (3600, "1h"),
    (3660, "1h1m"), (7322, "2h2m"), (90000, "1d1h"), (86400 * 3, "3d")])
def test_durations_read_like_kubectl_ages(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown
