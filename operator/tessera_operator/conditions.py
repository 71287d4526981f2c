"""Conditions of an EmbeddingJob, their reasons, and the phase derived from them.

Conditions are the job's state (Kubernetes API conventions: type, status, reason, message,
lastTransitionTime); `phase` is only their summary, computed here and never stored as a
second source of truth. `lastTransitionTime` changes only when a condition's status does, so
writing the same state twice changes nothing. Reasons are CamelCase constants: they are also
the reasons of the Events the operator posts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

Condition = dict[str, Any]

# Condition types.
CREATED = "Created"          # the pods of the current run were created
RUNNING = "Running"          # every pod of the current run is running
RESTARTING = "Restarting"    # the pods are being replaced after a failure or a spec change
SUSPENDED = "Suspended"      # runPolicy.suspend holds the job
SUCCEEDED = "Succeeded"      # training finished
FAILED = "Failed"            # the job stopped and will not retry on its own
CONDITION_TYPES = (CREATED, RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)

# Phases, in the order in which the condition deciding them is looked at.
PHASE_PENDING = "Pending"
PHASES = ("Failed", "Succeeded", "Suspended", "Restarting", "Running")
_PHASE_CONDITIONS = (FAILED, SUCCEEDED, SUSPENDED, RESTARTING, RUNNING)

# Reasons.
PODS_CREATED = "PodsCreated"
PODS_RUNNING = "PodsRunning"
PODS_PENDING = "PodsPending"
PODS_UNSCHEDULABLE = "PodsUnschedulable"  # the scheduler finds no node (no GPU node, taints)
PODS_STOPPED = "PodsStopped"
POD_FAILED = "PodFailed"
POD_VANISHED = "PodVanished"
POD_DELETED = "PodDeleted"  # deleted by someone else (a user, a drain, an eviction)
SPEC_CHANGED = "SpecChanged"
SPEC_FIXED = "SpecFixed"
NEW_RUN = "NewRun"
RESTARTED = "Restarted"
JOB_SUSPENDED = "JobSuspended"
JOB_RESUMED = "JobResumed"
TRAINING_FINISHED = "TrainingFinished"
INVALID_SPEC = "InvalidSpec"
BAD_INPUT = "BadInput"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
TTL_EXPIRED = "TTLExpired"
# A pod found the checkpoint lease still held by an earlier pod of the job, which stopped
# without releasing it: the job waits for the lease to expire, not charged.
PREDECESSOR_LEASE = "PredecessorLease"
# Restarts that count against runPolicy.backoffLimit (others were asked for).
FAILURE_REASONS = (POD_FAILED, POD_VANISHED, POD_DELETED)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, to the second, as Kubernetes writes times."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def find(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(conditions: Sequence[Mapping[str, Any]], kind: str) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.get("status") == "True"


def reason_of(conditions: Sequence[Mapping[str, Any]], kind: str) -> str | None:
    condition = find(conditions, kind)
    return None if condition is None else condition.get("reason")


def transition_time(conditions: Sequence[Mapping[str, Any]], kind: str) -> datetime | None:
    condition = find(conditions, kind)
    return None if condition is None else parse_time(condition.get("lastTransitionTime"))


def set_condition(conditions: Sequence[Mapping[str, Any]], kind: str, status: bool,
                  reason: str, message: str, now: datetime, generation: int) -> list[Condition]:
    """A copy of `conditions` with `kind` set; its transition time moves only if its status
    does. Conditions keep the order of CONDITION_TYPES, so the list is stable."""
    text = "True" if status else "False"
    previous = find(conditions, kind)
    changed = previous is None or previous.get("status") != text
    updated: Condition = {
        "type": kind, "status": text, "reason": reason, "message": message,
        "lastTransitionTime": format_time(now) if changed or previous is None
        else previous.get("lastTransitionTime"),
        "observedGeneration": generation}
    others = [dict(c) for c in conditions if c.get("type") != kind]
    return sorted([*others, updated], key=_order)


def clear_condition(conditions: Sequence[Mapping[str, Any]], kind: str, reason: str,
                    message: str, now: datetime, generation: int) -> list[Condition]:
    """Set `kind` False, but only if it is there (a condition never set needs no False)."""
    if find(conditions, kind) is None:
        return [dict(c) for c in conditions]
    return set_condition(conditions, kind, False, reason, message, now, generation)


def derive_phase(conditions: Sequence[Mapping[str, Any]]) -> str:
    """The first of Failed, Succeeded, Suspended, Restarting, Running that holds; else
    Pending."""
    for kind, phase in zip(_PHASE_CONDITIONS, PHASES, strict=True):
        if is_true(conditions, kind):
            return phase
    return PHASE_PENDING


def phase_message(conditions: Sequence[Mapping[str, Any]]) -> str:
    """The message of the condition that decided the phase (for Pending: why not Running)."""
    for kind in _PHASE_CONDITIONS:
        if is_true(conditions, kind):
            return str(find(conditions, kind).get("message", ""))  # type: ignore[union-attr]
    running = find(conditions, RUNNING)
    return "" if running is None else str(running.get("message", ""))


def _order(condition: Mapping[str, Any]) -> int:
    kind = condition.get("type")
    return CONDITION_TYPES.index(kind) if kind in CONDITION_TYPES else len(CONDITION_TYPES)
