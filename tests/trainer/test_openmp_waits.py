"""The `tessera` command shortens libgomp's idle spin before torch loads it, unless told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tessera.openmp_waits import SPIN_COUNT, shorten_spinning

# The command with its subcommand replaced by a report of what it would start with.
PROBE = """
import os, sys
import tessera.cli as cli
cli.main = lambda argv=None: print(os.environ.get("GOMP_SPINCOUNT"), "torch" in sys.modules) or 0
cli.run()
"""


def command_start(**environment: str) -> str:
    env = {key: value for key, value in os.environ.items()
           if key not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env={**env, **environment}, timeout=60, check=True)
    return result.stdout.strip()


def test_the_command_sets_the_spin_before_torch_loads() -> None:
    assert command_start() == f"{SPIN_COUNT} False"


@pytest.mark.parametrize(("environment", "expected"), [
    ({"GOMP_SPINCOUNT": "500"}, "500 False"),
    ({"OMP_WAIT_POLICY": "active"}, "None False"),
])
def test_the_users_choice_is_kept(environment: dict[str, str], expected: str) -> None:
    assert command_start(**environment) == expected


def test_nothing_is_set_once_torch_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    environ: dict[str, str] = {}
    assert shorten_spinning(environ) is False
    assert environ == {}
    monkeypatch.delitem(sys.modules, "torch")  # as if not loaded yet
    assert shorten_spinning(environ) is True
    assert environ == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
