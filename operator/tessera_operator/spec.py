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

from .crd import GROUP, VERSION, spec_schema
from .redaction import has_credentials_in_url
from .spec_fields import (
    GPU_RESOURCE,
    IMAGE,
    IMAGE_PULL_POLICY,
    PARTITION_SERVER_REPLICAS,
    RUN_POLICY,
    SECRET_NAME,
    TRAINER_REPLICAS,
    Field,
)

API_VERSION = f"{GROUP}/{VERSION}"

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

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class RoleSpec:
    """The pods of one role: how many, what each may use, and the role's own scheduling."""

    replicas: int
    resources: Mapping[str, Any] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)

    def fingerprinted(self) -> dict[str, Any]:
        """What of the role shapes its pods; scheduling fields only when set, so that jobs
        written before roles had them keep their fingerprint (and their pods)."""
        shaped: dict[str, Any] = {"replicas": self.replicas, "resources": self.resources}
        placement = {"nodeSelector": self.node_selector, "tolerations": self.tolerations,
                     "affinity": self.affinity}
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
    storage: StorageSpec = StorageSpec()
    run_policy: RunPolicy = RunPolicy()
    config_source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def distributed(self) -> bool:
        """Whether the job needs a lock server (several trainers, or partition servers)."""
        return self.trainers.replicas > 1 or self.partition_servers.replicas > 0

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
            "storage": self.storage})


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
        storage=_storage(spec.get("storage", {})),
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
            ("init_path", config.init_path)]
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
        affinity=_affinity(raw.get("affinity", {}), f"{path}.affinity"))


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
            raise ConfigError("spec.storage.endpoint", "remove the user:password part; "
                              "credentials go in the Secret named by spec.storage.secretRef")
    name = None if secret is None else _secret_name(secret, "spec.storage.secretRef")
    return StorageSpec(secret_name=name, endpoint=endpoint)


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

