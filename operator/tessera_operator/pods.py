"""What the operator needs to know about one of its pods, read from the pod as the API gives it.

Decisions are made on `ObservedPod`s, never on raw pod objects: which run and role a pod
belongs to (its labels), how far it got (phase, deletion), and, when it stopped or is stuck,
why (exit code, the kubelet's reason, and one line of explanation). The explanation of a failed
pod is the last line of its termination message that is not a JSON progress record: with
`FallbackToLogsOnError` that message is the log tail, whose last plain line is `tessera`'s
error (`tessera train: error: ...`) or a traceback's last line. A pod that exited 75 because
another run holds the checkpoint lease also says whose lease it is and when it expires
(`lease_wait`), read from that error as `tessera` words it (`lease.LeaseHeldError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tessera.errors import EXIT_TRANSIENT
from tessera.log_records import EVENT, parse_record

from .labels import LABEL_ROLE, LABEL_RUN, Role
from .redaction import redact

MAX_MESSAGE_LENGTH = 512

PENDING, RUNNING, SUCCEEDED, FAILED, UNKNOWN = (
    "Pending", "Running", "Succeeded", "Failed", "Unknown")
# `LeaseHeldError`'s words: "... is in use by {LeaseRecord.describe()}; wait for that run ...",
# its times in UTC to the second.
_LEASE_HELD = re.compile(r"is in use by .*? \(pid \d+ on host (?P<host>[^\s)]+)\) since \S+, "
                         r"last heartbeat \S+, expires "
                         r"(?P<expires>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00)")


@dataclass(frozen=True)
class LeaseWait:
    """Why a pod exited 75: the checkpoint lease is held by `holder` (a host name, which in a
    cluster is a pod name) until `expires`, unless that holder renews it."""

    holder: str
    expires: datetime


@dataclass(frozen=True)
class ObservedPod:
    """A pod of a job, as far as reconciling is concerned."""

    name: str
    role: Role | None
    run: int
    phase: str
    deleting: bool = False
    exit_code: int | None = None
    reason: str | None = None
    message: str = ""
    unschedulable: bool = False  # the scheduler found no node for it (PodScheduled False)
    lease_wait: LeaseWait | None = None

    @property
    def finished(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def running(self) -> bool:
        return self.phase == RUNNING and not self.deleting

    @property
    def active(self) -> bool:
        """Still running or about to; deleting it stops work."""
        return not self.finished and not self.deleting

    def explanation(self) -> str:
        """`name: reason (exit code N): message`, the parts that are known."""
        details = ", ".join(part for part in (
            self.reason, None if self.exit_code is None else f"exit code {self.exit_code}")
            if part)
        text = f"{self.name}: {details}" if details else self.name
        return f"{text}: {self.message}" if self.message else text


def observe_pod(pod: Mapping[str, Any]) -> ObservedPod:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or PENDING
    state = _container_state(status)
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    exit_code = terminated.get("exitCode")
    reason = terminated.get("reason") or waiting.get("reason") or status.get("reason") \
        or _unschedulable(status)
    lease_wait = None
    if phase == FAILED or exit_code not in (None, 0):
        message = failure_line(terminated.get("message") or status.get("message") or "")
        lease_wait = _lease_wait(message) if exit_code == EXIT_TRANSIENT else None
    else:
        message = waiting.get("message") or _unschedulable_message(status) or ""
    return ObservedPod(
        name=metadata.get("name", ""),
        role=_role(labels.get(LABEL_ROLE)),
        run=_run(labels.get(LABEL_RUN)),
        phase=phase,
        deleting=metadata.get("deletionTimestamp") is not None,
        exit_code=exit_code,
        reason=reason,
        message=_bounded(redact(message)),
        unschedulable=phase == PENDING and _unschedulable(status) is not None,
        lease_wait=lease_wait)


def failure_line(text: str) -> str:
    """The line of a termination message that says why: the last plain (non-JSON) line, or
    the last JSON record's event when the tail holds nothing else."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    plain = [line for line in lines if parse_record(line) is None]
    if plain:
        return plain[-1]
    events = [str(record[EVENT]) for record in map(parse_record, lines)
              if record is not None and EVENT in record]
    return events[-1] if events else ""


def _lease_wait(line: str) -> LeaseWait | None:
    """Whose lease the failure line says is in the way (None: not a held lease)."""
    found = _LEASE_HELD.search(line)
    if found is None:
        return None
    return LeaseWait(found["host"], datetime.fromisoformat(found["expires"]))


def _container_state(status: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = status.get("containerStatuses") or []
    return (containers[0].get("state") or {}) if containers else {}


def _unschedulable(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason") or "Unschedulable"
    return None


def _unschedulable_message(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message")
    return None


def _role(value: str | None) -> Role | None:
    try:
        return Role(value)
    except ValueError:
        return None


def _run(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0


def _bounded(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= MAX_MESSAGE_LENGTH else line[:MAX_MESSAGE_LENGTH - 3] + "..."
