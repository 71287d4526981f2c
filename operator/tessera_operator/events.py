"""The Events the operator posts about a job: the one place that decides how they read.

kopf's `kopf.event` posts every Event as `reportingComponent: kopf` with `action: "Action?"`,
which tells `kubectl get events` readers neither who acted nor what was done. The operator
posts its own core v1 Events instead (the API and RBAC kopf used), named for
`tessera-operator`, with the action that `decisions` took, in the past tense.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .crd import KIND
from .decisions import Action, ActionKind
from .spec import API_VERSION

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
    """The Event that `action` on the job of `metadata` posts (None: it posts none)."""
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
