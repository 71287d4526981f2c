"""What the operator needs to know about one of its pods, read from the pod as the API gives it.

Decisions are made on `ObservedPod`s, never on raw pod objects: which run and role a pod
belongs to (its labels), how far it got (phase, deletion), and, when it stopped or is stuck,
why (exit code, the kubelet's reason, and one line of explanation). The explanation of a failed
pod is the last complete line of its termination message that carries an error: with
`FallbackToLogsOnError` that message is the kubelet's 2 KB log tail, whose first line may be cut
mid-record, so only whole lines that say what went wrong count: `tessera`'s own last words
(`tessera train: error: ...`), a traceback's last line, another line naming an error, or a JSON
record with an `error`. A pod killed without a word (SIGKILL, OOM) has no such line; its
kubelet reason and exit code say it (`OOMKilled, exit code 137`, `killed (SIGKILL), exit code
137`), never a fragment of a progress record. A pod that exited 75 because
another run holds the checkpoint lease also says whose lease it is and when it expires
(`lease_wait`), read from that error as `tessera` words it (`lease.LeaseHeldError`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tessera.errors import EXIT_TRANSIENT
from tessera.log_records import EVENT, parse_record

from .labels import LABEL_ROLE, LABEL_RUN, Role
from .redaction import redact

MAX_MESSAGE_LENGTH = 512
# The kubelet keeps at most this much of the log as a failed container's termination message
# (`FallbackToLogsOnError`), cut from the end: a message this long may begin mid-line.
TERMINATION_LOG_BYTES = 2048
ERROR_KEY = "error"  # the key of a JSON log record that reports an error
# A line that says why: `tessera CMD: ...` (the CLI's last words), a traceback's exception line
# (`ValueError: boom`, `tessera.errors.BadInput`), or any line that calls itself an error.
_ERROR_LINE = re.compile(r"^tessera \S+: |^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"
                         r"(?:Error|Exception|Interrupt|Exit)\b|\berror\b", re.IGNORECASE)

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
    uid: str = ""  # of this incarnation: a pod of a later run reuses the name

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
    reason = _signal_reason(exit_code, terminated.get("reason")) or waiting.get("reason") \
        or status.get("reason") or _unschedulable(status)
    lease_wait = None
    if phase == FAILED or exit_code not in (None, 0):
        # The pod's own message (`Evicted`: "The node was low on ...") is the kubelet's words,
        # whole; only the container's, a log tail, needs its error line picked out.
        message = failure_line(terminated.get("message") or "") or status.get("message") or ""
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
        lease_wait=lease_wait,
        uid=metadata.get("uid", ""))


def failure_line(text: str) -> str:
    """The last complete line of a termination message that carries an error ("" if none):
    a cut first line or a progress record says nothing about why the pod stopped."""
    lines = text.splitlines()
    if len(text.encode()) >= TERMINATION_LOG_BYTES:
        lines = lines[1:]  # the kubelet's tail may have begun mid-line
    for line in reversed([line.strip() for line in lines]):
        record = parse_record(line)
        if record is None:
            if line and _ERROR_LINE.search(line):
                return line
        elif record.get(ERROR_KEY):
            event = record.get(EVENT)
            return f"{event}: {record[ERROR_KEY]}" if event else str(record[ERROR_KEY])
    return ""


def _signal_reason(exit_code: int | None, reason: str | None) -> str | None:
    """The kubelet's reason, or for its generic `Error` after a signal (exit code 128+N), the
    signal, which says more: `killed (SIGKILL)`."""
    if exit_code is None or exit_code <= 128 or reason not in (None, "Error"):
        return reason
    try:
        return f"killed ({signal.Signals(exit_code - 128).name})"
    except ValueError:
        return reason


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
