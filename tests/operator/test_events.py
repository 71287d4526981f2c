"""The operator's Events: posted as `tessera-operator`, with the action taken, not kopf's
placeholder, so `kubectl get events` says who did what; each Event also a line of the log, and
kopf's routine success lines at debug."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

from tessera_operator import conditions as cond
from tessera_operator.crd import FINALIZER
from tessera_operator.decisions import Action, ActionKind
from tessera_operator.events import (
    ACTIONS,
    MAX_MESSAGE_LENGTH,
    RoutineSuccessesToDebug,
    job_event,
    log_action,
)

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


# --- the log: one line per action, kopf's routine successes at debug ----------------------------

def test_an_action_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """(The reconcile writes it for each Event it posts.)"""
    caplog.set_level(logging.DEBUG, logger="tessera_operator.events")
    log_action(METADATA, Action(ActionKind.CREATE, cond.PODS_CREATED, "run 1: created 2 pods"))
    log_action(METADATA, Action(ActionKind.FAIL, cond.BAD_INPUT, "spec.image: missing"))
    lines = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert lines == [("INFO", f"Created ({cond.PODS_CREATED}): run 1: created 2 pods"),
                     ("WARNING", f"Failed ({cond.BAD_INPUT}): spec.image: missing")]
    reference = caplog.records[0].k8s_ref  # type: ignore[attr-defined]
    assert (reference["namespace"], reference["name"], reference["kind"]) == (
        "ml", "demo", "EmbeddingJob")


ROUTINE = [
    ("Handler 'job_changed' succeeded.", False),
    ("Handler 'pod_changed/spec' succeeded.", False),
    ("Daemon 'run_job' succeeded.", False),
    ("Activity 'configure' succeeded.", False),
    ("Creation is processed: 1 succeeded; 0 failed.", False),
    ("Creation is processed: 0 succeeded; 1 failed.", True),
    ("Handler 'job_changed' failed with an exception and will try again in 60 seconds: x", True),
    ("Created (PodsCreated): run 1: created 2 pods", True),
    ("Resuming operations after the pause.", True),
]


@pytest.mark.parametrize(("message", "shown"), ROUTINE, ids=[m for m, _ in ROUTINE])
def test_kopfs_routine_successes_show_only_when_debugging(message: str, shown: bool) -> None:
    root = logging.getLogger()
    level = root.level
    record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)
    try:
        root.setLevel(logging.INFO)
        assert RoutineSuccessesToDebug().filter(record) is shown
        assert record.levelno == (logging.INFO if shown else logging.DEBUG)
        root.setLevel(logging.DEBUG)
        assert RoutineSuccessesToDebug().filter(record) is True  # --verbose: all, at debug
    finally:
        root.setLevel(level)


def test_the_operator_names_its_finalizer_and_quiets_kopf() -> None:
    import kopf

    from tessera_operator.handlers import configure

    handler = logging.StreamHandler()
    logging.getLogger().addHandler(handler)
    try:
        settings = kopf.OperatorSettings()
        configure(settings=settings, memo=kopf.Memo())
        configure(settings=settings, memo=kopf.Memo())  # once is enough, twice does no harm
        assert settings.persistence.finalizer == FINALIZER == "tessera.dev/finalizer"
        assert [type(f) for f in handler.filters] == [RoutineSuccessesToDebug]
    finally:
        logging.getLogger().removeHandler(handler)
