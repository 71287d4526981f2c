"""How the children of a job are named, labelled and tied to it.

Names are deterministic (`{job}-trainer-0`, `{job}-lock-server`, `{job}-config`), so a second
reconcile, or a restarted operator, finds what the first made instead of making it again.
Every child carries the common labels (which is how the operator lists them) and an owner
reference to the job (which is how Kubernetes deletes them with it, and how `kopf.adopt`
would have tied them). The `tessera.dev/run` label tells the pods of the current run from
those of an earlier one.

The job's own labels (`metadata.labels`: a team, a cost centre, a queue) go onto every child
too, as they were when the child was made; where one has a key of the operator's labels, the
operator's value wins, since the operator finds its children by them.

Pods that wait in a Kueue queue (the label `kueue.x-k8s.io/queue-name`) are one Kueue pod
group per run (`kueue_pod_group`), so Kueue admits a run's pods together or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera.errors import ConfigError
from tessera.vocabulary import Role, process_name

from .crd import KIND
from .spec import (
    API_VERSION,
    KUEUE_POD_GROUP_NAME,
    KUEUE_POD_GROUP_TOTAL_COUNT,
    KUEUE_QUEUE_NAME,
    KUEUE_RETRIABLE_IN_GROUP,
    EmbeddingJobSpec,
)

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = "tessera.dev/job"
LABEL_ROLE = "tessera.dev/role"
LABEL_RUN = "tessera.dev/run"
LABEL_RANK = "tessera.dev/rank"
APP_NAME = "tessera"
MANAGER = "tessera-operator"

# The longest child name is `{job}-partition-server-{rank}` (a pod host name, at most 63
# characters); 40 leaves room for five-digit ranks.
MAX_JOB_NAME_LENGTH = 40
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class JobRef:
    """The identity of an EmbeddingJob: what children are named after, owned by and labelled
    with."""

    name: str
    namespace: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)


def check_job_name(name: str) -> None:
    """Children names derive from the job's, so the job's must leave them valid."""
    if len(name) > MAX_JOB_NAME_LENGTH or not _DNS_LABEL.match(name):
        raise ConfigError("metadata.name", f"{name!r} must be at most {MAX_JOB_NAME_LENGTH} "
                          "lower-case letters, digits and '-', starting with a letter (the "
                          "names of the job's pods and Services are made from it)")


# --- names ------------------------------------------------------------------------------------

def pod_name(job: str, role: Role, rank: int = 0) -> str:
    return f"{job}-{process_name(role, rank)}"


def is_pod_name(job: str, name: str) -> bool:
    """Whether `name` is that of one of the job's pods, in any run of any size."""
    process = name.removeprefix(f"{job}-")
    ranked = rf"({Role.TRAINER.value}|{Role.PARTITION_SERVER.value})-\d+"
    return process != name and (process == process_name(Role.LOCK_SERVER)
                                or re.fullmatch(ranked, process) is not None)


def config_map_name(job: str) -> str:
    return f"{job}-config"


def lock_server_service_name(job: str) -> str:
    return f"{job}-lock-server"


def partition_servers_service_name(job: str) -> str:
    return f"{job}-partition-servers"


def network_policy_name(job: str) -> str:
    return f"{job}-isolation"


def expected_pods(job: str, spec: EmbeddingJobSpec) -> dict[str, tuple[Role, int]]:
    """Every pod a run of `spec` has, by name: its role and rank, in creation order."""
    pods: dict[str, tuple[Role, int]] = {}
    if spec.distributed:
        pods[pod_name(job, Role.LOCK_SERVER)] = (Role.LOCK_SERVER, 0)
        for rank in range(spec.partition_servers.replicas):
            pods[pod_name(job, Role.PARTITION_SERVER, rank)] = (Role.PARTITION_SERVER, rank)
    for rank in range(spec.trainers.replicas):
        pods[pod_name(job, Role.TRAINER, rank)] = (Role.TRAINER, rank)
    return pods


# --- labels and ownership ---------------------------------------------------------------------

def job_labels(job: str) -> dict[str, str]:
    """The labels every child of the job carries."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: job, LABEL_MANAGED_BY: MANAGER,
            LABEL_JOB: job}


def job_selector(job: str) -> str:
    """The label selector that lists the children of a job (`kubectl get pods -l ...`)."""
    return f"{LABEL_JOB}={job}"


def pod_labels(job: str, role: Role, run: int, rank: int | None) -> dict[str, str]:
    labels = {**job_labels(job), LABEL_ROLE: role.value, LABEL_RUN: str(run)}
    if rank is not None:
        labels[LABEL_RANK] = str(rank)
    return labels


def role_selector(job: str, role: Role) -> dict[str, str]:
    """Selects a role's pods of whatever run (what a Service routes to)."""
    return {LABEL_JOB: job, LABEL_ROLE: role.value}


def owner_reference(job: JobRef) -> dict[str, object]:
    """Makes the job the controller of a child: deleting the job deletes the child."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": job.name, "uid": job.uid,
            "controller": True, "blockOwnerDeletion": True}


def child_metadata(job: JobRef, name: str, labels: dict[str, str]) -> dict[str, object]:
    """A child's name, namespace, owner and labels: the job's, then `labels` over them."""
    return {"name": name, "namespace": job.namespace, "labels": {**job.labels, **labels},
            "ownerReferences": [owner_reference(job)]}


# --- Kueue ------------------------------------------------------------------------------------

def wants_kueue(labels: Mapping[str, str]) -> bool:
    """Whether pods with these labels wait in a Kueue queue."""
    return KUEUE_QUEUE_NAME in labels


def kueue_pod_group(job: JobRef, run: int, pods: int) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations that make the `pods` pods of a run one Kueue pod group.

    A group a run: Kueue removes its finalizer from a group's failed pods only when it sees
    replacements, but the next run's pods take the names of the pods they replace, once those
    are gone. Marked not retriable, a group counts as finished once none of its pods runs (a
    restart, a suspension, the servers stopped after success), so Kueue lets its pods go and
    frees its quota, and the next run queues as a group of its own. The job's uid in the name
    keeps a re-created job of the same name clear of its predecessor's Workloads."""
    labels = {KUEUE_POD_GROUP_NAME: pod_group_name(job, run)}
    annotations = {KUEUE_POD_GROUP_TOTAL_COUNT: str(pods), KUEUE_RETRIABLE_IN_GROUP: "false"}
    return labels, annotations


def pod_group_name(job: JobRef, run: int) -> str:
    """The name of a run's pod group (and of Kueue's Workload for it)."""
    return f"{job.name}-{job.uid[:8]}-{run}"

