"""The scalar fields of the EmbeddingJob spec, declared once.

Each field's type, default, bounds and help text live in one `Field`: the CRD's schema of it
(`crd.py`, whose description states the default) and the check and default that `spec.py`
applies are both made from it, the way `spec.config` is made from the trainer's config
schema. The objects around the fields (roles, storage, scheduling) stay in those modules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tessera.config.validate import did_you_mean
from tessera.errors import ConfigError

# Kubernetes' rule for the names of most objects (RFC 1123 subdomains).
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_SUBDOMAIN_MAX = 253


@dataclass(frozen=True)
class Field:
    """One scalar field: what the CRD says of it, and how `spec.py` checks and defaults it.

    `default` is the value an absent field takes; with no default, `unset` says in the
    description what an absent field means ("no limit")."""

    type: Literal["integer", "string", "boolean"]
    help: str
    default: Any = None
    unset: str | None = None
    minimum: int | None = None
    enum: tuple[str, ...] = ()
    required: bool = False
    name: bool = False  # a string that names a Kubernetes object (a DNS subdomain)

    def schema(self) -> dict[str, Any]:
        """The field's OpenAPI v3 schema in the CRD."""
        shown = json.dumps(self.default) if self.default is not None else self.unset
        description = self.help if shown is None else f"{self.help} Default: {shown}."
        schema: dict[str, Any] = {"type": self.type, "description": description}
        if self.enum:
            schema["enum"] = list(self.enum)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.type == "string" and self.required:
            schema["minLength"] = 1
        if self.name:
            schema.update(maxLength=DNS_SUBDOMAIN_MAX, pattern=DNS_SUBDOMAIN.pattern)
        return schema

    def parse(self, raw: Mapping[str, Any], key: str, path: str) -> Any:
        """The field `key` of `raw` (at `path`) checked, or its default when absent; a
        ConfigError naming `path.key` otherwise."""
        where = f"{path}.{key}"
        value = raw.get(key, self.default)
        if value is None and self.required:
            raise ConfigError(where, "required field is missing")
        if value is None and self.default is None:
            return None
        if self.enum and value not in self.enum:
            raise ConfigError(where, f"{value!r} is not one of {', '.join(self.enum)}"
                              + did_you_mean(str(value), self.enum))
        if self.type == "integer":
            return _integer(value, where, self.minimum)
        if self.type == "boolean" and not isinstance(value, bool):
            raise ConfigError(where, f"expected true or false, got {value!r}")
        if self.type == "string" and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(where, f"expected a non-empty string, got {value!r}")
        if self.name and not is_dns_subdomain(value):
            raise ConfigError(where, f"{value!r} is not a valid name (at most "
                              f"{DNS_SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.', "
                              "starting and ending with a letter or digit)")
        return value


def is_dns_subdomain(value: str) -> bool:
    """Whether `value` may name a Kubernetes object such as a Secret or a PriorityClass."""
    return len(value) <= DNS_SUBDOMAIN_MAX and DNS_SUBDOMAIN.match(value) is not None


def _integer(value: Any, path: str, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(path, f"must be at least {minimum}, got {value}")
    return value


# The extended resource a trainer pod asks for per GPU of config `num_gpus` (NVIDIA's device
# plugin's name, which GPU node pools advertise).
GPU_RESOURCE = "nvidia.com/gpu"

IMAGE = Field("string", "Trainer image (the Dockerfile's `trainer` target).", required=True)
IMAGE_PULL_POLICY = Field("string", "When the kubelet pulls the image.",
                          enum=("Always", "IfNotPresent", "Never"))
SECRET_NAME = Field("string", "Name of the Secret.", required=True)
TRAINER_REPLICAS = Field("integer", "Number of trainer pods (config num_machines).",
                         default=1, minimum=1)
PARTITION_SERVER_REPLICAS = Field(
    "integer", "Number of partition server pods (config num_partition_servers); 0 runs none.",
    default=0, minimum=0)
RUN_POLICY = {
    "backoffLimit": Field("integer", "Restarts of the job's pods after a failure before the "
                          "job fails.", default=3, minimum=0),
    "activeDeadlineSeconds": Field("integer", "Seconds a run may take before it fails.",
                                   unset="no limit", minimum=1),
    "ttlSecondsAfterFinished": Field("integer", "Seconds after success or failure at which "
                                     "the job is deleted.", unset="kept", minimum=0),
    "suspend": Field("boolean", "Stop the pods; setting it back to false resumes from the "
                     "last checkpoint.", default=False),
}
# The scalar fields of a pod template (`spec.podTemplate`, `spec.trainers.podTemplate`...); a
# role's value replaces the job's.
POD_TEMPLATE = {
    "priorityClassName": Field("string", "PriorityClass of the pods (e.g. the one a Kueue "
                               "ClusterQueue preempts by).", unset="the cluster's default",
                               name=True),
    "schedulerName": Field("string", "Scheduler that places the pods (e.g. a gang scheduler's).",
                           unset="the default scheduler", name=True),
    "serviceAccountName": Field("string", "ServiceAccount the pods run as, for a cloud identity "
                                "bound to it (IRSA, Workload Identity).",
                                unset="the namespace's default account", name=True),
    "automountServiceAccountToken": Field(
        "boolean", "Mount the ServiceAccount's API token into the pods (Tessera's pods never "
        "use it).", unset="true when serviceAccountName is set (IRSA's and similar webhooks "
        "rely on it), else false"),
}
