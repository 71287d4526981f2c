"""The operator's Events: posted as `tessera-operator`, with the action taken, not kopf's
placeholder, so `kubectl get events` says who did what."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tessera_operator import conditions as cond
from tessera_operator.decisions import Action, ActionKind
from tessera_operator.events import ACTIONS, MAX_MESSAGE_LENGTH, job_event

NOW = datetime(2025, 3, 1, 12, 0, 0, 5, tzinfo=timezone.utc)
METADATA = {"name": "demo", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"}


def test_an_event_names_the_operator_and_what_it_did() -> None:
    event = job_event(METADATA, Action(ActionKind.CREATE, cond.PODS_CREATED, "created 2 pods"),
                      NOW, "tessera-operator-abc")
    assert event is not None
    assert (event["type"], event["reason"], event["action"], event["message"]) == (
        "Normal", cond.PODS_CREATED, "Created", "created 2 pods")
    assert (event["reportingComponent"], event["reportingInstance"],
            event["source"]["component"]) == (
        "tessera-operator", "tessera-operator-abc", "tessera-operator")
    assert event["involvedObject"] == {"apiVersion": "tessera.dev/v1alpha1",
                                       "kind": "EmbeddingJob", "namespace": "ml",
                                       "name": "demo", "uid": "u-1"}
    assert event["metadata"]["namespace"] == "ml"
    assert event["eventTime"] == "2025-03-01T12:00:00.000005Z"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2025-03-01T12:00:00Z"


@pytest.mark.parametrize(("kind", "reason", "event_type", "action"), [
    (ActionKind.RESTART, cond.SPEC_CHANGED, "Normal", "Restarted"),
    (ActionKind.NEW_RUN, cond.NEW_RUN, "Normal", "Retraining"),
    (ActionKind.SUSPEND, cond.JOB_SUSPENDED, "Normal", "Suspended"),
    (ActionKind.RESUME, cond.JOB_RESUMED, "Normal", "Resumed"),
    (ActionKind.FAIL, cond.DEADLINE_EXCEEDED, "Warning", "Failed"),
    (ActionKind.SUCCEED, cond.TRAINING_FINISHED, "Normal", "Succeeded"),
    (ActionKind.DELETE_JOB, cond.TTL_EXPIRED, "Normal", "Deleted"),
])
def test_every_action_that_posts_has_its_own_verb(kind: ActionKind, reason: str,
                                                  event_type: str, action: str) -> None:
    event = job_event(METADATA, Action(kind, reason, "why"), NOW, "r")
    assert event is not None and (event["type"], event["action"]) == (event_type, action)


def test_waiting_posts_nothing_and_every_other_kind_has_an_action() -> None:
    assert job_event(METADATA, Action(ActionKind.WAIT), NOW, "r") is None
    assert job_event(METADATA, Action(ActionKind.HOLD, cond.PREDECESSOR_LEASE), NOW, "r") is None
    assert set(ACTIONS) == set(ActionKind) - {ActionKind.WAIT, ActionKind.HOLD}


def test_long_messages_fit_the_api() -> None:
    event = job_event(METADATA, Action(ActionKind.FAIL, cond.BAD_INPUT, "x" * 5000), NOW, "r")
    assert event is not None and len(event["message"]) == MAX_MESSAGE_LENGTH
