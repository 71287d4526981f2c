"""next_action's decision table: one row per situation a job can be in."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from operator_support import NAMESPACE, START, job_object, lease_held_error, pod_object

from tessera_operator import conditions as cond
from tessera_operator import handlers
from tessera_operator.decisions import ActionKind, next_action, progress_pod, restart_delay
from tessera_operator.job import JobView, view_job
from tessera_operator.pods import ObservedPod, observe_pod
from tessera_operator.progress import parse_progress
from tessera_operator.spec import parse_spec

CHECKPOINTS = "s3://bucket/demo/checkpoints"
TRAINER = "demo-trainer-0"


def recorded_job(*, run: int = 1, restarts: int = 0, version: int | None = None,
                 states: dict[str, tuple[bool, str]] | None = None,
                 completion: datetime | None = None, edit: Callable[[dict], None] | None = None,
                 policy: dict[str, Any] | None = None, spec: dict[str, Any] | None = None,
                 ) -> JobView:
    """A job whose status says run `run` started from its current spec at START; `edit`
    changes the spec afterwards (a new generation the operator has not acted on yet)."""
    return view_job(recorded_job_object(run=run, restarts=restarts, version=version,
                                        states=states, completion=completion, edit=edit,
                                        policy=policy, spec=spec))


def recorded_job_object(*, run: int = 1, restarts: int = 0, version: int | None = None,
                        states: dict[str, tuple[bool, str]] | None = None,
                        completion: datetime | None = None,
                        edit: Callable[[dict], None] | None = None,
                        policy: dict[str, Any] | None = None,
                        spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """`recorded_job` as the API returns it."""
    job = job_object(spec)
    job["spec"]["runPolicy"].update(policy or {})
    parsed = parse_spec(job["spec"])
    found: list[cond.Condition] = []
    for kind, (value, reason) in (states or {"Created": (True, cond.PODS_CREATED)}).items():
        found = cond.set_condition(found, kind, value, reason, f"{kind} {value}", START, 1)
    job["status"] = {
        "observedGeneration": 1, "conditions": found, "restarts": restarts,
        "startTime": cond.format_time(START),
        "run": {"number": run, "configHash": parsed.config_fingerprint(),
                "podsHash": parsed.pods_fingerprint()},
        "checkpoint": {"path": CHECKPOINTS, **({"version": version} if version else {})}}
    if completion is not None:
        job["status"]["completionTime"] = cond.format_time(completion)
    if edit is not None:
        edit(job["spec"])
        job["metadata"]["generation"] = 2
    return job


def pod(name: str = TRAINER, **fields: Any) -> ObservedPod:
    role = "lock-server" if "lock" in name else "partition-server" if "partition" in name \
        else "trainer"
    return observe_pod(pod_object(name, role=role, **fields))


def distributed_spec() -> dict[str, Any]:
    spec = copy.deepcopy(job_object()["spec"])
    spec["trainers"] = {"replicas": 2}
    spec["partitionServers"] = {"replicas": 1}
    return spec


@dataclass
class Row:
    name: str
    job: JobView
    pods: list[ObservedPod] = field(default_factory=list)
    seconds: float = 0  # after START
    kind: ActionKind = ActionKind.WAIT
    reason: str = ""
    deletes: tuple[str, ...] = ()
    run: int | None = None  # of the action's plan
    checkpoint: str | None = None  # of the action's plan
    init: str | None = None
    requeue: float | None = None
    says: str = ""  # part of the message


FAILED_75: dict[str, Any] = {"phase": "Failed", "exit_code": 75,
             "message": "tessera train: error: storage unavailable"}
FAILED_65: dict[str, Any] = {"phase": "Failed", "exit_code": 65,
             "message": "tessera train: error: entity_path: no entity counts found"}
RESTARTING_AFTER_FAILURE = {"Created": (False, cond.POD_FAILED),
                            "Restarting": (True, cond.POD_FAILED)}
SUSPENDED = {"Created": (False, cond.JOB_SUSPENDED), "Suspended": (True, cond.JOB_SUSPENDED)}


def set_path(path: str, value: Any) -> Callable[[dict], None]:
    def change(spec: dict) -> None:
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return change


def fresh_job(**spec_changes: Any) -> JobView:
    job = job_object()
    job["spec"]["runPolicy"].update(spec_changes)
    return view_job(job)


def invalid_job(failed_already: bool) -> JobView:
    job = job_object()
    job["spec"]["trainers"] = {"replicas": 0}
    if failed_already:
        failed = cond.set_condition([], cond.FAILED, True, cond.INVALID_SPEC,
                                    "spec.trainers.replicas: must be at least 1, got 0", START, 1)
        job["status"] = {"conditions": failed}
    return view_job(job)


ROWS = [
    Row("new job: first run", fresh_job(), kind=ActionKind.CREATE, reason=cond.PODS_CREATED,
        run=1, checkpoint=CHECKPOINTS, says="run 1: created 1 trainer pod(s)"),
    Row("new job, suspended: nothing yet", fresh_job(suspend=True)),
    Row("invalid spec: fails naming the field", invalid_job(False), kind=ActionKind.FAIL,
        reason=cond.INVALID_SPEC, says="spec.trainers.replicas: must be at least 1"),
    Row("invalid spec, already reported", invalid_job(True)),
    Row("running: wait", recorded_job(), [pod()]),
    Row("running with a deadline: wait until it", recorded_job(policy={
        "activeDeadlineSeconds": 600}), [pod()], seconds=100, requeue=500),
    Row("failed pod under backoffLimit: restart", recorded_job(restarts=1),
        [pod(**FAILED_75)], kind=ActionKind.RESTART, reason=cond.POD_FAILED,
        deletes=(TRAINER,), run=2, checkpoint=CHECKPOINTS,
        says="exit code 75: tessera train: error: storage unavailable; restart 2 of 2 in 20 s"),
    Row("failed pod at backoffLimit: fail", recorded_job(restarts=2), [pod(**FAILED_75)],
        kind=ActionKind.FAIL, reason=cond.BACKOFF_LIMIT_EXCEEDED,
        says="backoffLimit (2) reached"),
    Row("exit code 65: fail at once with the pod's message", recorded_job(),
        [pod(**FAILED_65)], kind=ActionKind.FAIL, reason=cond.BAD_INPUT,
        says="entity_path: no entity counts found"),
    Row("vanished pod: restart", recorded_job(), [], kind=ActionKind.RESTART,
        reason=cond.POD_VANISHED, run=2, says=f"{TRAINER} disappeared"),
    Row("pod being deleted by someone: restart, it is as good as gone", recorded_job(),
        [pod(deleting=True)], kind=ActionKind.RESTART, reason=cond.POD_DELETED, run=2,
        checkpoint=CHECKPOINTS, says=f"{TRAINER} is being deleted; restart 1 of 2 in 10 s"),
    Row("pod being deleted at backoffLimit: fail", recorded_job(restarts=2),
        [pod(deleting=True)], kind=ActionKind.FAIL, reason=cond.BACKOFF_LIMIT_EXCEEDED,
        says=f"{TRAINER} is being deleted; backoffLimit (2) reached"),
    Row("finished pod being deleted: its exit code decides", recorded_job(),
        [pod(deleting=True, **FAILED_65)], kind=ActionKind.FAIL, reason=cond.BAD_INPUT),
    Row("succeeded trainer being deleted: success", recorded_job(),
        [pod(deleting=True, phase="Succeeded", exit_code=0)], kind=ActionKind.SUCCEED,
        reason=cond.TRAINING_FINISHED),
    Row("suspended job, pod being deleted: wait for it", recorded_job(
        policy={"suspend": True}, states=SUSPENDED), [pod(deleting=True)]),
    Row("restart in back-off: wait", recorded_job(run=2, restarts=2,
                                                  states=RESTARTING_AFTER_FAILURE),
        seconds=5, requeue=15),
    Row("restart after back-off: create", recorded_job(run=2, restarts=2,
                                                       states=RESTARTING_AFTER_FAILURE),
        seconds=20, kind=ActionKind.CREATE, reason=cond.PODS_CREATED, run=2,
        checkpoint=CHECKPOINTS),
    Row("pods of an earlier run: delete them first", recorded_job(
        run=2, states={"Created": (False, cond.POD_FAILED)}),
        [pod(run=1, **FAILED_75)], deletes=(TRAINER,), requeue=5),
    Row("pods of an earlier run going: wait", recorded_job(
        run=2, states={"Created": (False, cond.POD_FAILED)}),
        [pod(run=1, deleting=True)], requeue=5),
    Row("suspend: delete the pods", recorded_job(edit=set_path("runPolicy.suspend", True)),
        [pod()], kind=ActionKind.SUSPEND, reason=cond.JOB_SUSPENDED, deletes=(TRAINER,)),
    Row("suspended, pods gone: wait", recorded_job(
        states=SUSPENDED, policy={"suspend": True})),
    Row("resume: next run, same checkpoints", recorded_job(states=SUSPENDED),
        kind=ActionKind.RESUME, reason=cond.JOB_RESUMED, run=2, checkpoint=CHECKPOINTS),
    Row("config changed: new run from the last checkpoint", recorded_job(
        version=4, edit=set_path("config.num_epochs", 20)), [pod()],
        kind=ActionKind.NEW_RUN, reason=cond.NEW_RUN, deletes=(TRAINER,), run=2,
        checkpoint=f"{CHECKPOINTS}/generation_2", init=CHECKPOINTS,
        says=f"from checkpoint version 4 of {CHECKPOINTS}"),
    Row("pods' spec changed: restart them", recorded_job(
        edit=set_path("image", "tessera-trainer:0.2.0")), [pod()],
        kind=ActionKind.RESTART, reason=cond.SPEC_CHANGED, deletes=(TRAINER,), run=2,
        checkpoint=CHECKPOINTS),
    Row("run policy changed: nothing to restart", recorded_job(
        edit=set_path("runPolicy.backoffLimit", 9)), [pod()]),
    Row("deadline passed: fail, stopping active pods", recorded_job(
        spec=distributed_spec(), policy={"activeDeadlineSeconds": 60}),
        [pod("demo-lock-server"), pod("demo-partition-server-0"), pod("demo-trainer-0"),
         pod("demo-trainer-1", phase="Succeeded", exit_code=0)],
        seconds=60, kind=ActionKind.FAIL, reason=cond.DEADLINE_EXCEEDED,
        deletes=("demo-lock-server", "demo-partition-server-0", TRAINER)),
    Row("trainer done: succeed", recorded_job(version=7),
        [pod(phase="Succeeded", exit_code=0)], kind=ActionKind.SUCCEED,
        reason=cond.TRAINING_FINISHED, says=f"checkpoint version 7 in {CHECKPOINTS}"),
    Row("trainers done: succeed, stopping the servers", recorded_job(spec=distributed_spec()),
        [pod("demo-lock-server"), pod("demo-partition-server-0"),
         pod("demo-trainer-0", phase="Succeeded", exit_code=0),
         pod("demo-trainer-1", phase="Succeeded", exit_code=0)],
        kind=ActionKind.SUCCEED, deletes=("demo-lock-server", "demo-partition-server-0"),
        reason=cond.TRAINING_FINISHED),
    Row("one of two trainers done: wait", recorded_job(spec=distributed_spec()),
        [pod("demo-lock-server"), pod("demo-partition-server-0"),
         pod("demo-trainer-0", phase="Succeeded", exit_code=0), pod("demo-trainer-1")]),
    Row("finished, ttl ahead: wait for it", recorded_job(
        states={"Succeeded": (True, cond.TRAINING_FINISHED)}, completion=START,
        policy={"ttlSecondsAfterFinished": 60}), [pod(phase="Succeeded", exit_code=0)],
        seconds=30, requeue=30),
    Row("finished, ttl passed: delete the job", recorded_job(
        states={"Failed": (True, cond.BAD_INPUT)}, completion=START,
        policy={"ttlSecondsAfterFinished": 60}), seconds=60, kind=ActionKind.DELETE_JOB,
        reason=cond.TTL_EXPIRED),
    Row("finished with a leftover pod: delete it", recorded_job(
        states={"Failed": (True, cond.BAD_INPUT)}, completion=START), [pod()],
        deletes=(TRAINER,)),
    Row("failed at backoffLimit, limit raised: retry", recorded_job(
        restarts=2, states={"Failed": (True, cond.BACKOFF_LIMIT_EXCEEDED)},
        edit=set_path("runPolicy.backoffLimit", 5)), kind=ActionKind.RESTART,
        reason=cond.SPEC_FIXED, run=2, checkpoint=CHECKPOINTS),
    Row("failed at backoffLimit, limit still reached: stay failed", recorded_job(
        restarts=2, states={"Failed": (True, cond.BACKOFF_LIMIT_EXCEEDED)},
        edit=set_path("runPolicy.ttlSecondsAfterFinished", 600))),
    Row("failed on an invalid spec, now valid: retry", recorded_job(
        states={"Failed": (True, cond.INVALID_SPEC)}, edit=set_path("runPolicy.suspend", False)),
        kind=ActionKind.RESTART, reason=cond.SPEC_FIXED, run=2),
    Row("succeeded, image changed: nothing to retrain", recorded_job(
        states={"Succeeded": (True, cond.TRAINING_FINISHED)},
        edit=set_path("image", "tessera-trainer:0.2.0"))),
    Row("succeeded, new data: retrain (GitOps)", recorded_job(
        version=9, states={"Succeeded": (True, cond.TRAINING_FINISHED)},
        edit=set_path("config.edge_paths", ["s3://bucket/demo/edges-2025-04"])),
        [pod(phase="Succeeded", exit_code=0)], kind=ActionKind.NEW_RUN, reason=cond.NEW_RUN,
        deletes=(TRAINER,), run=2, checkpoint=f"{CHECKPOINTS}/generation_2", init=CHECKPOINTS),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_next_action(row: Row) -> None:
    action = next_action(row.job, row.pods, START + timedelta(seconds=row.seconds))
    assert (action.kind, action.reason) == (row.kind, row.reason)
    assert action.delete_pods == row.deletes
    assert action.requeue_after == row.requeue
    assert row.says in action.message
    if row.run is not None:
        assert action.plan is not None and action.plan.number == row.run
        assert row.checkpoint is None or action.plan.checkpoint_path == row.checkpoint
        assert action.plan.init_path == row.init
    else:
        assert action.plan is None


def test_restart_delay_doubles_up_to_six_minutes() -> None:
    assert [restart_delay(n) for n in range(8)] == [0, 10, 20, 40, 80, 160, 320, 360]


def test_events_warn_about_failures_only() -> None:
    restart = next_action(recorded_job(), [pod(**FAILED_75)], START)
    spec_restart = next_action(recorded_job(edit=set_path("image", "x:2")), [pod()], START)
    failure = next_action(recorded_job(), [pod(**FAILED_65)], START)
    waiting = next_action(recorded_job(), [pod()], START)
    assert (restart.event_type, spec_restart.event_type, failure.event_type,
            waiting.event_type) == ("Warning", "Normal", "Warning", None)
    assert restart.counts_against_backoff and not spec_restart.counts_against_backoff


def lease_wait_pods(holder: str, expires: datetime) -> list[ObservedPod]:
    """A distributed run whose lock server exited 75: host `holder` holds the lease."""
    failed = {"phase": "Failed", "exit_code": 75, "message": lease_held_error(holder, expires)}
    return [pod("demo-lock-server", **failed), pod("demo-partition-server-0"), pod(TRAINER),
            pod("demo-trainer-1")]


def test_a_lease_left_by_an_earlier_pod_of_the_job_is_waited_out_uncharged() -> None:
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=1)
    job = recorded_job(restarts=2, spec=distributed_spec())  # a charged restart would fail it
    pods = lease_wait_pods(TRAINER, expires)
    hold = next_action(job, pods, expires - timedelta(seconds=40))
    assert (hold.kind, hold.reason, hold.requeue_after) == (
        ActionKind.HOLD, cond.PREDECESSOR_LEASE, 40)
    assert hold.delete_pods == () and hold.event_type is None
    assert f"held by {TRAINER}, an earlier pod of this job" in hold.message
    assert f"restarting when it expires at {cond.format_time(expires)}" in hold.message
    restart = next_action(job, pods, expires)
    assert (restart.kind, restart.reason) == (ActionKind.RESTART, cond.PREDECESSOR_LEASE)
    assert restart.delete_pods == ("demo-lock-server", "demo-partition-server-0", TRAINER,
                                   "demo-trainer-1")
    assert restart.plan is not None and restart.plan.number == 2
    assert not restart.counts_against_backoff and restart.event_type == "Normal"


@pytest.mark.parametrize("holder", ["demo2-trainer-0", "laptop"])
def test_a_lease_held_by_another_host_is_a_failure(holder: str) -> None:
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=1)
    job = recorded_job(restarts=2, spec=distributed_spec())
    action = next_action(job, lease_wait_pods(holder, expires), expires - timedelta(seconds=40))
    assert (action.kind, action.reason) == (ActionKind.FAIL, cond.BACKOFF_LIMIT_EXCEEDED)
    assert f"on host {holder})" in action.message


def test_messages_from_pods_are_redacted() -> None:
    leaky: dict[str, Any] = {"phase": "Failed", "exit_code": 65,
             "message": "error: storage_options {'secret': 'hunter2'} AKIAIOSFODNN7EXAMPLE"}
    action = next_action(recorded_job(), [pod(**leaky)], START)
    assert "hunter2" not in action.message and "AKIAIOSFODNN7EXAMPLE" not in action.message
    assert action.reason == cond.BAD_INPUT


def test_the_trainers_latest_checkpoint_counts_before_the_status_records_it() -> None:
    """A short run finishes between two status writes: its last commit is only in the log."""
    committed = parse_progress(['{"event": "checkpoint committed", "checkpoint_version": 6}'])
    done = [pod(phase="Succeeded", exit_code=0)]
    assert "checkpoints in" in next_action(recorded_job(), done, START).message
    success = next_action(recorded_job(), done, START, committed)
    assert success.kind is ActionKind.SUCCEED
    assert f"checkpoint version 6 in {CHECKPOINTS}" in success.message

    edited = recorded_job(edit=set_path("config.num_epochs", 7))
    assert next_action(edited, [pod()], START).plan.init_path is None  # nothing committed
    retrain = next_action(edited, [pod()], START, committed)
    assert retrain.kind is ActionKind.NEW_RUN and retrain.plan.init_path == CHECKPOINTS
    assert "from checkpoint version 6" in retrain.message


class LaggingLogApi:
    """The API of a trainer whose followed log has not handed over its last records yet: the
    stream stays silent, a plain read of the log returns them."""

    def __init__(self, log: str) -> None:
        self.log = log

    async def lines(self, path: str, params: Any) -> AsyncIterator[str]:
        await asyncio.Event().wait()  # never set: nothing comes until the follower stops
        yield ""

    async def call(self, method: str, path: str, body: Any = None, **_: Any) -> str:
        assert (method, path) == ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{TRAINER}/log")
        return self.log


def test_a_config_change_starts_from_a_commit_the_stream_has_not_handed_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The user edits the config just after the trainer commits: the new run starts from that
    commit, not from the previous run's init_path (here scratch)."""
    api = LaggingLogApi('{"event": "checkpoint committed", "checkpoint_version": 3}\n')
    monkeypatch.setattr(handlers, "shared_api", lambda: api)
    edited = recorded_job_object(edit=set_path("config.num_epochs", 20))

    async def decide() -> handlers.Step:
        trainer_log = handlers.TrainerLog(NAMESPACE, wake=lambda: None)
        try:
            return await handlers._decide(edited, [pod()], trainer_log)
        finally:
            await trainer_log.stop()

    step = asyncio.run(decide())
    assert step.action.kind is ActionKind.NEW_RUN
    assert step.action.plan is not None and step.action.plan.init_path == CHECKPOINTS
    assert f"from checkpoint version 3 of {CHECKPOINTS}" in step.action.message


SUCCEEDED_JOB = {"Succeeded": (True, cond.TRAINING_FINISHED)}


@pytest.mark.parametrize(("job", "pods", "read"), [
    (recorded_job(), [pod()], TRAINER),
    (recorded_job(), [pod(phase="Failed", exit_code=65)], TRAINER),  # its last words
    (recorded_job(), [pod(phase="Succeeded", exit_code=0)], TRAINER),
    (recorded_job(), [pod(phase="Pending")], None),  # no log yet
    (recorded_job(), [], None),
    (recorded_job(run=2), [pod(run=1)], None),  # another run's trainer
    (recorded_job(), [pod("demo-trainer-1")], None),  # only the first trainer reports
    (recorded_job(states=SUCCEEDED_JOB), [pod(phase="Succeeded", exit_code=0)], None),
    (recorded_job(states={"Failed": (True, cond.BAD_INPUT)}),
     [pod(phase="Failed", exit_code=65)], None),
], ids=["running", "failed", "succeeded", "pending", "no pod", "earlier run",
        "second trainer", "job succeeded", "job failed"])
def test_which_log_tells_the_progress(job: JobView, pods: list[ObservedPod],
                                      read: str | None) -> None:
    assert progress_pod(job, pods) == read
