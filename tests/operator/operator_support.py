"""Helpers of the operator tests: example jobs, pods as the API returns them, a pretend cluster.

`Cluster` plays the API server and the kubelet for the pure parts: it reconciles a job the way
the kopf handlers must (observe, decide, write the status, create or delete), keeps the pods
it was asked to create, and lets a test move them through their phases. It is deliberately
small: what it checks is that the decisions and the status fit together over many steps.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from tessera.storage.fs import Directory
from tessera.storage.lease import LEASE_FILE, CheckpointLease, LeaseHeldError, LeaseRecord
from tessera_operator.children import children
from tessera_operator.decisions import Action, ActionKind, next_action
from tessera_operator.job import view_job
from tessera_operator.pods import observe_pod
from tessera_operator.progress import TrainingProgress
from tessera_operator.status import desired_status, status_patch

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "crds" / "examples"
NAMESPACE = "ml"
UID = "3f8e6c2a-5b1d-4e7f-9a0c-8d2b4f6e1a3c"
START = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

CHECKPOINTS_OF_DEMO = "s3://bucket/demo/checkpoints"
CONFIG: dict[str, Any] = {
    "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
    "relations": [{"name": "likes", "lhs": "user", "rhs": "item"}],
    "dimension": 16,
    "entity_path": "s3://bucket/demo/entities",
    "edge_paths": ["s3://bucket/demo/edges"],
    "checkpoint_path": CHECKPOINTS_OF_DEMO,
    "num_epochs": 5,
}


def example_jobs() -> dict[str, dict[str, Any]]:
    """The EmbeddingJobs of crds/examples, by file name, placed in a namespace with a uid."""
    jobs = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document["kind"] == "EmbeddingJob":
                document["metadata"].update(namespace=NAMESPACE, uid=UID, generation=1)
                jobs[path.stem] = document
    return jobs


def job_object(spec: dict[str, Any] | None = None, *, name: str = "demo", generation: int = 1,
               status: dict[str, Any] | None = None) -> dict[str, Any]:
    """An EmbeddingJob as the API returns it (a small single-trainer job by default)."""
    spec = copy.deepcopy(spec) if spec is not None else {
        "image": "tessera-trainer:0.1.0", "config": copy.deepcopy(CONFIG),
        "storage": {"secretRef": {"name": "s3-credentials"},
                    "endpoint": "http://minio.storage:9000"},
        "runPolicy": {"backoffLimit": 2}}
    job = {"apiVersion": "tessera.dev/v1alpha1", "kind": "EmbeddingJob",
           "metadata": {"name": name, "namespace": NAMESPACE, "uid": UID,
                        "generation": generation},
           "spec": spec}
    if status is not None:
        job["status"] = status
    return job


def lease_held_error(holder: str, expires: datetime) -> str:
    """The error `tessera lock-server` exits 75 with when host `holder` holds the checkpoint
    lease until `expires` (in the future), as the trainer's lease code words it."""
    record = LeaseRecord("token", "tessera train", holder, 7, expires - timedelta(minutes=5),
                         expires - timedelta(minutes=1), expires)
    with tempfile.TemporaryDirectory() as folder:
        Directory(folder).write_text(LEASE_FILE, record.to_json())
        try:
            CheckpointLease(Directory(folder), "tessera lock-server").acquire()
        except LeaseHeldError as error:
            return f"tessera lock-server: error: {error}"
    raise AssertionError(f"the lease of {holder} was taken over")


def pod_object(  # noqa: PLR0913 (keyword-only options, each a field of the pod)
        name: str, *, role: str = "trainer", run: int = 1, phase: str = "Running",
        exit_code: int | None = None, message: str = "", reason: str | None = None,
        waiting: tuple[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    """A pod as the API returns it, reduced to what the operator reads."""
    state: dict[str, Any] = {}
    if exit_code is not None:
        state["terminated"] = {"exitCode": exit_code, "message": message,
                               **({"reason": reason} if reason else {})}
    elif waiting is not None:
        state["waiting"] = {"reason": waiting[0], "message": waiting[1]}
    elif phase == "Running":
        state["running"] = {"startedAt": "2025-03-01T12:00:00Z"}
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE,
                                "labels": {"tessera.dev/role": role, "tessera.dev/run": str(run)}}
    if deleting:
        metadata["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [{"name": role,
                                                                     "state": state}]}
    if reason and exit_code is None:
        status["reason"] = reason
    return {"metadata": metadata, "status": status}


class Cluster:
    """One job and its pods, reconciled as the handlers must do it."""

    def __init__(self, job: dict[str, Any], now: datetime = START) -> None:
        self.job = job
        self.now = now
        self.pods: dict[str, dict[str, Any]] = {}
        self.config_maps: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.deleted = False
        self.status_writes = 0

    @property
    def status(self) -> dict[str, Any]:
        return self.job.get("status", {})

    def reconcile(self, progress: TrainingProgress | None = None) -> Action:
        view = view_job(self.job)
        observed = [observe_pod(pod) for pod in self.pods.values()]
        action = next_action(view, observed, self.now, progress)
        desired = desired_status(view, observed, progress, action, self.now)
        if action.kind is ActionKind.CREATE:
            self._create(view, action)
        patch = status_patch(self.status, desired)
        if patch is not None:
            self.status_writes += 1
            self.job["status"] = desired
        for name in action.delete_pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
        if action.kind is ActionKind.DELETE_JOB:
            self.deleted = True
        if action.event_type is not None:
            self.events.append((action.event_type, action.reason, action.message))
        return action

    def _create(self, view: Any, action: Action) -> None:
        for manifest in children(view.ref, view.spec, action.plan):
            name = manifest["metadata"]["name"]
            if manifest["kind"] == "ConfigMap":
                self.config_maps[name] = manifest
            elif manifest["kind"] == "Pod" and name not in self.pods:
                pod = copy.deepcopy(manifest)
                pod["status"] = {"phase": "Pending"}
                self.pods[name] = pod

    def set_pod(self, name: str, phase: str, exit_code: int | None = None,
                message: str = "") -> None:
        """Move a pod on, as the kubelet would."""
        pod = self.pods[name]
        state: dict[str, Any] = {"running": {}} if exit_code is None else {
            "terminated": {"exitCode": exit_code, "message": message}}
        pod["status"] = {"phase": phase, "containerStatuses": [{"state": state}]}

    def run_all(self) -> None:
        for name in self.pods:
            self.set_pod(name, "Running")

    def settle(self) -> None:
        """Pods being deleted are gone (their grace period ended)."""
        self.pods = {name: pod for name, pod in self.pods.items()
                     if "deletionTimestamp" not in pod["metadata"]}

    def edit_spec(self, change: Callable[[dict[str, Any]], None]) -> None:
        change(self.job["spec"])
        self.job["metadata"]["generation"] += 1

    def wait(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def condition(self, kind: str) -> dict[str, Any]:
        (found,) = [c for c in self.status.get("conditions", []) if c["type"] == kind]
        return found
