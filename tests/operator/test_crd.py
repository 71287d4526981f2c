"""The EmbeddingJob CRD: generated, structural, and as strict as `kubectl apply` will be.

An API server is not available here, so the tests stand in for one: `apply_time_validator`
turns the CRD's OpenAPI v3 schema into the JSON Schema the API server effectively enforces
(nullable as a null type; every object with properties closed, as pruning plus kubectl's
strict field validation make it), and `structural_problems` checks the rules the API server
applies to a CRD's schema before it accepts the CRD at all.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import MISSING
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from support.sentinels import DELETE

from tessera.config import ConfigSchema, EntitySchema, RelationSchema, parse_config
from tessera.errors import ConfigError
from tessera_operator import crd

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "crds" / "examples").glob("*.yaml"))
KUBERNETES_VERSION = "1.30"

# Keywords the API server refuses anywhere in a CRD schema.
FORBIDDEN_KEYWORDS = {"$schema", "$ref", "id", "definitions", "dependencies", "additionalItems",
                      "patternProperties"}
# What an OpenAPI v3 schema node of a CRD may carry (JSONSchemaProps, the parts we use).
KNOWN_KEYWORDS = {"type", "description", "properties", "required", "items", "enum", "minimum",
                  "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                  "pattern",
                  "format", "nullable", "additionalProperties", "anyOf",
                  "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
                  "x-kubernetes-list-type", "x-kubernetes-list-map-keys"}


def job_schema() -> dict[str, Any]:
    return crd.embedding_job_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def structural_problems(node: dict[str, Any], path: str = "") -> list[str]:
    """Why the API server would refuse this schema as structural (empty when it would not)."""
    problems = [f"{path}: unknown keyword {key}" for key in node if key not in KNOWN_KEYWORDS]
    problems += [f"{path}: forbidden keyword {key}" for key in node if key in FORBIDDEN_KEYWORDS]
    special = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
        "x-kubernetes-int-or-string")
    if not isinstance(node.get("type"), str) and not special:
        problems.append(f"{path}: no single type")
    if node.get("type") == "null":
        problems.append(f"{path}: type null (use nullable)")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties next to additionalProperties")
    for flag in ("exclusiveMinimum", "exclusiveMaximum"):
        if flag in node and not isinstance(node[flag], bool):
            problems.append(f"{path}: {flag} must be a boolean")
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: anyOf outside the int-or-string pattern")
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            problems += structural_problems(node[key], f"{path}[{key}]")
    return problems


def as_enforced(node: dict[str, Any]) -> dict[str, Any]:
    """The draft-4 JSON Schema equivalent of what the API server enforces for a schema node."""
    out = {key: value for key, value in node.items() if not key.startswith("x-kubernetes")}
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {name: as_enforced(child) for name, child in out["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = as_enforced(out[key])
    return out


def apply_time_validator(schema: dict[str, Any] | None = None) -> jsonschema.Draft4Validator:
    # Draft 4 because OpenAPI v3 shares its boolean exclusiveMinimum.
    return jsonschema.Draft4Validator(as_enforced(schema or job_schema()))


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, document) for path in EXAMPLES
            for document in yaml.safe_load_all(path.read_text())]


def example_jobs() -> list[dict[str, Any]]:
    return [document for _, document in example_documents() if document["kind"] == crd.KIND]


def minimal_job() -> dict[str, Any]:
    return yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())


def errors(job: dict[str, Any]) -> list[str]:
    return [error.message for error in apply_time_validator().iter_errors(job)]


# --- the CRD as a Kubernetes object ------------------------------------------------------------

def test_committed_crd_is_the_generators_output():
    committed = (REPO / "crds" / "embeddingjob.yaml").read_text()
    regenerate = "python -m tessera_operator.crd > crds/embeddingjob.yaml"
    assert committed == crd.crd_yaml(), f"the committed CRD is stale: {regenerate}"


def test_crd_names_and_columns():
    definition = yaml.safe_load((REPO / "crds" / "embeddingjob.yaml").read_text())
    spec = definition["spec"]
    assert definition["metadata"]["name"] == "embeddingjobs.tessera.dev"
    assert (spec["group"], spec["scope"], spec["names"]["shortNames"]) == (
        "tessera.dev", "Namespaced", ["ej"])
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Epoch", "Progress", "ETA", "MRR", "Age"]


@pytest.mark.parametrize("column", crd.PRINTER_COLUMNS[:-1], ids=lambda column: column["name"])
def test_printer_columns_point_at_status_fields_of_their_type(column):
    node = job_schema()
    for name in column["jsonPath"].strip(".").split("."):
        node = node["properties"][name]
    assert node["type"] == column["type"]


def test_crd_is_a_valid_kubernetes_object():
    definition = yaml.safe_load((REPO / "crds" / "embeddingjob.yaml").read_text())
    kubernetes_validate.validate(definition, KUBERNETES_VERSION, strict=True)


def test_crd_schema_is_structural():
    assert structural_problems(job_schema()) == []


def test_structural_checker_catches_what_the_api_server_refuses():
    bad = {"type": "object", "properties": {"a": {"type": ["integer", "null"]}},
           "additionalProperties": False}
    assert len(structural_problems(bad)) == 2
    assert structural_problems({"type": "number", "exclusiveMinimum": 0}) == [
        ": exclusiveMinimum must be a boolean"]


# --- the config part, generated from the trainer's schema ---------------------------------------

@pytest.mark.parametrize(("path", "cls"), [
    ((), ConfigSchema), (("entities", "additionalProperties"), EntitySchema),
    (("relations", "items"), RelationSchema)])
def test_config_schema_has_exactly_the_trainers_keys(path, cls):
    node = job_schema()["properties"]["spec"]["properties"]["config"]
    for key in path:
        node = node["properties"][key] if key in node.get("properties", {}) else node[key]
    fields = set(cls.__dataclass_fields__)
    required = {name for name, spec in cls.__dataclass_fields__.items()
                if spec.default is MISSING and spec.default_factory is MISSING}
    assert set(node["properties"]) == fields
    assert set(node.get("required", [])) == required


def test_structural_conversion():
    converted = crd.structural_schema({
        "$schema": "x", "title": "t", "type": "object", "additionalProperties": False,
        "properties": {
            "bound": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": None},
            "options": {"type": "object", "additionalProperties": True, "default": {}},
            "table": {"type": "object", "additionalProperties": {"type": "integer"}},
        }})
    assert converted == {"type": "object", "properties": {
        "bound": {"type": "number", "nullable": True, "minimum": 0, "exclusiveMinimum": True,
                  "description": "Default: unset."},
        "options": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                    "description": "Default: {}."},
        "table": {"type": "object", "additionalProperties": {"type": "integer"}},
    }}
    with pytest.raises(ValueError, match="oneOf"):
        crd.structural_schema({"oneOf": []})


CONFIG_CHANGES = [
    ({"comparator": "dot"}, True),
    ({"max_norm": None}, True),
    ({"max_norm": 1.5}, True),
    ({"storage_options": {"client_kwargs": {"region_name": "eu-west-1"}}}, True),
    ({"entities": {"user": {"num_partitions": 2, "dimension": None}}}, True),
    ({"comparator": "euclid"}, False),
    ({"num_epochs": "ten"}, False),
    ({"num_epochs": -1}, False),
    ({"init_scale": 0}, False),
    ({"eval_fraction": 1.5}, False),
    ({"dimension": None}, False),
    ({"batch_size": 10.5}, False),
    ({"bucket_order": "diagonal"}, False),
    ({"learning_rate": 0.1}, False),
    ({"entities": {"user": {"num_partitions": 0}}}, False),
    ({"entities": {"user": {"partitions": 2}}}, False),
    ({"relations": [{"name": "follow", "lhs": "user", "rhs": "user", "operator": "quaternion"}]},
     False),
    ({"relations": [{"name": "follow", "lhs": "user"}]}, False),
    ({"relations": [{"name": "follow", "lhs": "user", "rhs": "user", "kind": "x"}]}, False),
    ({"edge_paths": "s3://bucket/edges"}, False),
]


@pytest.mark.parametrize(("changes", "valid"), CONFIG_CHANGES, ids=lambda value: str(value))
def test_crd_and_trainer_agree_on_config_fields(changes, valid):
    job = minimal_job()
    job["spec"]["config"].update(changes)
    crd_accepts = errors(job) == []
    try:
        parse_config(job["spec"]["config"])
        trainer_accepts = True
    except ConfigError:
        trainer_accepts = False
    assert (crd_accepts, trainer_accepts) == (valid, valid)


def test_missing_required_config_key_is_rejected():
    job = minimal_job()
    del job["spec"]["config"]["checkpoint_path"]
    assert errors(job) == ["'checkpoint_path' is a required property"]


# --- the rest of the spec -----------------------------------------------------------------------

def test_examples_are_accepted_by_the_crd_and_by_the_trainer():
    jobs = example_jobs()
    assert len(jobs) == 6
    for job in jobs:
        assert errors(job) == [], job["metadata"]["name"]
        parse_config(job["spec"]["config"])


# Objects of other projects' CRDs in the examples (a gang scheduler's PodGroup), which
# Kubernetes' own schemas do not know; test_children checks them against their jobs.
OTHER_PROJECTS_API_VERSIONS = ("scheduling.x-k8s.io/v1alpha1",)


def is_kubernetes_object(document: dict[str, Any]) -> bool:
    return document["kind"] != crd.KIND and \
        document["apiVersion"] not in OTHER_PROJECTS_API_VERSIONS


@pytest.mark.parametrize("name", [name for name, document in example_documents()
                                  if is_kubernetes_object(document)])
def test_other_example_objects_are_valid_kubernetes_objects(name):
    for file_name, document in example_documents():
        if file_name == name and is_kubernetes_object(document):
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_pod_fields_of_the_examples_are_valid_in_a_pod():
    # The spec's scheduling and resources fields are copied into pods: whatever the CRD lets
    # through for them in the examples must be what the core API accepts.
    # So must each role's own.
    for job in example_jobs():
        spec = job["spec"]
        for role in ("trainers", "partitionServers", "lockServer"):
            fields = spec.get(role, {})
            container = {"name": "trainer", "image": spec["image"],
                         "resources": fields.get("resources", {})}
            pod_spec = {"containers": [container]}
            for field in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets"):
                if field in spec or field in fields:
                    pod_spec[field] = fields.get(field, spec.get(field))
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": pod_spec}
            kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def partitioned_job() -> dict[str, Any]:
    (job,) = [job for job in example_jobs() if job["metadata"]["name"] == "freebase"]
    return copy.deepcopy(job)


def _set(job: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, last = dotted.split(".")
    node = job
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return job


MALFORMED = [
    ("spec.replicas", 2, "Additional properties are not allowed ('replicas' was unexpected)"),
    ("spec.trainers.replicas", 0, "0 is less than the minimum of 1"),
    ("spec.partitionServers.replicas", -1, "-1 is less than the minimum of 0"),
    ("spec.trainers.replicas", "2", "'2' is not of type 'integer'"),
    ("spec.image", DELETE, "'image' is a required property"),
    ("spec.config", DELETE, "'config' is a required property"),
    ("spec.imagePullPolicy", "Sometimes", "'Sometimes' is not one of"),
    ("spec.trainers.resources.requests.memory", "32 GB", "does not match"),
    ("spec.trainers.resources.claims", [], "('claims' was unexpected)"),
    ("spec.tolerations.0.operator", "Matches", "'Matches' is not one of"),
    ("spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight",
     101, "101 is greater than the maximum of 100"),
    ("spec.affinity.nodeAffinity", {"requiredDuringScheduling": {}}, "was unexpected"),
    ("spec.nodeSelector.node-pool", 3, "3 is not of type 'string'"),
    ("spec.trainers.nodeSelector", {"gpu": 1}, "1 is not of type 'string'"),
    ("spec.partitionServers.tolerations", [{"operator": "Matches"}], "'Matches' is not one of"),
    ("spec.lockServer.affinity", {"nodeAfinity": {}}, "('nodeAfinity' was unexpected)"),
    ("spec.storage", {"secretRef": {}}, "'name' is a required property"),
    ("spec.storage", {"secretRef": {"name": "s3"}, "accessKey": "x"}, "was unexpected"),
    ("spec.runPolicy.backoffLimit", -1, "-1 is less than the minimum of 0"),
    ("spec.runPolicy.activeDeadlineSeconds", 0, "0 is less than the minimum of 1"),
    ("spec.runPolicy.suspend", "yes", "'yes' is not of type 'boolean'"),
    ("spec.runPolicy.restartPolicy", "Always", "was unexpected"),
    ("spec.config.workers", 0, "0 is less than the minimum of 1"),
    ("spec", DELETE, "'spec' is a required property"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), MALFORMED,
                         ids=[f"{dotted}={value!r}" for dotted, value, _ in MALFORMED])
def test_malformed_jobs_are_rejected(dotted, value, message):
    assert errors(partitioned_job()) == []
    found = errors(_set(partitioned_job(), dotted, value))
    assert len(found) == 1 and message in found[0], found


# --- the status the operator writes ------------------------------------------------------------

RUNNING_STATUS = {
    "phase": "Running",
    "message": "Training epoch 3 of 20",
    "observedGeneration": 2,
    "conditions": [
        {"type": "Created", "status": "True", "reason": "PodsCreated",
         "lastTransitionTime": "2025-01-01T10:00:00Z"},
        {"type": "Running", "status": "True", "reason": "PodsReady", "message": "5/5 pods",
         "lastTransitionTime": "2025-01-01T10:01:00Z", "observedGeneration": 2},
    ],
    "startTime": "2025-01-01T10:00:00Z",
    "restarts": 1,
    "run": {"number": 2, "initPath": "s3://tessera-examples/freebase/checkpoints"},
    "readyPods": {"lockServer": 1, "partitionServers": 2, "trainers": 2},
    "progress": {"epoch": 3, "numEpochs": 20, "epochs": "3/20", "bucketsDone": 4,
                 "bucketsTotal": 16, "percentComplete": "11%", "edgesPerSecond": 1.5e6,
                 "loss": 0.25, "updateTime": "2025-01-01T11:00:00Z"},
    "metrics": {"mrr": 0.42, "hitsAt1": 0.3, "hitsAt10": 0.7, "hitsAt50": 0.9,
                "meanRank": 12.5, "auc": 0.97},
    "checkpoint": {"version": 2, "path": "s3://tessera-examples/freebase/checkpoints"},
    "kopf": {"progress": {"reconcile": {"retries": 1}}},
}


def test_running_status_is_accepted_and_unknown_status_fields_are_not():
    job = partitioned_job()
    job["status"] = copy.deepcopy(RUNNING_STATUS)
    assert errors(job) == []
    job["status"]["phase"] = "Training"
    job["status"]["progress"]["remaining"] = "1h"
    found = sorted(errors(job))
    assert len(found) == 2
    assert "'Training' is not one of" in found[0] and "'remaining' was unexpected" in found[1]


def test_generator_needs_no_torch():
    # The operator image has no torch: generating the CRD must not import it.
    probe = ("import sys, tessera_operator.crd as crd; crd.crd_yaml(); "
             "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], timeout=60).returncode == 0


# --- pod templates --------------------------------------------------------------------------------

SECRET_ENV = {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}
POD_TEMPLATES_MALFORMED = [
    ("spec.podTemplate.labels", {"team": "a b"}, "does not match"),
    ("spec.podTemplate.labels", {"team": "x" * 64}, "is too long"),
    ("spec.podTemplate.labels", {"team": 3}, "3 is not of type 'string'"),
    ("spec.podTemplate.annotations", {"note": True}, "True is not of type 'string'"),
    ("spec.podTemplate.priorityClassName", "High", "does not match"),
    ("spec.trainers.podTemplate.serviceAccountName", "a" * 254, "is too long"),
    ("spec.podTemplate.automountServiceAccountToken", "yes", "is not of type 'boolean'"),
    ("spec.podTemplate.nodeSelector", {}, "('nodeSelector' was unexpected)"),
    ("spec.trainers.podTemplate.env", [{"value": "1"}], "'name' is a required property"),
    ("spec.podTemplate.env", [SECRET_ENV], "'key' is a required property"),
    ("spec.podTemplate.env", [{"name": "A", "valueFrom": {"vault": {}}}], "was unexpected"),
    ("spec.lockServer.podTemplate.volumes", [{"emptyDir": {}}], "'name' is a required property"),
    ("spec.podTemplate.volumes", [{"name": "Data", "emptyDir": {}}], "does not match"),
    ("spec.podTemplate.volumeMounts", [{"name": "d"}], "'mountPath' is a required property"),
    ("spec.podTemplate.volumeMounts", [{"name": "d", "mountPath": "data"}], "does not match"),
    ("spec.podTemplate.volumeMounts", [{"name": "d", "mountPath": "/d",
                                        "mountPropagation": "Sometimes"}], "is not one of"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), POD_TEMPLATES_MALFORMED,
                         ids=[f"{dotted}={value!r}" for dotted, value, _ in
                              POD_TEMPLATES_MALFORMED])
def test_malformed_pod_templates_are_rejected(dotted, value, message):
    job = partitioned_job()
    *parents, last = dotted.split(".")
    node = job
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    found = errors(job)
    assert len(found) == 1 and message in found[0], found


def test_a_volume_source_passes_through_as_written():
    job = partitioned_job()
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": True}}
    job["spec"]["podTemplate"] = {"volumes": [volume], "volumeMounts": [
        {"name": "data", "mountPath": "/data", "subPath": "a", "readOnly": True}],
        "env": [{"name": "X", "value": "1"}, {"name": "P", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.name"}}}]}
    assert errors(job) == []
    schema = job_schema()["properties"]["spec"]["properties"]["podTemplate"]["properties"]
    assert schema["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    # Unique by name (by path for mounts), so that server-side apply merges them so.
    assert [schema[key]["x-kubernetes-list-map-keys"] for key in (
        "env", "volumes", "volumeMounts")] == [["name"], ["name"], ["mountPath"]]
