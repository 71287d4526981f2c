"""An EmbeddingJob as the reconciler sees it: who it is, its checked spec, what it recorded.

Everything the operator must remember between reconciles lives in the job's status (never in
the operator's memory, which a restart loses): the run's number and the fingerprints of the
spec it was started from (`status.run`), its checkpoint directory (`status.checkpoint.path`),
restart count, start time and conditions. `view_job` reads them back, with defaults for a
job seen for the first time, and checks the spec, keeping the error instead of raising so
that a bad spec becomes a Failed job with a message rather than a crash loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tessera.errors import ConfigError

from . import conditions as cond
from .labels import JobRef, check_job_name
from .run_config import RunPlan
from .spec import EmbeddingJobSpec, parse_spec


@dataclass(frozen=True)
class JobView:
    """The job's identity, spec (or why it is invalid) and last written status."""

    ref: JobRef
    generation: int
    spec: EmbeddingJobSpec | None
    spec_error: str | None = None
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def conditions(self) -> Sequence[Mapping[str, Any]]:
        return self.status.get("conditions") or []

    @property
    def run_record(self) -> Mapping[str, Any]:
        return self.status.get("run") or {}

    @property
    def run(self) -> int:
        """Number of the current run (0: no pods were ever started)."""
        return int(self.run_record.get("number") or 0)

    @property
    def plan(self) -> RunPlan | None:
        """The current run's plan, as recorded when it started."""
        if self.run == 0:
            return None
        return RunPlan(self.run, (self.status.get("checkpoint") or {}).get("path", ""),
                       self.run_record.get("initPath"))

    @property
    def checkpoint_version(self) -> int | None:
        return (self.status.get("checkpoint") or {}).get("version")

    @property
    def restarts(self) -> int:
        return int(self.status.get("restarts") or 0)

    @property
    def start_time(self) -> datetime | None:
        return cond.parse_time(self.status.get("startTime"))

    @property
    def completion_time(self) -> datetime | None:
        return cond.parse_time(self.status.get("completionTime"))

    @property
    def spec_edited(self) -> bool:
        """The spec changed since the operator last acted on it."""
        return self.status.get("observedGeneration") != self.generation

    @property
    def finished(self) -> bool:
        return cond.is_true(self.conditions, cond.SUCCEEDED) or \
            cond.is_true(self.conditions, cond.FAILED)

    @property
    def pods_created(self) -> bool:
        """The pods of the current run were all created (so a missing one has vanished)."""
        return cond.is_true(self.conditions, cond.CREATED)


def view_job(job: Mapping[str, Any]) -> JobView:
    """Read an EmbeddingJob object (as the API returns it)."""
    metadata = job.get("metadata") or {}
    ref = JobRef(metadata.get("name", ""), metadata.get("namespace") or "default",
                 metadata.get("uid", ""), dict(metadata.get("labels") or {}))
    spec: EmbeddingJobSpec | None = None
    error: str | None = None
    try:
        check_job_name(ref.name)
        spec = parse_spec(job.get("spec"))
    except ConfigError as problem:
        error = str(problem)
    return JobView(ref, int(metadata.get("generation") or 1), spec, error,
                   job.get("status") or {})
