"""The operator's Prometheus metrics: what its reconciles see and do, served at /metrics.

The handlers report four things and nothing else: a reconcile's outcome (`reconciled`: the
job's phase and the action taken), a reconcile's time and failure (`timed_reconcile`), the
requests it made (`API_REQUESTS`, counted by `api`), and a failed read of a trainer's log
(`progress_read_failed`). Jobs by phase are counted at scrape
time from the phase each job's last reconcile wrote, so a job the operator no longer serves
(deleted, or its daemon stopped) is `forget`-ten rather than left behind in a gauge.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Histogram, start_http_server
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .conditions import PHASE_PENDING, PHASES
from .decisions import Action, ActionKind

DEFAULT_PORT = 8081  # next to kopf's liveness endpoint, which the chart puts on 8080

RECONCILE_SECONDS = Histogram(
    "tessera_operator_reconcile_duration_seconds",
    "Time of one reconcile of a job (reading it, its pods and its trainer's log; acting)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
RECONCILE_ERRORS = Counter(
    "tessera_operator_reconcile_errors", "Reconciles that failed and were retried",
    ["error"])
RESTARTS = Counter(
    "tessera_operator_pod_restarts", "Runs restarted (their pods replaced), by reason",
    ["namespace", "reason"])
API_REQUESTS = Counter(
    "tessera_operator_api_requests",
    "Requests the reconciles made to the API server (kopf's watches aside), by verb",
    ["verb"])
PROGRESS_READ_FAILURES = Counter(
    "tessera_operator_progress_read_failures",
    "Failed reads of a trainer's log, by HTTP status (or 'timeout', or the error's type)",
    ["reason"])


class JobPhases(Collector):
    """The phase of every job served, counted per namespace when scraped (every phase of a
    namespace with jobs is shown, 0 included, so a phase emptying reads as 0, not as gone)."""

    def __init__(self) -> None:
        self.phases: dict[tuple[str, str], str] = {}

    def collect(self) -> Iterator[Metric]:
        phases = dict(self.phases)  # a copy: the event loop may change it meanwhile
        family = GaugeMetricFamily("tessera_operator_jobs", "EmbeddingJobs by phase",
                                   labels=["namespace", "phase"])
        for namespace in sorted({namespace for namespace, _ in phases}):
            for phase in (PHASE_PENDING, *PHASES):
                count = sum(1 for (ns, _), found in phases.items()
                            if ns == namespace and found == phase)
                family.add_metric([namespace, phase], count)
        yield family


JOB_PHASES = JobPhases()
REGISTRY.register(JOB_PHASES)


def serve(address: tuple[str, int]) -> None:
    """Serve /metrics on a thread of its own (an OSError says the port is taken)."""
    host, port = address
    start_http_server(port, addr=host)


def reconciled(namespace: str, name: str, phase: str, action: Action) -> None:
    """A reconcile applied `action` and wrote (or kept) `phase`."""
    if action.kind is ActionKind.DELETE_JOB:
        forget(namespace, name)
        return
    JOB_PHASES.phases[(namespace, name)] = phase
    if action.kind is ActionKind.RESTART:
        RESTARTS.labels(namespace, action.reason or "unknown").inc()


def forget(namespace: str, name: str) -> None:
    JOB_PHASES.phases.pop((namespace, name), None)


@contextmanager
def timed_reconcile() -> Iterator[None]:
    """Time the block as one reconcile; count it as failed if it raises."""
    started = time.monotonic()
    try:
        yield
    except Exception as error:  # not cancellation: a stopping daemon did not fail
        RECONCILE_ERRORS.labels(type(error).__name__).inc()
        raise
    finally:
        RECONCILE_SECONDS.observe(time.monotonic() - started)


def progress_read_failed(status: int | None, error: str) -> None:
    PROGRESS_READ_FAILURES.labels(str(status) if status is not None else error).inc()
