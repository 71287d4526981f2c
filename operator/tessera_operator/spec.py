"""The EmbeddingJob spec: checked and turned into frozen dataclasses before anything is created.

Field names are the CRD's (`spec.image`, `spec.trainers.replicas`...), and every error is a
`ConfigError` whose path starts with `spec.`, so the message a user sees in `kubectl describe`
names the field to fix. The trainer config under `spec.config` is checked by the trainer's own
validator (`tessera.config.parse_config`): the operator and `tessera train` accept exactly the
same configs; the scalar fields are checked and defaulted from their declarations in
`spec_fields`, which the CRD's schema is made from too. The CRD's OpenAPI schema rejects most
mistakes at `kubectl apply` time already;
this module is the second line, and the only one for rules a schema cannot say (entity types
that a relation names, replica counts that the config must agree with, credentials that must
not be written in the job).

Kubernetes fields copied into pods unchanged (resources, nodeSelector, tolerations, affinity,
imagePullSecrets) are kept as plain JSON values; the builders copy them before use. Scheduling
fields exist job-wide (`spec.nodeSelector`...) and per role (`spec.trainers.nodeSelector`...),
so that trainers can go to a GPU node pool while the servers stay on CPU nodes. GPUs are asked
for through config `num_gpus` alone: a role's `resources` naming `nvidia.com/gpu` otherwise is
refused, naming both fields.

What pods carry for the cluster (labels, annotations, priority class, scheduler, service
account, environment, volumes) comes from `spec.podTemplate` with each role's
`podTemplate` over it (`PodTemplate.merged`). It may add to the pods, never change what the
operator puts in them: the operator's labels (`tessera.dev/*`, app.kubernetes.io/name,
instance and managed-by), its environment variables, volumes and mount paths are refused,
naming the field, rather than silently overridden. So are credentials written as a literal
environment value, and Kueue's pod-group keys: pods labelled `kueue.x-k8s.io/queue-name` are
made one Kueue pod group per run by the operator (`labels.kueue_pod_group`), which a group
written by hand would deadlock on the first restart.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.config import ConfigSchema, parse_config
from tessera.config.validate import did_you_mean
from tessera.errors import ConfigError

from .crd import API_VERSION as API_VERSION  # re-exported: the operator's other modules use it
from .crd import GROUP, LABEL_VALUE_MAX, spec_schema
from .redaction import has_credentials_in_url
from .spec_fields import (
    GPU_RESOURCE,
    IMAGE,
    IMAGE_PULL_POLICY,
    PARTITION_SERVER_REPLICAS,
    POD_TEMPLATE,
    RUN_POLICY,
    SECRET_NAME,
    TRAINER_REPLICAS,
    Field,
    is_dns_subdomain,
)

DEFAULT_BACKOFF_LIMIT: int = RUN_POLICY["backoffLimit"].default

# Config keys that the operator sets from the rest of the spec; a config may repeat them only
# with the value the operator would write.
OPERATOR_OWNED_KEYS = ("num_machines", "num_partition_servers", "distributed_init_method")
# storage_options keys that hold credentials (fsspec's S3, GCS, Azure and HTTP filesystems).
CREDENTIAL_KEYS = frozenset({
    "key", "secret", "token", "session_token", "password", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "account_key", "sas_token",
    "connection_string", "client_secret", "credential", "credentials", "authorization",
    "auth", "private_key"})
# gcsfs `token` values that name a credential source rather than being one.
NON_SECRET_TOKENS = frozenset({"anon", "google_default", "cache", "cloud", "browser"})

# What the operator puts in every pod (`children` builds them from these): a pod template
# may add to them, not change them.
OPERATOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/managed-by")  # and every key under `tessera.dev/`
OPERATOR_VOLUMES: Mapping[str, str] = {"config": "/etc/tessera", "dshm": "/dev/shm",
                                       "tmp": "/tmp"}  # name -> mount path
OPERATOR_ENV = ("HOME", "PYTHONUNBUFFERED")
STORAGE_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")  # with storage.secretRef
STORAGE_ENDPOINT_ENV = "AWS_ENDPOINT_URL"  # with storage.endpoint
# Words of an environment variable's name that make a literal value of it a credential,
# unless the name ends with a word that says it names a file, a place or a role instead.
CREDENTIAL_ENV_WORDS = frozenset({"SECRET", "PASSWORD", "PASSWD", "TOKEN", "KEY", "APIKEY"})
NOT_CREDENTIAL_ENV_ENDINGS = frozenset({"FILE", "PATH", "DIR", "URL", "ARN", "NAME"})
# Kueue's plain pods: the queue a pod waits in (the user's choice), and the pod group that the
# operator makes of each run's pods (`labels.kueue_pod_group`).
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
KUEUE_GROUP_KEYS = (KUEUE_POD_GROUP_NAME, KUEUE_POD_GROUP_TOTAL_COUNT, KUEUE_RETRIABLE_IN_GROUP)

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class PodTemplate:
    """What pods carry besides what the operator puts in them (a `podTemplate`)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    service_account_name: str | None = None
    automount_service_account_token: bool | None = None
    env: tuple[Mapping[str, Any], ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()

    def merged(self, role: PodTemplate) -> PodTemplate:
        """This (the job's) template with a role's over it: maps merged and lists added, the
        role's entry winning for a key, name or mount path in both; the role's scalars
        replacing the job's."""
        return PodTemplate(
            labels={**self.labels, **role.labels},
            annotations={**self.annotations, **role.annotations},
            priority_class_name=_either(role.priority_class_name, self.priority_class_name),
            scheduler_name=_either(role.scheduler_name, self.scheduler_name),
            service_account_name=_either(role.service_account_name, self.service_account_name),
            automount_service_account_token=_either(role.automount_service_account_token,
                                                    self.automount_service_account_token),
            env=_added(self.env, role.env, "name"),
            volumes=_added(self.volumes, role.volumes, "name"),
            volume_mounts=_added(self.volume_mounts, role.volume_mounts, "mountPath"))

    @property
    def mounts_token(self) -> bool:
        """Whether the pods get their ServiceAccount's token. Only a named account's: the
        webhooks of IRSA and similar identities work from it, while the namespace's default
        account gives Tessera's pods nothing they use, so they stay without API access."""
        if self.automount_service_account_token is not None:
            return self.automount_service_account_token
        return self.service_account_name is not None

    def written(self) -> dict[str, Any]:
        """The fields given, under their CRD names (a change of any restarts the pods)."""
        fields = {"labels": self.labels, "annotations": self.annotations,
                  "priorityClassName": self.priority_class_name,
                  "schedulerName": self.scheduler_name,
                  "serviceAccountName": self.service_account_name,
                  "automountServiceAccountToken": self.automount_service_account_token,
                  "env": self.env, "volumes": self.volumes, "volumeMounts": self.volume_mounts}
        return {key: value for key, value in fields.items() if value not in (None, {}, ())}


def _either(role: Any, job: Any) -> Any:
    return job if role is None else role


def _added(job: tuple[Mapping[str, Any], ...], role: tuple[Mapping[str, Any], ...],
           key: str) -> tuple[Mapping[str, Any], ...]:
    replaced = {entry[key] for entry in role}
    return tuple(entry for entry in job if entry[key] not in replaced) + role


@dataclass(frozen=True)
class RoleSpec:
    """The pods of one role: how many, what each may use, the role's own scheduling and what
    its pods carry (over the job-wide pod template)."""

    replicas: int
    resources: Mapping[str, Any] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    pod_template: PodTemplate = PodTemplate()

    def fingerprinted(self) -> dict[str, Any]:
        """What of the role shapes its pods; scheduling and template fields only when set, so
        that jobs written before roles had them keep their fingerprint (and their pods)."""
        shaped: dict[str, Any] = {"replicas": self.replicas, "resources": self.resources}
        placement = {"nodeSelector": self.node_selector, "tolerations": self.tolerations,
                     "affinity": self.affinity, "podTemplate": self.pod_template.written()}
        return {**shaped, **{key: value for key, value in placement.items() if value}}


@dataclass(frozen=True)
class StorageSpec:
    """Where the object store is and which Secret holds its credentials (by name only)."""

    secret_name: str | None = None
    endpoint: str | None = None


@dataclass(frozen=True)
class RunPolicy:
    """Failure, deadline and clean-up rules, Kubernetes Job style."""

    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    suspend: bool = False


@dataclass(frozen=True)
class EmbeddingJobSpec:
    """A checked EmbeddingJob spec."""

    image: str
    config: ConfigSchema
    trainers: RoleSpec = RoleSpec(1)
    partition_servers: RoleSpec = RoleSpec(0)
    lock_server: RoleSpec = RoleSpec(1)
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    pod_template: PodTemplate = PodTemplate()
    storage: StorageSpec = StorageSpec()
    run_policy: RunPolicy = RunPolicy()
    config_source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def distributed(self) -> bool:
        """Whether the job needs a lock server (several trainers, or partition servers)."""
        return _distributed(self.trainers, self.partition_servers)

    def role_template(self, role: RoleSpec) -> PodTemplate:
        """What the pods of `role` (one of this spec's roles) carry."""
        return self.pod_template.merged(role.pod_template)

    def config_fingerprint(self) -> str:
        """Changes exactly when `spec.config` is edited (an edit starts a new run). Taken
        from the config as written, not with defaults filled in, so that a newer schema
        with more keys does not look like an edit of every job."""
        return _fingerprint(self.config_source)

    def pods_fingerprint(self) -> str:
        """Changes exactly when what the pods look like does (a change restarts them)."""
        return _fingerprint({
            "image": self.image, "imagePullPolicy": self.image_pull_policy,
            "imagePullSecrets": self.image_pull_secrets,
            "roles": [role.fingerprinted() for role in
                      (self.trainers, self.partition_servers, self.lock_server)],
            "scheduling": [self.node_selector, self.tolerations, self.affinity],
            "storage": self.storage,
            **({"podTemplate": self.pod_template.written()} if self.pod_template.written()
               else {})})


def _distributed(trainers: RoleSpec, partition_servers: RoleSpec) -> bool:
    return trainers.replicas > 1 or partition_servers.replicas > 0


def _fingerprint(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=lambda o: o.__dict__)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_spec(raw: Any) -> EmbeddingJobSpec:
    """Check an EmbeddingJob's `spec` mapping; raise ConfigError naming `spec.<field>`."""
    spec = _mapping(raw, "spec")
    _check_keys(spec, _schema_keys(), "spec")
    trainers = _role(spec, "trainers", TRAINER_REPLICAS)
    partition_servers = _role(spec, "partitionServers", PARTITION_SERVER_REPLICAS)
    lock_server = _role(spec, "lockServer", None)
    config = _training_config(spec.get("config"), trainers, partition_servers)
    _check_gpus(config.num_gpus, {"trainers": trainers, "partitionServers": partition_servers,
                                  "lockServer": lock_server})
    storage = _storage(spec.get("storage", {}))
    pod_template = _pod_template(spec.get("podTemplate", {}), "spec.podTemplate")
    _check_pod_templates(pod_template, _pods_per_role(trainers, partition_servers, lock_server),
                         storage)
    return EmbeddingJobSpec(
        image=IMAGE.parse(spec, "image", "spec"),
        config=config,
        trainers=trainers,
        partition_servers=partition_servers,
        lock_server=lock_server,
        image_pull_policy=IMAGE_PULL_POLICY.parse(spec, "imagePullPolicy", "spec"),
        image_pull_secrets=_pull_secrets(spec.get("imagePullSecrets", [])),
        node_selector=_node_selector(spec.get("nodeSelector", {}), "spec.nodeSelector"),
        tolerations=_tolerations(spec.get("tolerations", []), "spec.tolerations"),
        affinity=_affinity(spec.get("affinity", {}), "spec.affinity"),
        pod_template=pod_template,
        storage=storage,
        run_policy=_run_policy(spec.get("runPolicy", {})),
        config_source=json.loads(json.dumps(spec["config"])),
    )


# --- the training config ----------------------------------------------------------------------

def _training_config(raw: Any, trainers: RoleSpec, partition_servers: RoleSpec) -> ConfigSchema:
    if raw is None:
        raise ConfigError("spec.config", "required field is missing (the training config, "
                          "with the keys of a `tessera train` config file)")
    try:
        config = parse_config(raw)
    except ConfigError as error:
        inner = "" if error.path in ("", "config") else error.path
        raise ConfigError(f"spec.config.{inner}".rstrip("."), error.problem) from None
    _check_operator_owned(raw, {"num_machines": trainers.replicas,
                                "num_partition_servers": partition_servers.replicas})
    _check_no_credentials(config)
    return config


def _check_operator_owned(raw: Mapping[str, Any], expected: Mapping[str, int]) -> None:
    for key, value in expected.items():
        source = "spec.trainers.replicas" if key == "num_machines" \
            else "spec.partitionServers.replicas"
        if key in raw and raw[key] != value:
            raise ConfigError(f"spec.config.{key}", f"is {raw[key]} but {source} is {value}; "
                              f"remove it: the operator sets it from {source}")
    if raw.get("distributed_init_method") is not None:
        raise ConfigError("spec.config.distributed_init_method", "remove it: the operator "
                          "points the job's pods at its own lock server")


def _check_no_credentials(config: ConfigSchema) -> None:
    """Credentials in the config would be copied into a ConfigMap; they belong in a Secret."""
    advice = "credentials must not be written in an EmbeddingJob (they would be stored in a " \
             "ConfigMap); put them in a Secret and name it in spec.storage.secretRef"
    for path, key, value in _walk(config.storage_options, "spec.config.storage_options"):
        if key.lower() in CREDENTIAL_KEYS and not (key == "token" and value in NON_SECRET_TOKENS):
            raise ConfigError(path, advice)
    urls = [("entity_path", config.entity_path), ("checkpoint_path", config.checkpoint_path),
            ("init_path", config.init_path), ("tracking_path", config.tracking_path)]
    urls += [(f"edge_paths[{i}]", path) for i, path in enumerate(config.edge_paths)]
    for name, url in urls:
        if url is not None and has_credentials_in_url(url):
            raise ConfigError(f"spec.config.{name}", advice)


def _walk(value: Any, path: str) -> Iterable[tuple[str, str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield f"{path}.{key}", str(key), item
            yield from _walk(item, f"{path}.{key}")


# --- roles, scheduling, storage, policy -------------------------------------------------------

def _role(spec: Mapping[str, Any], name: str, replicas_field: Field | None) -> RoleSpec:
    """A role's pods; `replicas_field` None: always one pod (the lock server)."""
    path = f"spec.{name}"
    raw = _mapping(spec.get(name, {}), path)
    _check_keys(raw, _schema_keys(name), path)
    replicas = 1 if replicas_field is None else replicas_field.parse(raw, "replicas", path)
    return RoleSpec(
        replicas, _resources(raw.get("resources", {}), f"{path}.resources"),
        node_selector=_node_selector(raw.get("nodeSelector", {}), f"{path}.nodeSelector"),
        tolerations=_tolerations(raw.get("tolerations", []), f"{path}.tolerations"),
        affinity=_affinity(raw.get("affinity", {}), f"{path}.affinity"),
        pod_template=_pod_template(raw.get("podTemplate", {}), f"{path}.podTemplate"))


def _check_gpus(num_gpus: int, roles: Mapping[str, RoleSpec]) -> None:
    """GPUs come from config num_gpus, to the trainers only: the trainers' resources may
    repeat num_gpus, and say nothing else of GPUs (a GPU that no process uses is paid for
    idle, and one too few fails the trainer)."""
    for role, spec in roles.items():
        for kind in ("limits", "requests"):
            quantity = (spec.resources.get(kind) or {}).get(GPU_RESOURCE)
            if quantity is None:
                continue
            where = f"spec.{role}.resources.{kind}.{GPU_RESOURCE}"
            if role != "trainers":
                raise ConfigError(where, f"only trainers use GPUs; remove it (spec.config."
                                  f"num_gpus gives each trainer pod its {GPU_RESOURCE})")
            if str(quantity) != str(num_gpus):
                raise ConfigError(where, f"is {quantity} but spec.config.num_gpus is "
                                  f"{num_gpus}; remove it: the operator sets it from "
                                  "spec.config.num_gpus")


def _resources(raw: Any, path: str) -> dict[str, Any]:
    resources = _mapping(raw, path)
    _check_keys(resources, _schema_keys(*path.split(".")[1:]), path)
    for kind, quantities in resources.items():
        for resource, quantity in _mapping(quantities, f"{path}.{kind}").items():
            if isinstance(quantity, bool) or not _QUANTITY.match(str(quantity)):
                raise ConfigError(f"{path}.{kind}.{resource}", f"{quantity!r} is not a "
                                  "Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    return dict(resources)


def _pull_secrets(raw: Any) -> tuple[str, ...]:
    names = []
    for i, item in enumerate(_list(raw, "spec.imagePullSecrets")):
        names.append(_secret_name(item, f"spec.imagePullSecrets[{i}]"))
    return tuple(names)


def _node_selector(raw: Any, path: str) -> dict[str, str]:
    selector = _mapping(raw, path)
    for key, value in selector.items():
        if not isinstance(value, str):
            raise ConfigError(f"{path}.{key}", f"expected a string, got {value!r}")
    return dict(selector)


def _tolerations(raw: Any, path: str) -> tuple[dict[str, Any], ...]:
    keys = _schema_keys(*path.split(".")[1:], "[]")
    tolerations = []
    for i, item in enumerate(_list(raw, path)):
        toleration = _mapping(item, f"{path}[{i}]")
        _check_keys(toleration, keys, f"{path}[{i}]")
        tolerations.append(dict(toleration))
    return tuple(tolerations)


def _affinity(raw: Any, path: str) -> dict[str, Any]:
    affinity = _mapping(raw, path)
    _check_keys(affinity, _schema_keys(*path.split(".")[1:]), path)
    return dict(affinity)


def _storage(raw: Any) -> StorageSpec:
    storage = _mapping(raw, "spec.storage")
    _check_keys(storage, _schema_keys("storage"), "spec.storage")
    secret = storage.get("secretRef")
    endpoint = storage.get("endpoint")
    if endpoint is not None:
        if not isinstance(endpoint, str) or not re.match(r"^https?://[^\s/]+", endpoint):
            raise ConfigError("spec.storage.endpoint", f"expected an http(s) URL such as "
                              f"http://minio.storage:9000, got {endpoint!r}")
        if has_credentials_in_url(endpoint):
            raise ConfigError("spec.storage.endpoint", "remove the user information "
                              "(user:password@ or token@); credentials go in the Secret "
                              "named by spec.storage.secretRef")
    name = None if secret is None else _secret_name(secret, "spec.storage.secretRef")
    return StorageSpec(secret_name=name, endpoint=endpoint)


# --- pod templates -----------------------------------------------------------------------------

def _pod_template(raw: Any, path: str) -> PodTemplate:
    template = _mapping(raw, path)
    _check_keys(template, _schema_keys(*path.split(".")[1:]), path)
    scalars = {name: field.parse(template, name, path) for name, field in POD_TEMPLATE.items()}
    return PodTemplate(
        labels=_labels(template.get("labels", {}), f"{path}.labels"),
        annotations=_annotations(template.get("annotations", {}), f"{path}.annotations"),
        priority_class_name=scalars["priorityClassName"],
        scheduler_name=scalars["schedulerName"],
        service_account_name=scalars["serviceAccountName"],
        automount_service_account_token=scalars["automountServiceAccountToken"],
        env=_entries(template.get("env", []), f"{path}.env", "name"),
        volumes=_volumes(template.get("volumes", []), f"{path}.volumes"),
        volume_mounts=_entries(template.get("volumeMounts", []), f"{path}.volumeMounts",
                               "mountPath"))


def _labels(raw: Any, path: str) -> dict[str, str]:
    labels = _annotations(raw, path)
    for key, value in labels.items():
        if len(value) > LABEL_VALUE_MAX or not _LABEL_VALUE.match(value):
            raise ConfigError(f"{path}.{key}", f"{value!r} is not a valid label value (at "
                              f"most {LABEL_VALUE_MAX} letters, digits, '-', '_' and '.', "
                              "starting and ending with a letter or digit)")
    return labels


def _annotations(raw: Any, path: str) -> dict[str, str]:
    """Labels or annotations: qualified keys, string values, none of the operator's own."""
    metadata = _mapping(raw, path)
    for key, value in metadata.items():
        where = f"{path}.{key}"
        if not _is_qualified_name(str(key)):
            raise ConfigError(where, "not a valid key: an optional DNS-subdomain prefix and "
                              "'/', then at most 63 letters, digits, '-', '_' and '.'")
        if not isinstance(value, str):
            raise ConfigError(where, f"expected a string, got {value!r}")
        if str(key).startswith(f"{GROUP}/") or key in OPERATOR_LABELS:
            raise ConfigError(where, f"the operator sets the {GROUP}/ keys and "
                              f"{', '.join(OPERATOR_LABELS)} itself (it lists and selects the "
                              "job's pods by them); choose another key")
    return dict(metadata)


def _is_qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and _LABEL_NAME.match(name) is not None


def _entries(raw: Any, path: str, key: str) -> tuple[dict[str, Any], ...]:
    """A list of mappings each with a unique, non-empty string `key` (env, volumeMounts)."""
    allowed = _schema_keys(*path.split(".")[1:], "[]")
    entries, seen = [], set()
    for i, item in enumerate(_list(raw, path)):
        entry = _mapping(item, f"{path}[{i}]")
        _check_keys(entry, allowed, f"{path}[{i}]")
        value = entry.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}[{i}].{key}", "required field is missing")
        if value in seen:
            raise ConfigError(f"{path}[{i}].{key}", f"{value!r} is given twice")
        seen.add(value)
        entries.append(dict(entry))
    return tuple(entries)


def _volumes(raw: Any, path: str) -> tuple[dict[str, Any], ...]:
    volumes = []
    for i, item in enumerate(_list(raw, path)):
        volume = _mapping(item, f"{path}[{i}]")
        sources = [key for key in volume if key != "name"]
        if len(sources) != 1 or not isinstance(volume[sources[0]], Mapping):
            raise ConfigError(f"{path}[{i}]", "give the name and exactly one volume source "
                              f"(persistentVolumeClaim, configMap, secret, csi...), got "
                              f"{', '.join(map(str, sources)) or 'none'}")
        volumes.append(volume)
    named = _entries_named(volumes, path)
    for i, volume in enumerate(named):
        if len(volume["name"]) > 63 or not _DNS_LABEL.match(volume["name"]):
            raise ConfigError(f"{path}[{i}].name", f"{volume['name']!r} is not a valid volume "
                              "name (at most 63 lower-case letters, digits and '-')")
    return named


def _entries_named(volumes: list[Mapping[str, Any]], path: str) -> tuple[dict[str, Any], ...]:
    seen: set[str] = set()
    for i, volume in enumerate(volumes):
        name = volume.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{path}[{i}].name", "required field is missing")
        if name in seen:
            raise ConfigError(f"{path}[{i}].name", f"{name!r} is given twice")
        seen.add(name)
    return tuple(dict(volume) for volume in volumes)


def _pods_per_role(trainers: RoleSpec, partition_servers: RoleSpec,
                   lock_server: RoleSpec) -> dict[str, tuple[RoleSpec, int]]:
    """Each role by its spec field, with its number of pods in a run."""
    return {"lockServer": (lock_server, int(_distributed(trainers, partition_servers))),
            "partitionServers": (partition_servers, partition_servers.replicas),
            "trainers": (trainers, trainers.replicas)}


def _check_pod_templates(job: PodTemplate, roles: Mapping[str, tuple[RoleSpec, int]],
                         storage: StorageSpec) -> None:
    """What a template may not do, each error naming the field where it is written."""
    operator_env = set(OPERATOR_ENV)
    if storage.secret_name is not None:
        operator_env.update(STORAGE_SECRET_ENV)
    if storage.endpoint is not None:
        operator_env.add(STORAGE_ENDPOINT_ENV)
    levels = {"spec.podTemplate": job, **{f"spec.{name}.podTemplate": role.pod_template
                                          for name, (role, _) in roles.items()}}
    for path, template in levels.items():
        _check_additions(template, path, operator_env)
    for name, (role, pods) in roles.items():
        if pods:
            _check_mounts_have_volumes(job, role.pod_template, name)
    _check_pod_groups(job, roles)


def _check_additions(template: PodTemplate, path: str, operator_env: set[str]) -> None:
    for i, variable in enumerate(template.env):
        where = f"{path}.env[{i}]"
        if variable["name"] in operator_env:
            raise ConfigError(f"{where}.name", f"the operator sets {variable['name']} itself "
                              "(from spec.storage, or for the read-only root filesystem); "
                              "remove it")
        if "value" in variable and "valueFrom" in variable:
            raise ConfigError(where, "give value or valueFrom, not both")
        if "value" in variable and _is_credential_name(variable["name"]):
            raise ConfigError(f"{where}.value", "credentials must not be written in an "
                              "EmbeddingJob; put them in a Secret and take them with "
                              "valueFrom.secretKeyRef")
    for i, volume in enumerate(template.volumes):
        if volume["name"] in OPERATOR_VOLUMES:
            raise ConfigError(f"{path}.volumes[{i}].name", f"{volume['name']!r} is the name "
                              f"of one of the operator's volumes ({', '.join(OPERATOR_VOLUMES)}"
                              "); choose another")
    for i, mount in enumerate(template.volume_mounts):
        mount_path = str(mount["mountPath"])
        taken = [p for p in OPERATOR_VOLUMES.values()
                 if mount_path.rstrip("/") == p or mount_path.startswith(f"{p}/")]
        if not mount_path.startswith("/") or taken:
            raise ConfigError(f"{path}.volumeMounts[{i}].mountPath", f"{mount_path!r}: mount "
                              "at an absolute path outside the operator's mounts ("
                              f"{', '.join(OPERATOR_VOLUMES.values())})")


def _is_credential_name(name: str) -> bool:
    words = name.upper().replace("-", "_").split("_")
    return bool(CREDENTIAL_ENV_WORDS & set(words)) and words[-1] not in NOT_CREDENTIAL_ENV_ENDINGS


def _check_mounts_have_volumes(job: PodTemplate, role: PodTemplate, name: str) -> None:
    volumes = {volume["name"] for volume in job.merged(role).volumes}
    for path, template in (("spec.podTemplate", job), (f"spec.{name}.podTemplate", role)):
        for i, mount in enumerate(template.volume_mounts):
            if mount["name"] not in volumes:
                raise ConfigError(f"{path}.volumeMounts[{i}].name", f"no volume named "
                                  f"{mount['name']!r} for the {name} pods in "
                                  f"spec.podTemplate.volumes or spec.{name}.podTemplate.volumes")


def _check_pod_groups(job: PodTemplate, roles: Mapping[str, tuple[RoleSpec, int]]) -> None:
    """Kueue's pod groups are the operator's to make (one per run, `labels.kueue_pod_group`):
    Kueue keeps a group's failed pods until it sees replacements, while a restart's pods take
    the names of the pods they replace once those are gone, so a group written by hand would
    hold the first restart forever. Every pod of a group must wait in the same queue."""
    levels = {"spec.podTemplate": job, **{f"spec.{name}.podTemplate": role.pod_template
                                          for name, (role, _) in roles.items()}}
    for path, template in levels.items():
        for kind, metadata in (("labels", template.labels),
                               ("annotations", template.annotations)):
            for key in KUEUE_GROUP_KEYS:
                if key in metadata:
                    raise ConfigError(f"{path}.{kind}.{key}", "remove it: the operator makes "
                                      "each run's pods one Kueue pod group when they carry "
                                      f"the label {KUEUE_QUEUE_NAME}")
    queues = {name: job.merged(role.pod_template).labels.get(KUEUE_QUEUE_NAME)
              for name, (role, pods) in roles.items() if pods}
    if len(set(queues.values())) > 1:
        shown = ", ".join(f"{name}: {queue or 'none'}" for name, queue in queues.items())
        raise ConfigError(f"spec.podTemplate.labels.{KUEUE_QUEUE_NAME}", "every pod of the "
                          f"job must wait in the same Kueue queue (one pod group), got {shown}; "
                          "set it once, here")


def _secret_name(raw: Any, path: str) -> str:
    reference = _mapping(raw, path)
    _check_keys(reference, ("name",), path)  # a LocalObjectReference, as Kubernetes has it
    name = SECRET_NAME.parse(reference, "name", path)
    if not _DNS_SUBDOMAIN.match(name):
        raise ConfigError(f"{path}.name", f"{name!r} is not a valid Secret name")
    return name


def _run_policy(raw: Any) -> RunPolicy:
    path = "spec.runPolicy"
    policy = _mapping(raw, path)
    _check_keys(policy, tuple(RUN_POLICY), path)
    values = {name: field.parse(policy, name, path) for name, field in RUN_POLICY.items()}
    return RunPolicy(
        backoff_limit=values["backoffLimit"],
        active_deadline_seconds=values["activeDeadlineSeconds"],
        ttl_seconds_after_finished=values["ttlSecondsAfterFinished"],
        suspend=values["suspend"])


# --- small checks, each naming its path ------------------------------------------------------

@functools.cache
def _schema_keys(*path: str) -> tuple[str, ...]:
    """The fields the CRD's schema declares under `spec.<path>` ("[]": a list's items): one
    declaration serves the API server's validation and the operator's own check."""
    node = spec_schema()
    for name in path:
        node = node["items"] if name == "[]" else node["properties"][name]
    return tuple(node["properties"])


def _mapping(raw: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping, got {type(raw).__name__}")
    return raw


def _list(raw: Any, path: str) -> list[Any]:
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list, got {type(raw).__name__}")
    return raw


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}", "unknown field" + did_you_mean(str(key), allowed)
                              + f"; allowed: {', '.join(allowed)}")

