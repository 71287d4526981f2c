"""The status a job should have once an action is taken: a pure function of what was observed.

`desired_status(job, pods, progress, action, now)` starts from the status written last time
and applies, in turn: the conditions (the action's transition first, then what the pods
show), the run bookkeeping (`status.run`, restarts, start and completion times), the ready
pods per role, and the trainer's progress. `phase` and `message` are derived from the
conditions last. Calling it again with the same inputs gives the same status, and
`status_patch` turns the difference into a JSON merge patch (None when there is none), so the
status is written only when it changed.

Every message in the status comes either from this package or from a pod through
`pods.observe_pod` / `decisions.next_action`, which redact credentials; the status never
carries config values other than checkpoint paths (which the spec check keeps free of
credentials).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import conditions as cond
from .conditions import Condition
from .decisions import Action, ActionKind
from .job import JobView
from .labels import Role, expected_pods
from .pods import SUCCEEDED, ObservedPod
from .progress import TrainingProgress, run_fraction

READY_POD_KEYS = {Role.TRAINER: "trainers", Role.PARTITION_SERVER: "partitionServers",
                  Role.LOCK_SERVER: "lockServer"}
# Actions after which the job's pods are gone or going.
_STOPPING = (ActionKind.RESTART, ActionKind.RESUME, ActionKind.NEW_RUN, ActionKind.SUSPEND,
             ActionKind.FAIL, ActionKind.SUCCEED, ActionKind.DELETE_JOB)
# Actions after which the job is not finished any more.
_REOPENING = (ActionKind.CREATE, ActionKind.RESTART, ActionKind.RESUME, ActionKind.NEW_RUN)
# The status keys this package writes; others (kopf's bookkeeping) are left alone.
OWN_KEYS = ("phase", "message", "observedGeneration", "conditions", "startTime",
            "completionTime", "restarts", "readyPods", "progress", "metrics", "checkpoint",
            "run")


def desired_status(job: JobView, pods: Sequence[ObservedPod], progress: TrainingProgress | None,
                   action: Action, now: datetime) -> dict[str, Any]:
    """The whole status (the keys of OWN_KEYS that have a value) after `action`."""
    conditions = _conditions(job, pods, action, now)
    told = _progress(job, progress, action)
    status: dict[str, Any] = {
        "phase": cond.derive_phase(conditions),
        "message": "; ".join(part for part in (cond.phase_message(conditions),
                                               _unavailable_note(told["progress"] or {}))
                             if part),
        "observedGeneration": job.generation,
        "conditions": conditions,
        **_bookkeeping(job, action, now, _finished(conditions)),
        "readyPods": _ready_pods(job, pods, action) or None,
        **told,
    }
    return {key: value for key, value in status.items() if value is not None}


# --- conditions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _ConditionWriter:
    """Sets conditions at one moment, for one generation."""

    now: datetime
    generation: int

    def put(self, conditions: Sequence[Condition], kind: str, value: bool, reason: str,
            message: str) -> list[Condition]:
        return cond.set_condition(conditions, kind, value, reason, message, self.now,
                                  self.generation)

    def clear(self, conditions: Sequence[Condition], kind: str, reason: str,
              message: str) -> list[Condition]:
        return cond.clear_condition(conditions, kind, reason, message, self.now, self.generation)


def _conditions(job: JobView, pods: Sequence[ObservedPod], action: Action,
                now: datetime) -> list[Condition]:
    write = _ConditionWriter(now, job.generation)
    found = _action_transition(write, [dict(c) for c in job.conditions], action)
    if job.spec is not None and cond.is_true(found, cond.FAILED) and \
            cond.reason_of(found, cond.FAILED) == cond.INVALID_SPEC:
        found = write.put(found, cond.FAILED, False, cond.SPEC_FIXED, "the spec is valid again")
    finished = _finished(found)
    if action.kind in _STOPPING:
        found = write.clear(found, cond.RUNNING, action.reason or cond.PODS_STOPPED,
                            action.message)
    elif not finished:
        found = _observed_running(write, found, job, pods, action)
    return _suspension(write, found, job, action, finished)


def _finished(conditions: Sequence[Condition]) -> bool:
    return cond.is_true(conditions, cond.SUCCEEDED) or cond.is_true(conditions, cond.FAILED)


def _action_transition(write: _ConditionWriter, found: list[Condition],
                       action: Action) -> list[Condition]:
    kind, reason, message = action.kind, action.reason, action.message
    if kind is ActionKind.CREATE:
        found = write.put(found, cond.CREATED, True, reason, message)
    elif kind in (ActionKind.RESTART, ActionKind.RESUME, ActionKind.NEW_RUN, ActionKind.SUSPEND):
        found = write.put(found, cond.CREATED, False, reason, "the pods of the run were deleted")
    if kind in (ActionKind.RESTART, ActionKind.HOLD):
        found = write.put(found, cond.RESTARTING, True, reason, message)
    elif kind in (ActionKind.NEW_RUN, ActionKind.RESUME, ActionKind.SUSPEND, ActionKind.FAIL,
                  ActionKind.SUCCEED):
        found = write.clear(found, cond.RESTARTING, reason, message)
    if kind is ActionKind.FAIL:
        found = write.put(found, cond.FAILED, True, reason, message)
    if kind is ActionKind.SUCCEED:
        found = write.put(found, cond.SUCCEEDED, True, reason, message)
    if kind in _REOPENING:
        found = write.clear(found, cond.FAILED, reason, message)
        found = write.clear(found, cond.SUCCEEDED, reason, message)
    return found


def _observed_running(write: _ConditionWriter, found: list[Condition], job: JobView,
                      pods: Sequence[ObservedPod], action: Action) -> list[Condition]:
    """Running holds when every pod of the current run runs or has done its part (a trainer
    that finished before the others, servers that stop at the end); else say what is
    missing, pods that no node can take first (they wait for a change, not for time)."""
    if job.spec is None or job.spec.run_policy.suspend:
        return write.clear(found, cond.RUNNING, cond.JOB_SUSPENDED, "suspended")
    run = action.plan.number if action.plan else job.run
    current = {pod.name: pod for pod in pods if pod.run == run}
    waiting = [current.get(name) or name for name in expected_pods(job.ref.name, job.spec)
               if not (name in current and (current[name].running
                                            or current[name].phase == SUCCEEDED))]
    if not waiting:
        running = sum(pod.running for pod in current.values())
        done = sum(pod.phase == SUCCEEDED for pod in current.values())
        found = write.put(found, cond.RUNNING, True, cond.PODS_RUNNING,
                          f"run {run}: {running} pod(s) running"
                          + (f", {done} finished" if done else ""))
        return write.clear(found, cond.RESTARTING, cond.RESTARTED, f"run {run} is running")
    stuck = [pod for pod in waiting if isinstance(pod, ObservedPod) and pod.unschedulable]
    if stuck:
        return write.put(found, cond.RUNNING, False, cond.PODS_UNSCHEDULABLE,
                         f"run {run}: {len(stuck)} pod(s) cannot be scheduled; "
                         f"{stuck[0].explanation()}")
    first = waiting[0]
    detail = first.explanation() if isinstance(first, ObservedPod) \
        else f"{first}: not created yet"
    return write.put(found, cond.RUNNING, False, cond.PODS_PENDING,
                     f"run {run}: waiting for {len(waiting)} pod(s); {detail}")


def _suspension(write: _ConditionWriter, found: list[Condition], job: JobView, action: Action,
                finished: bool) -> list[Condition]:
    """Suspended holds while runPolicy.suspend does, unless the job has finished."""
    if job.spec is not None and job.spec.run_policy.suspend and not finished:
        message = action.message if action.kind is ActionKind.SUSPEND \
            else "suspended; the pods are stopped"
        return write.put(found, cond.SUSPENDED, True, cond.JOB_SUSPENDED, message)
    message = action.message if action.kind is ActionKind.RESUME else "not suspended"
    return write.clear(found, cond.SUSPENDED, cond.JOB_RESUMED, message)


# --- bookkeeping ------------------------------------------------------------------------------

def _bookkeeping(job: JobView, action: Action, now: datetime, finished: bool) -> dict[str, Any]:
    kind = action.kind
    start = job.status.get("startTime")
    if kind in (ActionKind.NEW_RUN, ActionKind.RESUME):
        start = None  # the deadline counts from the start of the new run's pods
    elif kind is ActionKind.CREATE and start is None:
        start = cond.format_time(now)
    completion = job.status.get("completionTime")
    if kind in (ActionKind.FAIL, ActionKind.SUCCEED) or (finished and completion is None):
        completion = cond.format_time(now)
    elif not finished:
        completion = None
    restarts = job.restarts
    if action.counts_against_backoff:
        restarts += 1
    elif kind is ActionKind.NEW_RUN or (kind is ActionKind.RESTART
                                        and action.reason == cond.SPEC_CHANGED):
        restarts = 0  # a new spec gets a fresh back-off budget
    return {"startTime": start, "completionTime": completion, "restarts": restarts,
            "run": _run_record(job, action)}


def _run_record(job: JobView, action: Action) -> dict[str, Any] | None:
    if action.plan is None or job.spec is None:
        return dict(job.run_record) or None
    record = {"number": action.plan.number, "configHash": job.spec.config_fingerprint(),
              "podsHash": job.spec.pods_fingerprint(), "initPath": action.plan.init_path}
    return {key: value for key, value in record.items() if value is not None}


def _ready_pods(job: JobView, pods: Sequence[ObservedPod], action: Action) -> dict[str, int]:
    run = action.plan.number if action.plan else job.run
    gone = set(action.delete_pods)
    counts = {READY_POD_KEYS[role]: 0 for role, _ in
              (expected_pods(job.ref.name, job.spec).values() if job.spec else ())}
    for pod in pods:
        if pod.run == run and pod.running and pod.role is not None and pod.name not in gone:
            key = READY_POD_KEYS[pod.role]
            counts[key] = counts.get(key, 0) + 1
    return counts


# --- progress ---------------------------------------------------------------------------------

def _progress(job: JobView, progress: TrainingProgress | None,
              action: Action) -> dict[str, Any]:
    """progress, metrics and checkpoint: the trainer's latest word over what was known."""
    # A new run starts its counts afresh: what the previous run's trainer said is not its.
    fresh = action.kind is ActionKind.NEW_RUN
    before = {} if fresh else dict(job.status.get("progress") or {})
    metrics = {} if fresh else dict(job.status.get("metrics") or {})
    checkpoint = {} if fresh else dict(job.status.get("checkpoint") or {})
    if action.plan is not None:
        checkpoint["path"] = action.plan.checkpoint_path
    seen = progress if progress is not None and not fresh else TrainingProgress()
    if seen.checkpoint_version is not None:
        checkpoint["version"] = seen.checkpoint_version
    metrics.update(seen.metrics)
    fields = _progress_fields(job, before, seen, action)
    if seen.unavailable is not None:
        fields["readError"] = seen.unavailable
    elif progress is not None:
        fields.pop("readError", None)  # the log was read: what it says is current
    return {"progress": fields or None, "metrics": metrics or None,
            "checkpoint": checkpoint or None}


def _progress_fields(job: JobView, before: Mapping[str, Any], seen: TrainingProgress,
                     action: Action) -> dict[str, Any]:
    fields = dict(before)
    if job.spec is not None:
        fields["numEpochs"] = job.spec.config.num_epochs
    succeeded = action.kind is ActionKind.SUCCEED
    updates = {
        "epoch": fields.get("numEpochs") if succeeded else seen.epoch,
        "bucketsDone": seen.buckets_done, "bucketsTotal": seen.buckets_total,
        "chunksDone": seen.chunks_done, "chunksTotal": seen.chunks_total,
        "edgesPerSecond": seen.edges_per_second, "loss": seen.loss,
        "updateTime": _time(seen.time),
    }
    fields.update({key: value for key, value in updates.items() if value is not None})
    fraction = 1.0 if succeeded else _run_fraction(fields, seen)
    if fraction is not None:
        fields["percentComplete"] = f"{100 * fraction:.0f}%"
    fields.update(_eta(seen, action))
    if action.kind in _STOPPING:  # no pods, no estimate; the next run's trainer makes one
        fields.pop("eta", None)
        fields.pop("estimatedCompletionTime", None)
    if "numEpochs" in fields:
        fields.setdefault("epoch", 0)
        fields["epochs"] = f"{fields['epoch']}/{fields['numEpochs']}"
    return fields


def _run_fraction(fields: Mapping[str, Any], seen: TrainingProgress) -> float | None:
    """The share done, when this read said where the run is (else the shown one stays: a
    tail without a progress record must not lower it)."""
    if seen.fraction_done is None and seen.chunks_done is None and seen.epoch is None:
        return None
    return run_fraction(seen.fraction_done, fields.get("chunksDone"), fields.get("chunksTotal"),
                        fields.get("epoch"), fields.get("numEpochs"))


def _eta(seen: TrainingProgress, action: Action) -> dict[str, Any]:
    if seen.estimated_completion is None or seen.time is None or action.kind in _STOPPING:
        return {}
    return {"eta": format_duration(seen.estimated_completion - seen.time),
            "estimatedCompletionTime": _time(seen.estimated_completion)}


def _time(unix: float | None) -> str | None:
    return None if unix is None else cond.format_time(datetime.fromtimestamp(unix, timezone.utc))


def format_duration(seconds: float) -> str:
    """`45s`, `4m10s`, `2h5m`, `3d4h`: the two largest units, as kubectl shows ages."""
    whole = max(int(round(seconds)), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next((index for index, (value, _) in enumerate(units) if value), len(units) - 1)
    return "".join(f"{value}{unit}" for value, unit in units[first:first + 2]
                   if value or unit == units[first][1])


def _unavailable_note(fields: Mapping[str, Any]) -> str:
    """Why the progress shown may be stale, and how old it is (empty: it is current)."""
    problem = fields.get("readError")
    if not problem:
        return ""
    if "updateTime" not in fields:
        return f"progress unavailable: {problem}; none reported yet"
    known = ", ".join(part for part in (
        f"epoch {fields['epochs']}" if "epochs" in fields else "",
        fields.get("percentComplete", ""), f"reported at {fields['updateTime']}") if part)
    return f"progress unavailable: {problem}; last known: {known}"


# --- writing ----------------------------------------------------------------------------------

def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch from the status as it is to the desired one (None: no change).
    Only OWN_KEYS are compared, so other writers' keys survive."""
    patch = _merge_patch({k: v for k, v in current.items() if k in OWN_KEYS}, desired)
    return patch or None


def _merge_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        old = current.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = _merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif value != old:
            patch[key] = value
    return patch
