"""Replica priorities for kopf peering: the older replica outranks the younger one."""

from __future__ import annotations

import pytest

from tessera_operator.peering import with_priority


def priority(args: list[str]) -> int:
    (given,) = [arg for arg in args if arg.startswith("--priority=")]
    return int(given.removeprefix("--priority="))


def test_an_older_replica_has_the_higher_priority():
    older = with_priority(["--peering=tessera", "-A"], now_ns=1_700_000_000_000_001_000)
    younger = with_priority(["--peering=tessera", "-A"], now_ns=1_700_000_000_000_002_000)
    assert older[:2] == younger[:2] == ["--peering=tessera", "-A"]
    assert priority(older) > priority(younger)  # (one microsecond apart: still distinct)


@pytest.mark.parametrize("args", [["--standalone", "-A"], ["--peering", "x", "--priority", "7"],
                                  ["-P", "x", "-p", "7"], ["--peering=x", "--priority=7"]])
def test_no_priority_is_added_without_peering_or_over_a_given_one(args):
    assert with_priority(args) == args


def test_the_short_option_counts_as_peering():
    assert priority(with_priority(["-P", "tessera"], now_ns=5_000)) == -5
