"""The operator's metrics: jobs counted by phase at scrape time, and its metrics flag."""

from __future__ import annotations

import socket
import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tessera_operator import metrics
from tessera_operator.decisions import Action, ActionKind


def jobs_gauge(phases: metrics.JobPhases) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(phases)
    (family,) = text_string_to_metric_families(generate_latest(registry).decode())
    return {(s.labels["namespace"], s.labels["phase"]): s.value for s in family.samples}


def test_jobs_are_counted_by_namespace_and_phase_and_forgotten(monkeypatch) -> None:
    phases = metrics.JobPhases()
    monkeypatch.setattr(metrics, "JOB_PHASES", phases)
    metrics.reconciled("a", "one", "Running", Action(ActionKind.WAIT))
    metrics.reconciled("a", "two", "Running", Action(ActionKind.CREATE))
    metrics.reconciled("b", "one", "Failed", Action(ActionKind.FAIL))
    counted = jobs_gauge(phases)
    assert counted[("a", "Running")] == 2 and counted[("a", "Pending")] == 0
    assert counted[("b", "Failed")] == 1 and sum(counted.values()) == 3
    assert len(counted) == 2 * 6  # every phase of each namespace, 0 included
    metrics.reconciled("a", "two", "Succeeded", Action(ActionKind.DELETE_JOB))
    metrics.forget("b", "one")
    assert jobs_gauge(phases) == {("a", phase): float(phase == "Running") for phase in (
        "Pending", "Failed", "Succeeded", "Suspended", "Restarting", "Running")}


def run_operator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera_operator", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_malformed_or_taken_metrics_port_stops_the_operator_with_one_line() -> None:
    bad = run_operator("--metrics-port", "127.0.0.1:metrics", "--standalone")
    assert bad.returncode == 65
    assert bad.stderr.strip() == (
        "python -m tessera_operator: error: --metrics-port: '127.0.0.1:metrics' is "
        "not a port or HOST:PORT (e.g. 9464 or 127.0.0.1:9464)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_operator("--metrics-port", f"127.0.0.1:{port}", "--standalone")
    assert busy.returncode == 65
    (line,) = busy.stderr.strip().splitlines()
    assert line == (f"python -m tessera_operator: error: --metrics-port: cannot listen on "
                    f"127.0.0.1:{port} (Address already in use); choose another port")
