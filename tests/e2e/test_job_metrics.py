"""End to end: the operator process serves /metrics, scraped over HTTP while a job runs:
jobs by phase, reconciles, progress-read failures and restarts follow what happens."""

from __future__ import annotations

from typing import Any

from e2e.cluster import JOB_API, JOB_KIND, JOB_SECONDS, STATUS_SECONDS, Cluster
from e2e.kube_client import eventually
from e2e.trainer_log import COMMITTED
from support.prometheus import Samples, scrape, value

TRAINER = "umls-trainer-0"
NAMESPACE = "ml"
PHASES = ("Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


def jobs_by_phase(samples: Samples) -> dict[str, float | None]:
    return {phase: value(samples, "tessera_operator_jobs", namespace=NAMESPACE, phase=phase)
            for phase in PHASES}


def reconciles(samples: Samples) -> float:
    return value(samples, "tessera_operator_reconcile_duration_seconds_count") or 0.0


def scraped(cluster: Cluster, what: str, accept: Any) -> Samples:
    """The operator's metrics once `accept(samples)` holds."""
    def answer() -> Samples | None:
        samples = scrape(cluster.operator.metrics_url)
        return samples if samples is not None and accept(samples) else None

    return eventually(answer, what, STATUS_SECONDS)


def only(phase: str) -> dict[str, float]:
    return {other: float(other == phase) for other in PHASES}


def test_the_operator_metrics_follow_a_job(cluster: Cluster, s3_job: Any) -> None:
    secret, job = s3_job("umls", num_epochs=4)
    cluster.kube.apply(secret)
    cluster.kube.apply(job)
    cluster.wait_for_log(TRAINER, COMMITTED, JOB_SECONDS)
    cluster.pause(TRAINER)
    cluster.wait_for_phase("umls", "Running", STATUS_SECONDS)
    running = scraped(cluster, "one Running job",
                      lambda samples: jobs_by_phase(samples) == only("Running"))
    assert reconciles(running) >= 2  # at least the creation and the Running one

    # The node's log endpoint goes away: the followed log ends and reading it again fails.
    # Then the paused trainer dies, as on an OOM kill, and the restart is not held up by the
    # log it cannot read.
    cluster.api.fail_logs(500)
    scraped(cluster, "a failed log read", lambda samples: value(
        samples, "tessera_operator_progress_read_failures_total", reason="500"))
    assert cluster.kubelet.kill(TRAINER)
    cluster.api.fail_logs(None)
    restarted = scraped(cluster, "a restart", lambda samples: value(
        samples, "tessera_operator_pod_restarts_total", namespace=NAMESPACE,
        reason="PodFailed") == 1)
    finished = cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
    assert finished["status"]["restarts"] == 1
    succeeded = scraped(cluster, "one Succeeded job",
                        lambda samples: jobs_by_phase(samples) == only("Succeeded"))
    assert reconciles(succeeded) > reconciles(restarted) > reconciles(running)
    assert value(succeeded, "tessera_operator_pod_restarts_total", namespace=NAMESPACE,
                 reason="PodFailed") == 1

    cluster.kube.delete(JOB_API, JOB_KIND, "umls")
    scraped(cluster, "the deleted job forgotten",
            lambda samples: set(jobs_by_phase(samples).values()) == {None})
