"""The EmbeddingJob CustomResourceDefinition, generated.

`spec.config` is derived from the trainer's own config schema (`tessera.config`), converted to
a structural Kubernetes schema, so the CRD can never disagree with what `tessera train`
accepts. The rest of the spec (image, roles, scheduling, storage, run policy) and the status
are described here, once, their scalar fields' types, defaults and bounds in `spec_fields`
(from which `spec.py` checks them too). `python -m tessera_operator.crd` prints the CRD as YAML; the
committed `crds/embeddingjob.yaml` is that output, and a test keeps it so.

Unknown fields are rejected the Kubernetes way: a structural schema prunes them, and
`kubectl apply` (strict field validation, the default) turns any pruned field into an error.
Kubernetes forbids `additionalProperties: false` next to `properties`, so the schema says it
by omission.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from tessera.config import config_json_schema

from . import spec_fields

GROUP = "tessera.dev"
VERSION = "v1alpha1"
KIND = "EmbeddingJob"
PLURAL = "embeddingjobs"
SINGULAR = "embeddingjob"
SHORT_NAMES = ["ej"]
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = f"{GROUP}/{VERSION}"
# The operator's finalizer on every EmbeddingJob (kopf's, under the project's name): a job
# marked for deletion stays until the operator has stopped its work on it.
FINALIZER = f"{GROUP}/finalizer"
PHASES = ["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]

Schema = dict[str, Any]

# Keywords of the config's JSON Schema that carry over to OpenAPI v3 unchanged.
_KEPT_KEYWORDS = {"type", "description", "enum", "minimum", "maximum", "required"}

# Kubernetes' own pattern for resource quantities ("500m", "2Gi", "1e3").
_QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                     r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


# --- the trainer config, converted ------------------------------------------------------------

def structural_schema(node: Schema) -> Schema:
    """Convert one draft 2020-12 node of the config's JSON Schema to Kubernetes' OpenAPI v3
    dialect. Unknown keywords raise, so a new construct in the config schema cannot slip into
    the CRD unconverted."""
    out: Schema = {}
    for keyword, value in node.items():
        if keyword in ("$schema", "title"):
            continue
        if keyword == "type" and isinstance(value, list):
            (out["type"],) = [name for name in value if name != "null"]
            out["nullable"] = True
        elif keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            # Draft 2020-12 gives the bound itself; OpenAPI v3 a flag on minimum/maximum.
            out["minimum" if keyword == "exclusiveMinimum" else "maximum"] = value
            out[keyword] = True
        elif keyword == "properties":
            out["properties"] = {name: structural_schema(child) for name, child in value.items()}
        elif keyword == "items":
            out["items"] = structural_schema(value)
        elif keyword == "additionalProperties":
            out.update(_additional_properties(value, has_properties="properties" in node))
        elif keyword == "default":
            # Defaults stay the trainer's: the API server does not stamp them into objects.
            continue
        elif keyword in _KEPT_KEYWORDS:
            out[keyword] = value
        else:
            raise ValueError(f"no OpenAPI v3 equivalent for JSON Schema keyword {keyword!r}")
    if "default" in node:
        default = node["default"]
        shown = "unset" if default is None else json.dumps(default)
        out["description"] = f"{out.get('description', '')} Default: {shown}.".lstrip()
    if out.get("required") == []:
        del out["required"]
    return out


def _additional_properties(value: bool | Schema, has_properties: bool) -> Schema:
    if value is False and has_properties:
        return {}  # closed object: pruning plus strict field validation reject the rest
    if value is True:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if isinstance(value, dict) and not has_properties:
        return {"additionalProperties": structural_schema(value)}
    raise ValueError(f"additionalProperties={value!r} has no structural equivalent here")


def config_schema() -> Schema:
    """`spec.config`: the trainer's config schema, structural."""
    schema = structural_schema(config_json_schema())
    schema["description"] = ("The training config: exactly the keys of `tessera train`'s "
                              "config file (PyTorch-BigGraph's names and defaults); paths are "
                              "object-store URLs.")
    return schema


# --- Kubernetes building blocks ---------------------------------------------------------------

def _object(description: str, properties: dict[str, Schema], required: list[str] | None = None,
            ) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _string(description: str, enum: list[str] | None = None, min_length: int | None = None,
            ) -> Schema:
    schema: Schema = {"type": "string", "description": description}
    if enum is not None:
        schema["enum"] = enum
    if min_length is not None:
        schema["minLength"] = min_length
    return schema


def _integer(description: str, minimum: int | None = None, maximum: int | None = None) -> Schema:
    schema: Schema = {"type": "integer", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _number(description: str) -> Schema:
    return {"type": "number", "description": description}


def _array(description: str, items: Schema) -> Schema:
    return {"type": "array", "description": description, "items": items}


def _string_map(description: str) -> Schema:
    return {"type": "object", "description": description,
            "additionalProperties": {"type": "string"}}


def _timestamp(description: str) -> Schema:
    return {"type": "string", "format": "date-time", "description": description}


def _quantity() -> Schema:
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": _QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True}


def resources_schema(role: str) -> Schema:
    """A core/v1 ResourceRequirements (requests and limits) for the pods of one role."""
    quantities = {"type": "object", "additionalProperties": _quantity()}
    return _object(f"CPU, memory and other resources of each {role} pod, as in a container's "
                   "`resources`" + (f" ({spec_fields.GPU_RESOURCE} comes from config "
                                    "num_gpus)." if role == "trainer" else "."), {
        "requests": {**quantities, "description": "Minimum resources (e.g. cpu: 2, memory: 4Gi)."},
        "limits": {**quantities, "description": "Maximum resources."},
    })


def _label_selector(description: str) -> Schema:
    requirement = _object("A label requirement.", {
        "key": _string("Label key."),
        "operator": _string("Relation of the key to the values.",
                            ["In", "NotIn", "Exists", "DoesNotExist"]),
        "values": _array("Values; empty for Exists and DoesNotExist.", {"type": "string"}),
    }, required=["key", "operator"])
    return _object(description, {
        "matchLabels": _string_map("Labels that must all match."),
        "matchExpressions": _array("Requirements that must all hold.", requirement),
    })


def _node_selector_term() -> Schema:
    requirement = _object("A node label or field requirement.", {
        "key": _string("Label or field key."),
        "operator": _string("Relation of the key to the values.",
                            ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        "values": _array("Values to compare with.", {"type": "string"}),
    }, required=["key", "operator"])
    return _object("Node requirements that must all hold.", {
        "matchExpressions": _array("Requirements on node labels.", requirement),
        "matchFields": _array("Requirements on node fields.", requirement),
    })


def _pod_affinity_term() -> Schema:
    return _object("Pods (selected by labels and namespaces) to be near or away from.", {
        "labelSelector": _label_selector("The pods this term is about."),
        "namespaceSelector": _label_selector("Namespaces whose pods count."),
        "namespaces": _array("Namespaces whose pods count.", {"type": "string"}),
        "topologyKey": _string("Node label whose equal values mean 'near'.", min_length=1),
        "matchLabelKeys": _array("Incoming pod label keys to add to the selector.",
                                 {"type": "string"}),
        "mismatchLabelKeys": _array("Incoming pod label keys to exclude.", {"type": "string"}),
    }, required=["topologyKey"])


def _weighted(term_name: str, term: Schema) -> Schema:
    return _object("A preference and its weight.", {
        "weight": _integer("Weight of the preference.", minimum=1, maximum=100),
        term_name: term,
    }, required=["weight", term_name])


def _pod_affinity(description: str) -> Schema:
    return _object(description, {
        "requiredDuringSchedulingIgnoredDuringExecution": _array(
            "Terms that must hold at scheduling.", _pod_affinity_term()),
        "preferredDuringSchedulingIgnoredDuringExecution": _array(
            "Terms preferred at scheduling.", _weighted("podAffinityTerm", _pod_affinity_term())),
    })


def affinity_schema(pods: str = "every pod of the job") -> Schema:
    """A core/v1 Affinity, spelled out so that unknown fields are rejected here too."""
    node_affinity = _object("Constraints on the nodes the pods may run on.", {
        "requiredDuringSchedulingIgnoredDuringExecution": _object(
            "Terms of which at least one must hold at scheduling.", {
                "nodeSelectorTerms": _array("The terms, ORed.", _node_selector_term()),
            }, required=["nodeSelectorTerms"]),
        "preferredDuringSchedulingIgnoredDuringExecution": _array(
            "Terms preferred at scheduling.", _weighted("preference", _node_selector_term())),
    })
    return _object(f"Affinity of {pods}, as in a pod's `affinity`.", {
        "nodeAffinity": node_affinity,
        "podAffinity": _pod_affinity("Pods to be scheduled near."),
        "podAntiAffinity": _pod_affinity("Pods to be scheduled away from."),
    })


def toleration_schema() -> Schema:
    return _object("A taint the pods tolerate, as in a pod's `tolerations`.", {
        "key": _string("Taint key; empty with operator Exists matches every taint."),
        "operator": _string("Exists matches any value; Equal (the default) the given value.",
                            ["Exists", "Equal"]),
        "value": _string("Taint value, for operator Equal."),
        "effect": _string("Taint effect to tolerate; empty means all.",
                          ["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        "tolerationSeconds": _integer("How long a NoExecute taint is tolerated."),
    })


# --- the pod template: what clusters require of pods --------------------------------------------

# Kubernetes' rule for label values: at most 63 characters, alphanumeric at both ends.
LABEL_VALUE_MAX = 63
_LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def _key_ref(kind: str) -> Schema:
    return _object(f"A key of a {kind} in the job's namespace.", {
        "name": _string(f"Name of the {kind}."),
        "key": _string("The key.", min_length=1),
        "optional": _boolean(f"Whether the {kind} or its key may be missing."),
    }, required=["key"])


def env_var_schema() -> Schema:
    """A core/v1 EnvVar, spelled out (literal, Secret or ConfigMap key, or downward API)."""
    return _object("An environment variable, as in a container's `env`.", {
        "name": _string("Name of the variable; not one the operator sets (HOME, "
                        "PYTHONUNBUFFERED, and the storage ones when spec.storage gives them).",
                        min_length=1),
        "value": _string("Its value. Credentials are refused here: take them from a Secret "
                         "with valueFrom.secretKeyRef."),
        "valueFrom": _object("Where its value comes from.", {
            "secretKeyRef": _key_ref("Secret"),
            "configMapKeyRef": _key_ref("ConfigMap"),
            "fieldRef": _object("A field of the pod (the downward API).", {
                "apiVersion": _string("Version of the schema the path is written in."),
                "fieldPath": _string("Path of the field, e.g. metadata.name.", min_length=1),
            }, required=["fieldPath"]),
            "resourceFieldRef": _object("A resource limit or request of the container.", {
                "containerName": _string("The container (the role's, if empty)."),
                "resource": _string("The resource, e.g. limits.memory.", min_length=1),
                "divisor": {**_quantity(), "description": "Unit of the value (default 1)."},
            }, required=["resource"]),
        }),
    }, required=["name"])


def volume_schema() -> Schema:
    """A core/v1 Volume: its name checked, its one source (persistentVolumeClaim, configMap,
    secret, csi, projected, ...) passed through as written; the core schema of every source
    would make the CRD many times larger, and the API server checks the pods anyway."""
    schema = _object("A volume of the pods, as in a pod's `volumes`: a name and one volume "
                     "source.", {
                         "name": {**_string("Name of the volume, which volumeMounts name (not "
                                            "config, dshm or tmp: the operator's own).",
                                            min_length=1),
                                  "maxLength": 63, "pattern": _DNS_LABEL_PATTERN},
                     }, required=["name"])
    schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def volume_mount_schema() -> Schema:
    """A core/v1 VolumeMount, spelled out."""
    return _object("Where a volume is mounted in the pods' container, as in a container's "
                   "`volumeMounts`.", {
                       "name": _string("Name of a volume of the pod template (the job's or "
                                       "the role's).", min_length=1),
                       "mountPath": {**_string("Absolute path in the container; not "
                                               "/etc/tessera, /dev/shm or /tmp (the "
                                               "operator's mounts) or inside them.",
                                               min_length=1), "pattern": "^/"},
                       "readOnly": _boolean("Mount read-only."),
                       "subPath": _string("Path inside the volume to mount instead of its "
                                          "root."),
                       "subPathExpr": _string("subPath with $(VAR) references to the "
                                              "container's environment."),
                       "mountPropagation": _string("How mounts propagate between the host "
                                                   "and the container.",
                                                   ["None", "HostToContainer",
                                                    "Bidirectional"]),
                   }, required=["name", "mountPath"])


def _listed_by(key: str, schema: Schema) -> Schema:
    """A list whose items are unique by `key` (so that server-side apply merges by it)."""
    return {**schema, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


def pod_template_schema(pods: str, merged: str = "") -> Schema:
    """What the pods carry besides what the operator puts in them: the metadata a cluster's
    queues, schedulers, meshes and cost tools read, an identity, environment and volumes."""
    label_value = {"type": "string", "maxLength": LABEL_VALUE_MAX,
                   "pattern": _LABEL_VALUE_PATTERN}
    fields = spec_fields.POD_TEMPLATE
    return _object(f"Metadata, identity, environment and volumes of {pods}{merged}. Labels "
                   "and annotations under the tessera.dev/ prefix, the operator's "
                   "app.kubernetes.io/name, instance and managed-by labels, and Kueue's "
                   "pod-group keys (the operator makes each run's pods one group when they "
                   "carry kueue.x-k8s.io/queue-name) are refused.", {
        "labels": {"type": "object", "additionalProperties": label_value,
                   "description": "Labels of the pods (e.g. kueue.x-k8s.io/queue-name)."},
        "annotations": _string_map("Annotations of the pods (e.g. "
                                   "kueue.x-k8s.io/pod-group-total-count)."),
        **{name: field.schema() for name, field in fields.items()},
        "env": _listed_by("name", _array("Environment variables of the pods' container, "
                                         "after the operator's.", env_var_schema())),
        "volumes": _listed_by("name", _array("Volumes of the pods, besides the operator's.",
                                             volume_schema())),
        "volumeMounts": _listed_by("mountPath", _array(
            "Mounts of these volumes in the pods' container.", volume_mount_schema())),
    })


# --- spec and status --------------------------------------------------------------------------

def _role(role: str, replicas: Schema | None) -> Schema:
    """A role's pods: how many, what each may use, where they may run (added to the job-wide
    scheduling fields: the role's node labels and affinity kinds win, tolerations add up) and
    what they carry (added to the job-wide pod template)."""
    properties = {
        "resources": resources_schema(role),
        "nodeSelector": _string_map(f"Node labels the {role} pods require, besides the job's "
                                    "nodeSelector (the role's value wins for a key in both)."),
        "tolerations": _array(f"Taints the {role} pods tolerate, besides the job's "
                              "tolerations.", toleration_schema()),
        "affinity": affinity_schema(f"the {role} pods (each of nodeAffinity, podAffinity and "
                                    "podAntiAffinity given here replaces the job's)"),
        "podTemplate": pod_template_schema(
            f"the {role} pods", ", added to spec.podTemplate: labels, annotations and "
            "environment variables merged (the role's value wins for a key or name in both), "
            "volumes and mounts added (the role's win for a name or path in both), each other "
            "field given here replacing the job's"),
    }
    if replicas is not None:
        properties = {"replicas": replicas, **properties}
    return _object(f"The {role} pods.", properties)


def spec_schema() -> Schema:
    """What the user writes: the config, the image, the roles, scheduling, storage, policy."""
    secret_ref = _object("A Secret in the job's namespace.", {
        "name": spec_fields.SECRET_NAME.schema()}, required=["name"])
    return _object("The training job: what to train and how to run it.", {
        "image": spec_fields.IMAGE.schema(),
        "imagePullPolicy": spec_fields.IMAGE_PULL_POLICY.schema(),
        "imagePullSecrets": _array("Secrets for pulling the image from a private registry.",
                                   secret_ref),
        "config": config_schema(),
        "trainers": _role("trainer", spec_fields.TRAINER_REPLICAS.schema()),
        "partitionServers": _role("partition server",
                                  spec_fields.PARTITION_SERVER_REPLICAS.schema()),
        "lockServer": _role("lock server", None),
        "nodeSelector": _string_map("Node labels every pod of the job requires."),
        "tolerations": _array("Taints every pod of the job tolerates.", toleration_schema()),
        "affinity": affinity_schema(),
        "podTemplate": pod_template_schema("every pod of the job"),
        "storage": _object("Access to the object store holding the data and checkpoints.", {
            "secretRef": _object(
                "Secret holding the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, handed to "
                "the training pods as environment variables; credentials go nowhere else.",
                secret_ref["properties"], required=["name"]),
            "endpoint": _string("Endpoint URL of an S3-compatible store (e.g. "
                                "http://minio.storage:9000); empty means AWS.", min_length=1),
        }),
        "runPolicy": _object("How failures, deadlines and finished jobs are handled.", {
            name: field.schema() for name, field in spec_fields.RUN_POLICY.items()}),
    }, required=["image", "config"])


def _condition() -> Schema:
    return _object("One aspect of the job's state, as in Kubernetes' API conventions.", {
        "type": _string("Condition type (Created, Running, Restarting, Suspended, Succeeded, "
                        "Failed)."),
        "status": _string("Whether the condition holds.", ["True", "False", "Unknown"]),
        "reason": _string("Machine-readable reason of the last transition (CamelCase)."),
        "message": _string("Human-readable details."),
        "lastTransitionTime": _timestamp("When the status last changed."),
        "observedGeneration": _integer("The spec generation the condition was set for.",
                                       minimum=0),
    }, required=["type", "status"])


def _run_record() -> Schema:
    # The operator's memory of the current run.
    return {**_object("The current run: a new one starts whenever the spec changes.", {
        "number": _integer("Number of the run, from 1 (0: no pods were started yet).",
                           minimum=0),
        "configHash": _string("Fingerprint of spec.config the run was started with."),
        "podsHash": _string("Fingerprint of the pod-shaping spec fields (image, resources, "
                            "scheduling, storage) the run was started with."),
        "initPath": {**_string("Checkpoint the run initialised its model from (the previous "
                               "run's), if any."), "nullable": True},
    }), "nullable": True}


def status_schema() -> Schema:
    """What the operator writes: conditions first, the phase derived from them."""
    count = "Number of ready {} pods."
    conditions = _array("Conditions of the job; `phase` is derived from them.", _condition())
    conditions.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    return _object("The observed state of the job, written by the operator.", {
        "phase": _string("Summary of the conditions.", PHASES),
        "message": _string("Human-readable summary of the current state."),
        "observedGeneration": _integer("The spec generation the current run trains.", minimum=0),
        "conditions": conditions,
        "startTime": _timestamp("When the current run started."),
        "completionTime": _timestamp("When the job succeeded or failed."),
        "restarts": _integer("Restarts of the pods after failures in the current run.",
                             minimum=0),
        "run": _run_record(),
        "readyPods": _object("Ready pods per role.", {
            "lockServer": _integer(count.format("lock server"), minimum=0),
            "partitionServers": _integer(count.format("partition server"), minimum=0),
            "trainers": _integer(count.format("trainer"), minimum=0)}),
        "progress": _object("Training progress, current within seconds while running.", {
            "epoch": _integer("The epoch being trained, from 1 (num_epochs once done).",
                              minimum=0),
            "numEpochs": _integer("Epochs of the run (config num_epochs).", minimum=0),
            "epochs": _string("`epoch/numEpochs`, for display."),
            "bucketsDone": _integer("Buckets trained in the current epoch.", minimum=0),
            "bucketsTotal": _integer("Buckets in an epoch (all edge sets).", minimum=0),
            "chunksDone": _integer("Edge chunks of the whole run committed (one checkpoint "
                                   "each: epochs x edge paths x num_edge_chunks in all).",
                                   minimum=0),
            "chunksTotal": _integer("Edge chunks of the whole run.", minimum=0),
            "percentComplete": _string("Share of the whole run done (e.g. `42%`), for display: "
                                       "the most of the committed chunks, the epochs before "
                                       "the current one and the trainer's own count."),
            "eta": _string("Time left (e.g. `4m10s`) as of updateTime, for display."),
            "estimatedCompletionTime": _timestamp(
                "When training should finish, at the rate measured last."),
            "edgesPerSecond": _number("Recent training throughput of the whole job."),
            "loss": _number("Mean loss of the last trained bucket."),
            "updateTime": _timestamp("When the trainers last reported."),
            "readError": _string("Why the last read of the trainer's progress failed; the "
                                 "other fields keep their last known values meanwhile."),
        }),
        "metrics": _object("Metrics of the last evaluation on held-out edges.", {
            "mrr": _number("Mean reciprocal rank."),
            "hitsAt1": _number("Hits@1."),
            "hitsAt10": _number("Hits@10."),
            "hitsAt50": _number("Hits@50."),
            "meanRank": _number("Mean rank."),
            "auc": _number("Area under the ROC curve."),
        }),
        "checkpoint": _object("The last committed checkpoint.", {
            "version": _integer("Checkpoint version (`checkpoint_version.txt`).", minimum=0),
            "path": _string("Checkpoint directory (config checkpoint_path)."),
        }),
        # kopf keeps its handler progress here as well as in annotations.
        "kopf": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "description": "Bookkeeping of the operator's framework."},
    })


# --- the CRD ----------------------------------------------------------------------------------

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Epoch", "type": "string", "jsonPath": ".status.progress.epochs"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress.percentComplete"},
    {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta"},
    {"name": "MRR", "type": "number", "jsonPath": ".status.metrics.mrr"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def embedding_job_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    root = _object("An EmbeddingJob trains graph embeddings PyTorch-BigGraph style.", {
        "apiVersion": _string("Versioned schema of this object."),
        "kind": _string("Kind of this object."),
        "metadata": {"type": "object"},
        "spec": spec_schema(),
        "status": status_schema(),
    }, required=["spec"])
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                      "singular": SINGULAR, "shortNames": SHORT_NAMES},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "schema": {"openAPIV3Schema": root},
            }],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML document committed in `crds/embeddingjob.yaml`."""
    header = ("# The EmbeddingJob CustomResourceDefinition.\n"
              "# Generated by `python -m tessera_operator.crd`; do not edit by hand.\n")
    return header + yaml.safe_dump(embedding_job_crd(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
