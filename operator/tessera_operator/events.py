"""What the operator says about what it does: the one place that decides how it reads.

kopf's `kopf.event` posts every Event as `reportingComponent: kopf` with `action: "Action?"`,
which tells `kubectl get events` readers neither who acted nor what was done. The operator
posts its own core v1 Events instead (the API and RBAC kopf used), named for
`tessera-operator`, with the action that `decisions` took, in the past tense.

Events expire (after an hour, by default), so every action that posts one is also one line of
the operator's log at normal verbosity (`log_action`), and kopf's own line for every handler
call that succeeded, which would bury those lines, is moved to debug
(`RoutineSuccessesToDebug`).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .crd import API_VERSION, KIND
from .decisions import Action, ActionKind

REPORTING_COMPONENT = "tessera-operator"
EVENT_NAME_PREFIX = "tessera-"
MAX_MESSAGE_LENGTH = 1024  # the API server rejects longer messages
# What was done, per kind of action that posts an Event (WAIT and HOLD post none).
ACTIONS: Mapping[ActionKind, str] = {
    ActionKind.CREATE: "Created",
    ActionKind.RESTART: "Restarted",
    ActionKind.RESUME: "Resumed",
    ActionKind.NEW_RUN: "Retraining",
    ActionKind.SUSPEND: "Suspended",
    ActionKind.FAIL: "Failed",
    ActionKind.SUCCEED: "Succeeded",
    ActionKind.DELETE_JOB: "Deleted",
}


def reporting_instance() -> str:
    """This replica (its pod's name), so that Events of an HA pair say which one acted."""
    return socket.gethostname()


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


def job_event(metadata: Mapping[str, Any], action: Action, now: datetime,
              instance: str) -> dict[str, Any] | None:
    """The Event that `action` on the job of `metadata` posts (None: it posts none); the
    reconcile that posts it also writes `log_action`'s line."""
    event_type = action.event_type
    if event_type is None:
        return None
    namespace = metadata["namespace"]
    message = action.message
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[:MAX_MESSAGE_LENGTH - 3] + "..."
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": EVENT_NAME_PREFIX, "namespace": namespace},
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "namespace": namespace,
                           "name": metadata["name"], "uid": metadata.get("uid")},
        "type": event_type,
        "reason": action.reason or action.kind.value,
        "action": ACTIONS[action.kind],
        "message": message,
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": instance,
        "source": {"component": REPORTING_COMPONENT},  # `kubectl describe`'s "From"
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),  # a MicroTime: 6 digits
    }


# --- the log -------------------------------------------------------------------------------------

_log = logging.getLogger(__name__)

# kopf's INFO lines for a handler call that went well, and for a cause all of whose handlers did.
ROUTINE_SUCCESS = re.compile(r"^(Handler|Daemon|Timer|Activity|Indexer) '[^']*' succeeded\.$"
                             r"| is processed: \d+ succeeded; 0 failed\.$")


def action_line(action: Action) -> str:
    """The log line of an action that posts an Event: what was done, why, and the details."""
    return f"{ACTIONS[action.kind]} ({action.reason or action.kind.value}): {action.message}"


def log_action(metadata: Mapping[str, Any], action: Action) -> None:
    """One line, at INFO (WARNING for a Warning Event), with the job as kopf's lines carry
    theirs: prefixed `[namespace/name]` in the text formats, an `object` in JSON."""
    level = logging.WARNING if action.event_type == "Warning" else logging.INFO
    reference = {"apiVersion": API_VERSION, "kind": KIND, "name": metadata.get("name"),
                 "namespace": metadata.get("namespace"), "uid": metadata.get("uid")}
    _log.log(level, action_line(action), extra={"k8s_ref": reference, "k8s_skip": True})


class RoutineSuccessesToDebug(logging.Filter):
    """Turns kopf's routine success lines into DEBUG ones, shown with --verbose or --debug
    only: at normal verbosity they were 114 of every 121 lines, one per watch event."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and ROUTINE_SUCCESS.search(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def quiet_routine_successes() -> None:
    """Put the filter on every handler of the root logger (kopf's output, set up before the
    operator starts), once."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RoutineSuccessesToDebug) for f in handler.filters):
            handler.addFilter(RoutineSuccessesToDebug())

