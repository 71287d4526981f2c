"""Conditions: transition times that move only on a change, and the phase derived from them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from operator_support import START

from tessera_operator import conditions as cond


def conditions_of(**states: bool) -> list[cond.Condition]:
    found: list[cond.Condition] = []
    for kind, value in states.items():
        found = cond.set_condition(found, kind, value, "Reason", f"{kind} is {value}", START, 1)
    return found


PHASES = [
    ({}, "Pending"),
    ({"Created": True}, "Pending"),
    ({"Created": True, "Running": False}, "Pending"),
    ({"Created": True, "Running": True}, "Running"),
    ({"Running": False, "Restarting": True}, "Restarting"),
    ({"Running": True, "Restarting": True}, "Restarting"),
    ({"Suspended": True, "Running": False}, "Suspended"),
    ({"Suspended": True, "Restarting": True}, "Suspended"),
    ({"Succeeded": True, "Running": False}, "Succeeded"),
    ({"Succeeded": False, "Running": True}, "Running"),
    ({"Failed": True, "Suspended": True}, "Failed"),
    ({"Failed": True, "Succeeded": True}, "Failed"),
    ({"Failed": False, "Restarting": False, "Running": False}, "Pending"),
]


@pytest.mark.parametrize(("states", "phase"), PHASES, ids=[str(s) for s, _ in PHASES])
def test_phase_is_derived_from_conditions(states: dict[str, bool], phase: str) -> None:
    assert cond.derive_phase(conditions_of(**states)) == phase


def test_phase_message_is_the_deciding_conditions() -> None:
    assert cond.phase_message(conditions_of(Running=True, Failed=True)) == "Failed is True"
    assert cond.phase_message(conditions_of(Created=True, Running=False)) == "Running is False"
    assert cond.phase_message([]) == ""


def test_transition_time_moves_only_when_the_status_does() -> None:
    later = START + timedelta(minutes=5)
    first = cond.set_condition([], cond.RUNNING, False, "PodsPending", "waiting", START, 1)
    same = cond.set_condition(first, cond.RUNNING, False, "PodsPending", "still", later, 2)
    flipped = cond.set_condition(same, cond.RUNNING, True, "PodsRunning", "running", later, 2)
    assert first[0]["lastTransitionTime"] == same[0]["lastTransitionTime"] == \
        "2025-03-01T12:00:00Z"
    assert (same[0]["message"], same[0]["observedGeneration"]) == ("still", 2)
    assert flipped[0]["lastTransitionTime"] == "2025-03-01T12:05:00Z"
    assert flipped[0]["status"] == "True" and first[0]["status"] == "False"  # not mutated
    assert cond.transition_time(flipped, cond.RUNNING) == later


def test_conditions_keep_a_stable_order_and_clear_only_what_exists() -> None:
    found = cond.set_condition([], cond.FAILED, True, "BadInput", "x", START, 1)
    found = cond.set_condition(found, cond.CREATED, True, "PodsCreated", "y", START, 1)
    assert [c["type"] for c in found] == ["Created", "Failed"]
    assert cond.clear_condition(found, cond.SUSPENDED, "JobResumed", "", START, 1) == found
    cleared = cond.clear_condition(found, cond.FAILED, "NewRun", "z", START, 1)
    assert not cond.is_true(cleared, cond.FAILED) and cond.reason_of(cleared, "Failed") == "NewRun"


def test_times_round_trip() -> None:
    assert cond.parse_time(cond.format_time(START)) == START
    assert cond.parse_time(None) is None
