"""The objects a run of a job consists of, as manifests: pure functions of (job, spec, plan).

One ConfigMap holds the run's config file; a NetworkPolicy lets only the job's own pods reach
its pods, except on the metrics port, which every role serves (`--metrics-port`, Prometheus
text: training figures, no data or secrets) for any scraper; pods run the roles. A job with
one trainer and no partition servers is one pod, `tessera train CONFIG`. A distributed job
adds a lock server (whose Service is the rendezvous of every role), partition servers (behind
a headless Service, one DNS name per rank) and trainers with `--rank R`.

Every pod is locked down the same way: non-root, read-only root filesystem, no privilege
escalation, no capabilities, the runtime's seccomp profile, no service-account token (the
pods never talk to the API), `restartPolicy: Never` (the operator restarts whole runs, from a
checkpoint), and a termination message that falls back to the log tail, which is where the
operator reads why a pod failed. The only writable places are a memory-backed /dev/shm (the
Hogwild workers share tensors through it) and /tmp. Storage credentials reach the pods only
as environment variables taken from the Secret the spec names.

Trainer pods of a config with `num_gpus: N` ask for N `nvidia.com/gpu` (limits and requests,
which must be equal for an extended resource); the servers never do. Each pod's scheduling is
the job-wide fields with its role's added: node labels merged (the role's win), tolerations
appended, and each kind of affinity the role gives replacing the job's.

A pod also carries its role's pod template (`spec.podTemplate` with the role's over it): its
labels and annotations, priority class, scheduler, service account, and environment
variables, volumes and mounts after the operator's own (which `spec` keeps the template from
changing). The service-account token is mounted only for a named account (`spec.PodTemplate.
mounts_token`): that is what cloud identities such as IRSA are bound to. Pods labelled with a
Kueue queue also get the run's Kueue pod group (`labels.kueue_pod_group`).
"""

from __future__ import annotations

import copy
from typing import Any

from .labels import (
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_RUN,
    JobRef,
    Role,
    child_metadata,
    config_map_name,
    expected_pods,
    job_labels,
    kueue_pod_group,
    lock_server_service_name,
    network_policy_name,
    partition_servers_service_name,
    pod_labels,
    pod_name,
    role_selector,
    wants_kueue,
)
from .run_config import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONFIG_PATH,
    RENDEZVOUS_PORT,
    RunPlan,
    config_file_text,
    run_config,
)
from .spec import (
    OPERATOR_VOLUMES,
    STORAGE_ENDPOINT_ENV,
    STORAGE_SECRET_ENV,
    EmbeddingJobSpec,
    PodTemplate,
    RoleSpec,
)
from .spec_fields import GPU_RESOURCE

Manifest = dict[str, Any]

# The trainer image's unprivileged user (the Dockerfile's `tessera`, uid 10001), stated so
# that the kubelet can verify `runAsNonRoot` whatever image the spec names.
POD_USER = 10001
POD_SECURITY_CONTEXT: Manifest = {
    "runAsNonRoot": True, "runAsUser": POD_USER, "runAsGroup": POD_USER, "fsGroup": POD_USER,
    "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT: Manifest = {
    "runAsNonRoot": True, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
    "privileged": False, "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"}}
# Every role serves its Prometheus metrics on this port (the chart's PodMonitor scrapes it).
METRICS_PORT = 8081
# The keys the storage Secret must have; they become the same-named environment variables.
SECRET_KEYS = STORAGE_SECRET_ENV


def children(job: JobRef, spec: EmbeddingJobSpec, plan: RunPlan) -> list[Manifest]:
    """Everything a run needs, in the order to create it (what pods mount comes first)."""
    objects = [config_map(job, spec, plan), network_policy(job)]
    if spec.distributed:
        objects += [lock_server_service(job), partition_servers_service(job)]
    objects += [pod(job, spec, plan, role, rank)
                for role, rank in expected_pods(job.name, spec).values()]
    return objects


def config_map(job: JobRef, spec: EmbeddingJobSpec, plan: RunPlan) -> Manifest:
    labels = {**job_labels(job.name), LABEL_RUN: str(plan.number)}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": child_metadata(job, config_map_name(job.name), labels),
            "data": {CONFIG_FILE: config_file_text(run_config(job, spec, plan))}}


def network_policy(job: JobRef) -> Manifest:
    """Only the job's own pods may connect to its pods (gloo connects every rank to every
    other, so trainers are covered as well as the lock and partition servers); the metrics
    port is open to any scraper (Prometheus runs in a namespace of its own)."""
    def own_pods() -> Manifest:
        return {"matchLabels": {LABEL_JOB: job.name}}

    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": child_metadata(job, network_policy_name(job.name),
                                       job_labels(job.name)),
            "spec": {"podSelector": own_pods(), "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": own_pods()}]},
                                 {"ports": [{"port": METRICS_PORT, "protocol": "TCP"}]}]}}


def lock_server_service(job: JobRef) -> Manifest:
    return _service(job, lock_server_service_name(job.name), Role.LOCK_SERVER, headless=False)


def partition_servers_service(job: JobRef) -> Manifest:
    """Headless: each partition server is reachable as `{pod}.{service}` by its rank."""
    return _service(job, partition_servers_service_name(job.name), Role.PARTITION_SERVER,
                    headless=True)


def _service(job: JobRef, name: str, role: Role, *, headless: bool) -> Manifest:
    spec: Manifest = {"selector": role_selector(job.name, role),
                      "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT,
                                 "targetPort": RENDEZVOUS_PORT, "protocol": "TCP"}]}
    if headless:
        spec.update({"clusterIP": "None", "publishNotReadyAddresses": True})
    labels = {**job_labels(job.name), LABEL_ROLE: role.value}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": child_metadata(job, name, labels), "spec": spec}


def pod(job: JobRef, spec: EmbeddingJobSpec, plan: RunPlan, role: Role, rank: int) -> Manifest:
    """One pod of the run; its name does not depend on the run, its `run` label does."""
    name = pod_name(job.name, role, rank)
    template = spec.role_template(_role_spec(spec, role))
    labels = {**template.labels, **pod_labels(job.name, role, plan.number,
                                              None if role is Role.LOCK_SERVER else rank)}
    annotations = dict(template.annotations)
    if wants_kueue({**job.labels, **labels}):
        group_labels, group_annotations = kueue_pod_group(
            job, plan.number, len(expected_pods(job.name, spec)))
        labels.update(group_labels)
        annotations.update(group_annotations)
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": template.mounts_token,
        "enableServiceLinks": False,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [_container(spec, role, rank, template)],
        "volumes": _volumes(job) + copy.deepcopy([dict(v) for v in template.volumes]),
    }
    if role is Role.PARTITION_SERVER:
        pod_spec.update({"hostname": name, "subdomain": partition_servers_service_name(job.name)})
    pod_spec.update(_scheduling(spec, _role_spec(spec, role)))
    pod_spec.update(_placement(template))
    metadata = child_metadata(job, name, labels)
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def command(spec: EmbeddingJobSpec, role: Role, rank: int) -> list[str]:
    """The `tessera` command a role runs; every role reads the same config file."""
    subcommand = "train" if role is Role.TRAINER else role.value
    ranked = spec.distributed and role is not Role.LOCK_SERVER
    return ["tessera", subcommand, CONFIG_PATH, *(["--rank", str(rank)] if ranked else []),
            "--log-format", "json", "--metrics-port", str(METRICS_PORT)]


def _role_spec(spec: EmbeddingJobSpec, role: Role) -> RoleSpec:
    return {Role.TRAINER: spec.trainers, Role.LOCK_SERVER: spec.lock_server,
            Role.PARTITION_SERVER: spec.partition_servers}[role]


def container_resources(spec: EmbeddingJobSpec, role: Role) -> Manifest:
    """The role's `resources`, with the trainers' GPUs from config num_gpus."""
    wanted = copy.deepcopy(dict(_role_spec(spec, role).resources))
    gpus = spec.config.num_gpus
    if role is Role.TRAINER and gpus > 0:
        for kind in ("limits", "requests"):
            wanted[kind] = {**wanted.get(kind, {}), GPU_RESOURCE: str(gpus)}
    return wanted


def _container(spec: EmbeddingJobSpec, role: Role, rank: int,
               template: PodTemplate) -> Manifest:
    container: Manifest = {
        "name": role.value,
        "image": spec.image,
        "command": command(spec, role, rank),
        "env": container_env(spec) + copy.deepcopy([dict(v) for v in template.env]),
        "resources": container_resources(spec, role),
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": OPERATOR_VOLUMES["dshm"]},
            {"name": "tmp", "mountPath": OPERATOR_VOLUMES["tmp"]},
            *copy.deepcopy([dict(m) for m in template.volume_mounts]),
        ],
    }
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    container["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    if role is Role.LOCK_SERVER:
        container["ports"].insert(0, {"name": "rendezvous", "containerPort": RENDEZVOUS_PORT,
                                      "protocol": "TCP"})
    return container


def container_env(spec: EmbeddingJobSpec) -> list[Manifest]:
    """The environment of every container: credentials only by reference to the Secret."""
    env: list[Manifest] = [{"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
                           {"name": "PYTHONUNBUFFERED", "value": "1"}]
    if spec.storage.secret_name is not None:
        env += [{"name": key, "valueFrom": {"secretKeyRef": {
                    "name": spec.storage.secret_name, "key": key}}} for key in SECRET_KEYS]
    if spec.storage.endpoint is not None:
        env.append({"name": STORAGE_ENDPOINT_ENV, "value": spec.storage.endpoint})
    return env


def _volumes(job: JobRef) -> list[Manifest]:
    return [{"name": "config", "configMap": {"name": config_map_name(job.name)}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "tmp", "emptyDir": {}}]


def _scheduling(spec: EmbeddingJobSpec, role: RoleSpec) -> Manifest:
    fields: Manifest = {}
    node_selector = {**spec.node_selector, **role.node_selector}
    if node_selector:
        fields["nodeSelector"] = node_selector
    tolerations = [dict(t) for t in spec.tolerations]
    tolerations += [dict(t) for t in role.tolerations if dict(t) not in tolerations]
    if tolerations:
        fields["tolerations"] = copy.deepcopy(tolerations)
    affinity = {**spec.affinity, **role.affinity}
    if affinity:
        fields["affinity"] = copy.deepcopy(affinity)
    if spec.image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    return fields


def _placement(template: PodTemplate) -> Manifest:
    """The pod fields of a template that name cluster objects (none when not given)."""
    named = {"priorityClassName": template.priority_class_name,
             "schedulerName": template.scheduler_name,
             "serviceAccountName": template.service_account_name}
    return {key: value for key, value in named.items() if value is not None}
