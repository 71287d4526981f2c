"""Checking EmbeddingJob specs: defaults, errors that name the field, credentials kept out."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from operator_support import CONFIG, example_jobs, job_object
from support.sentinels import DELETE

from tessera.errors import ConfigError
from tessera_operator.crd import embedding_job_crd
from tessera_operator.job import view_job
from tessera_operator.spec import DEFAULT_BACKOFF_LIMIT, EmbeddingJobSpec, parse_spec


def base_spec() -> dict[str, Any]:
    return copy.deepcopy(job_object()["spec"])


def changed(path: str, value: Any) -> dict[str, Any]:
    """The base spec with the dotted `path` (list items by index) set, or deleted for
    `DELETE`."""
    spec = base_spec()
    *parents, last = path.split(".")
    node: Any = spec
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return spec



def test_examples_parse_with_their_values() -> None:
    specs = {name: parse_spec(job["spec"]) for name, job in example_jobs().items()}
    assert set(specs) == {"gpu", "minimal", "partitioned", "s3-secret", "kueue",
                          "gang-scheduling"}
    minimal, partitioned, s3 = specs["minimal"], specs["partitioned"], specs["s3-secret"]
    assert (minimal.trainers.replicas, minimal.partition_servers.replicas) == (1, 0)
    assert not minimal.distributed and minimal.run_policy.backoff_limit == DEFAULT_BACKOFF_LIMIT
    assert minimal.run_policy.suspend is False and minimal.storage.secret_name is None
    assert minimal.config.num_epochs == 10 and minimal.config.comparator == "dot"
    assert partitioned.distributed and partitioned.partition_servers.replicas == 2
    assert partitioned.trainers.resources == {"requests": {"cpu": "8", "memory": "32Gi"},
                                              "limits": {"memory": "40Gi"}}
    assert partitioned.node_selector == {"node-pool": "training"}
    assert partitioned.tolerations[0]["key"] == "dedicated"
    assert partitioned.run_policy.active_deadline_seconds == 86400
    assert partitioned.image_pull_policy == "IfNotPresent"
    assert (s3.storage.secret_name, s3.storage.endpoint) == (
        "tessera-s3", "http://minio.storage.svc:9000")
    assert s3.run_policy.ttl_seconds_after_finished == 86400
    gpu = specs["gpu"]
    assert gpu.config.num_gpus == 1 and gpu.node_selector == {}
    assert gpu.trainers.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert gpu.trainers.tolerations[0]["key"] == "nvidia.com/gpu"
    assert gpu.partition_servers.node_selector == gpu.lock_server.node_selector == {
        "node-pool": "cpu"}


INVALID = [
    ("config.relations.0.lhs", "usr", "spec.config.relations[0].lhs",
     "unknown entity type 'usr' (did you mean 'user'?)"),
    ("config.dimension", DELETE, "spec.config.dimension", "required key is missing"),
    ("config.num_epochs", "ten", "spec.config.num_epochs", "expected an integer"),
    ("config.entities.user.partitions", 2, "spec.config.entities.user.partitions",
     "unknown key"),
    ("config", [1], "spec.config", "expected a mapping"),
    ("config", DELETE, "spec.config", "required field is missing"),
    ("config.num_machines", 2, "spec.config.num_machines", "spec.trainers.replicas is 1"),
    ("config.num_partition_servers", -1, "spec.config.num_partition_servers",
     "spec.partitionServers.replicas is 0"),
    ("config.distributed_init_method", "tcp://x:1", "spec.config.distributed_init_method",
     "remove it"),
    ("config.storage_options", {"secret": "s3cr3t"}, "spec.config.storage_options.secret",
     "spec.storage.secretRef"),
    ("config.storage_options", {"client_kwargs": {"aws_secret_access_key": "s3cr3t"}},
     "spec.config.storage_options.client_kwargs.aws_secret_access_key", "Secret"),
    ("config.checkpoint_path", "s3://AKIAEXAMPLE:s3cr3t@bucket/ckpt", "spec.config.checkpoint_path",
     "credentials must not be written"),
    ("config.edge_paths", ["s3://b/ok", "https://u:p@host/edges"], "spec.config.edge_paths[1]",
     "credentials"),
    ("config.tracking_path", "s3://AKIAEXAMPLE:s3cr3t@bucket/tb", "spec.config.tracking_path",
     "credentials must not be written"),
    ("image", DELETE, "spec.image", "required field is missing"),
    ("image", " ", "spec.image", "non-empty string"),
    ("imagePullPolicy", "Sometimes", "spec.imagePullPolicy", "not one of Always"),
    ("imagePullSecrets", [{"nam": "x"}], "spec.imagePullSecrets[0].nam", "did you mean 'name'"),
    ("trainers.replicas", 0, "spec.trainers.replicas", "must be at least 1"),
    ("trainers.replicas", "2", "spec.trainers.replicas", "expected an integer"),
    ("trainers.replicas", True, "spec.trainers.replicas", "expected an integer"),
    ("trainers.replica", 2, "spec.trainers.replica", "did you mean 'replicas'"),
    ("trainers.resources.limits", {"memory": "4 GB"}, "spec.trainers.resources.limits.memory",
     "not a Kubernetes quantity"),
    ("trainers.resources.claims", [], "spec.trainers.resources.claims", "unknown field"),
    ("partitionServers.replicas", -1, "spec.partitionServers.replicas", "at least 0"),
    ("lockServer.replicas", 2, "spec.lockServer.replicas", "unknown field"),
    ("nodeSelector", {"pool": 3}, "spec.nodeSelector.pool", "expected a string"),
    ("tolerations", [{"key": "gpu", "operatr": "Exists"}], "spec.tolerations[0].operatr",
     "did you mean 'operator'"),
    ("tolerations", {"key": "gpu"}, "spec.tolerations", "expected a list"),
    ("affinity", {"nodeAfinity": {}}, "spec.affinity.nodeAfinity", "did you mean"),
    ("trainers.nodeSelector", {"gpu": True}, "spec.trainers.nodeSelector.gpu",
     "expected a string"),
    ("trainers.nodeSelector", ["gpu"], "spec.trainers.nodeSelector", "expected a mapping"),
    ("lockServer.tolerations", [{"key": "gpu", "efect": "NoSchedule"}],
     "spec.lockServer.tolerations[0].efect", "did you mean 'effect'"),
    ("partitionServers.tolerations", {"key": "gpu"}, "spec.partitionServers.tolerations",
     "expected a list"),
    ("partitionServers.affinity", {"podAntiAfinity": {}},
     "spec.partitionServers.affinity.podAntiAfinity", "did you mean 'podAntiAffinity'"),
    ("trainers.placement", {}, "spec.trainers.placement", "allowed: replicas, resources, "
     "nodeSelector, tolerations, affinity"),
    ("trainers.resources.limits", {"nvidia.com/gpu": 1},
     "spec.trainers.resources.limits.nvidia.com/gpu",
     "is 1 but spec.config.num_gpus is 0; remove it: the operator sets it from "
     "spec.config.num_gpus"),
    ("partitionServers.resources.requests", {"nvidia.com/gpu": "1"},
     "spec.partitionServers.resources.requests.nvidia.com/gpu", "only trainers use GPUs"),
    ("lockServer.resources.limits", {"nvidia.com/gpu": 1},
     "spec.lockServer.resources.limits.nvidia.com/gpu", "spec.config.num_gpus gives each "
     "trainer pod its nvidia.com/gpu"),
    ("storage.secretRef", {}, "spec.storage.secretRef.name", "required field is missing"),
    ("storage.secretRef", {"name": "S3_Creds"}, "spec.storage.secretRef.name",
     "not a valid Secret name"),
    ("storage.endpoint", "minio:9000", "spec.storage.endpoint", "http(s) URL"),
    ("storage.endpoint", "http://admin:pw@minio:9000", "spec.storage.endpoint",
     "remove the user information"),
    ("storage.endpoint", "https://token123@minio:9000", "spec.storage.endpoint",
     "remove the user information"),
    ("storage.accessKey", "AKIA", "spec.storage.accessKey", "unknown field"),
    ("runPolicy.backoffLimit", -1, "spec.runPolicy.backoffLimit", "at least 0"),
    ("runPolicy.activeDeadlineSeconds", 0, "spec.runPolicy.activeDeadlineSeconds",
     "at least 1"),
    ("runPolicy.ttlSecondsAfterFinished", 1.5, "spec.runPolicy.ttlSecondsAfterFinished",
     "expected an integer"),
    ("runPolicy.suspend", "yes", "spec.runPolicy.suspend", "expected true or false"),
    ("replicas", 2, "spec.replicas", "unknown field"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem"), INVALID,
                         ids=[f"{path}={value!r}" for path, value, _, _ in INVALID])
def test_errors_name_the_field(path: str, value: Any, field: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_spec(changed(path, value))
    assert raised.value.path == field
    assert problem in str(raised.value)
    assert str(raised.value).startswith(f"{field}: ")


def test_a_spec_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="^spec: expected a mapping"):
        parse_spec(None)


@pytest.mark.parametrize(("path", "value"), [
    ("config.num_machines", 1),
    ("config.num_partition_servers", 0),
    ("config.storage_options", {"token": "anon"}),
    ("config.storage_options", {"client_kwargs": {"endpoint_url": "http://minio:9000"}}),
    ("trainers.resources", {"requests": {"cpu": 2, "memory": "1.5Gi"}, "limits": {"cpu": "500m"}}),
    ("storage", {}),
    ("config.num_gpus", 2),
    ("trainers.nodeSelector", {"nvidia.com/gpu.present": "true"}),
    ("lockServer.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}]}}}),
    ("runPolicy", {"backoffLimit": 0, "ttlSecondsAfterFinished": 0, "suspend": True}),
])
def test_valid_variations_are_accepted(path: str, value: Any) -> None:
    parse_spec(changed(path, value))


# Which fingerprint an edit changes: the config's starts a new run, the pods' restarts them,
# the run policy's neither.
FINGERPRINTS = [
    ("config.num_epochs", 50, True, False),
    ("config.edge_paths", ["s3://bucket/demo/edges-v2"], True, False),
    ("config.lr", 0.01, True, False),  # PBG's default, but written out: an edit
    ("config.relations.0.operator", "translation", True, False),
    ("image", "tessera-trainer:0.2.0", False, True),
    ("trainers.resources", {"limits": {"memory": "8Gi"}}, False, True),
    ("nodeSelector", {"pool": "big"}, False, True),
    ("config.num_gpus", 1, True, False),  # a new run, on GPUs, from the last checkpoint
    ("trainers.nodeSelector", {"pool": "gpu"}, False, True),
    ("partitionServers.tolerations", [{"key": "gpu", "operator": "Exists"}], False, True),
    ("lockServer.affinity", {"podAffinity": {}}, False, True),
    ("storage.endpoint", "http://other:9000", False, True),
    ("runPolicy.suspend", True, False, False),
    ("runPolicy.backoffLimit", 9, False, False),
]


@pytest.mark.parametrize(("path", "value", "config_changes", "pods_change"), FINGERPRINTS,
                         ids=[f"{path}" for path, *_ in FINGERPRINTS])
def test_fingerprints_follow_what_changed(path: str, value: Any, config_changes: bool,
                                          pods_change: bool) -> None:
    before, after = parse_spec(base_spec()), parse_spec(changed(path, value))
    assert (before.config_fingerprint() != after.config_fingerprint()) is config_changes
    assert (before.pods_fingerprint() != after.pods_fingerprint()) is pods_change


def test_gpus_in_the_trainers_resources_must_agree_with_num_gpus() -> None:
    spec = changed("config.num_gpus", 2)
    spec["trainers"] = {"resources": {"limits": {"nvidia.com/gpu": 1}}}
    with pytest.raises(ConfigError) as raised:
        parse_spec(spec)
    assert str(raised.value) == (
        "spec.trainers.resources.limits.nvidia.com/gpu: is 1 but spec.config.num_gpus is 2; "
        "remove it: the operator sets it from spec.config.num_gpus")
    spec["trainers"] = {"resources": {"limits": {"nvidia.com/gpu": 2},
                                      "requests": {"nvidia.com/gpu": "2"}}}
    assert parse_spec(spec).config.num_gpus == 2


# The pods fingerprints the operator wrote before roles had scheduling fields (commit
# 0bf1fc9): jobs that do not use them keep theirs, so that upgrading the operator does not
# restart every running job.
FINGERPRINTS_BEFORE_ROLE_SCHEDULING = {"minimal": "dddc9b60d9567a4d",
                                       "partitioned": "caa8be6c3e6be3ee",
                                       "s3-secret": "6831139b9087bd6f"}


@pytest.mark.parametrize("example", sorted(FINGERPRINTS_BEFORE_ROLE_SCHEDULING))
def test_an_operator_upgrade_keeps_the_pods_fingerprint(example: str) -> None:
    spec = parse_spec(example_jobs()[example]["spec"])
    assert spec.pods_fingerprint() == FINGERPRINTS_BEFORE_ROLE_SCHEDULING[example]


def test_the_order_of_config_keys_is_no_edit() -> None:
    spec = base_spec()
    reordered = {**spec, "config": dict(reversed(list(spec["config"].items())))}
    assert list(reordered["config"]) != list(spec["config"])
    assert parse_spec(reordered).config_fingerprint() == parse_spec(spec).config_fingerprint()


@pytest.mark.parametrize("name", ["Demo", "1st-job", "a.b", "x" * 41, "ends-"])
def test_job_names_that_would_make_invalid_child_names(name: str) -> None:
    view = view_job(job_object(name=name))
    assert view.spec is None
    assert view.spec_error is not None and view.spec_error.startswith("metadata.name: ")


def test_view_keeps_the_error_instead_of_raising() -> None:
    spec = base_spec()
    spec["config"] = {**CONFIG, "relations": [{"name": "r", "lhs": "user", "rhs": "itme"}]}
    view = view_job(job_object(spec))
    assert view.spec is None
    assert view.spec_error == ("spec.config.relations[0].rhs: unknown entity type 'itme' (did "
                               "you mean 'item'?); declared types are: item, user")


def test_a_config_training_would_refuse_is_refused_before_any_pod() -> None:
    """The model's rules are the config's: an odd dimension for ComplEx fails the spec, not a
    trainer pod after it started."""
    spec = base_spec()
    spec["config"] = {**CONFIG, "dimension": 15, "relations": [
        {"name": "likes", "lhs": "user", "rhs": "item", "operator": "complex_diagonal"}]}
    with pytest.raises(ConfigError) as raised:
        parse_spec(spec)
    assert str(raised.value) == ("spec.config.relations[0].operator: complex_diagonal splits "
                                 "embeddings into real and imaginary halves, so it needs an "
                                 "even dimension, not 15")


def test_the_operator_never_imports_torch() -> None:
    modules = ["children", "conditions", "decisions", "job", "labels", "pods", "progress",
               "redaction", "run_config", "spec", "status"]
    code = "; ".join([*(f"import tessera_operator.{m}" for m in modules),
                      "import sys", "print(sorted(m for m in sys.modules if m == 'torch' "
                      "or m.startswith('torch.')))"])
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert found.stdout.strip() == "[]"


CRD_SPEC = embedding_job_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
    "properties"]["spec"]["properties"]
# (spec path, what parse_spec makes of it) of the fields with a default the CRD states.
DEFAULTED = [
    ("trainers.replicas", lambda spec: spec.trainers.replicas),
    ("partitionServers.replicas", lambda spec: spec.partition_servers.replicas),
    ("runPolicy.backoffLimit", lambda spec: spec.run_policy.backoff_limit),
    ("runPolicy.activeDeadlineSeconds", lambda spec: spec.run_policy.active_deadline_seconds),
    ("runPolicy.ttlSecondsAfterFinished",
     lambda spec: spec.run_policy.ttl_seconds_after_finished),
    ("runPolicy.suspend", lambda spec: spec.run_policy.suspend),
]


@pytest.mark.parametrize(("path", "parsed"), DEFAULTED, ids=[p for p, _ in DEFAULTED])
def test_the_crd_states_the_defaults_and_bounds_the_operator_applies(
        path: str, parsed: Callable[[EmbeddingJobSpec], Any]) -> None:
    parent, name = path.split(".")
    schema = CRD_SPEC[parent]["properties"][name]
    spec = base_spec()
    spec.get(parent, {}).pop(name, None)
    stated = re.search(r"Default: (.*)\.$", schema["description"])
    assert stated, schema["description"]
    default = parsed(parse_spec(spec))
    if default is None:
        assert stated.group(1) in ("no limit", "kept")  # what an absent field means
    else:
        assert stated.group(1) == json.dumps(default)
    if "minimum" in schema:
        with pytest.raises(ConfigError, match=f"must be at least {schema['minimum']}"):
            parse_spec(changed(path, schema["minimum"] - 1))
        assert parsed(parse_spec(changed(path, schema["minimum"]))) == schema["minimum"]


# --- pod templates ------------------------------------------------------------------------------

SCRATCH = {"name": "scratch", "emptyDir": {}}
# (path, value, the field the error names, what it says), on the base spec: one trainer, a
# storage Secret and endpoint.
POD_TEMPLATE_INVALID = [
    ("podTemplate.labels", {"tessera.dev/job": "other"}, "spec.podTemplate.labels.tessera.dev/job",
     "the operator sets the tessera.dev/ keys"),
    ("trainers.podTemplate.labels", {"app.kubernetes.io/instance": "x"},
     "spec.trainers.podTemplate.labels.app.kubernetes.io/instance", "choose another key"),
    ("podTemplate.annotations", {"tessera.dev/note": "x"},
     "spec.podTemplate.annotations.tessera.dev/note", "the operator sets"),
    ("podTemplate.labels", {"team": "a b"}, "spec.podTemplate.labels.team",
     "not a valid label value"),
    ("podTemplate.labels", {"team": "x" * 64}, "spec.podTemplate.labels.team",
     "not a valid label value"),
    ("podTemplate.labels", {"Bad Key": "x"}, "spec.podTemplate.labels.Bad Key",
     "not a valid key"),
    ("podTemplate.annotations", {"a": 1}, "spec.podTemplate.annotations.a", "expected a string"),
    ("podTemplate.priorityClassName", "High_Priority", "spec.podTemplate.priorityClassName",
     "not a valid name"),
    ("lockServer.podTemplate.schedulerName", " ", "spec.lockServer.podTemplate.schedulerName",
     "non-empty string"),
    ("podTemplate.automountServiceAccountToken", "yes",
     "spec.podTemplate.automountServiceAccountToken", "expected true or false"),
    ("podTemplate.serviceAcount", "x", "spec.podTemplate.serviceAcount",
     "did you mean 'serviceAccountName'"),
    ("podTemplate.env", [{"name": "HOME", "value": "/home"}], "spec.podTemplate.env[0].name",
     "the operator sets HOME itself"),
    ("trainers.podTemplate.env", [{"name": "AWS_ENDPOINT_URL", "value": "http://x"}],
     "spec.trainers.podTemplate.env[0].name", "the operator sets AWS_ENDPOINT_URL"),
    ("podTemplate.env", [{"name": "HF_TOKEN", "value": "hf_abc"}],
     "spec.podTemplate.env[0].value", "credentials must not be written"),
    ("trainers.podTemplate.env", [{"name": "db-password", "value": "pw"}],
     "spec.trainers.podTemplate.env[0].value", "valueFrom.secretKeyRef"),
    ("podTemplate.env", [{"name": "X", "value": "1", "valueFrom": {}}], "spec.podTemplate.env[0]",
     "value or valueFrom, not both"),
    ("podTemplate.env", [{"value": "1"}], "spec.podTemplate.env[0].name",
     "required field is missing"),
    ("podTemplate.env", [{"name": "X", "value": "1"}, {"name": "X", "value": "2"}],
     "spec.podTemplate.env[1].name", "'X' is given twice"),
    ("podTemplate.env", [{"name": "X", "vaule": "1"}], "spec.podTemplate.env[0].vaule",
     "did you mean 'value'"),
    ("podTemplate.volumes", [{"name": "tmp", "emptyDir": {}}], "spec.podTemplate.volumes[0].name",
     "one of the operator's volumes"),
    ("podTemplate.volumes", [{"name": "data"}], "spec.podTemplate.volumes[0]",
     "exactly one volume source"),
    ("podTemplate.volumes", [{"name": "data", "emptyDir": {}, "secret": {"secretName": "s"}}],
     "spec.podTemplate.volumes[0]", "got emptyDir, secret"),
    ("podTemplate.volumes", [{"name": "Data", "emptyDir": {}}], "spec.podTemplate.volumes[0].name",
     "not a valid volume name"),
    ("podTemplate.volumes", [SCRATCH, SCRATCH], "spec.podTemplate.volumes[1].name",
     "given twice"),
    ("podTemplate.volumeMounts", [{"name": "scratch", "mountPath": "/tmp/cache"}],
     "spec.podTemplate.volumeMounts[0].mountPath", "outside the operator's mounts"),
    ("podTemplate.volumeMounts", [{"name": "scratch", "mountPath": "/etc/tessera"}],
     "spec.podTemplate.volumeMounts[0].mountPath", "outside the operator's mounts"),
    ("trainers.podTemplate.volumeMounts", [{"name": "scratch", "mountPath": "cache"}],
     "spec.trainers.podTemplate.volumeMounts[0].mountPath", "an absolute path"),
    ("trainers.podTemplate.volumeMounts", [{"name": "nope", "mountPath": "/cache"}],
     "spec.trainers.podTemplate.volumeMounts[0].name", "no volume named 'nope' for the trainers"),
    ("podTemplate.labels", {"kueue.x-k8s.io/pod-group-name": "g"},
     "spec.podTemplate.labels.kueue.x-k8s.io/pod-group-name", "the operator makes each run's "
     "pods one Kueue pod group"),
    ("trainers.podTemplate.annotations", {"kueue.x-k8s.io/pod-group-total-count": "1"},
     "spec.trainers.podTemplate.annotations.kueue.x-k8s.io/pod-group-total-count", "remove it"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem"), POD_TEMPLATE_INVALID,
                         ids=[f"{path}={value!r}" for path, value, _, _ in POD_TEMPLATE_INVALID])
def test_pod_template_errors_name_the_field(path: str, value: Any, field: str,
                                            problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_spec(changed(path, value))
    assert (raised.value.path, problem in str(raised.value)) == (field, True), str(raised.value)


@pytest.mark.parametrize(("path", "value"), [
    ("podTemplate.labels", {"kueue.x-k8s.io/queue-name": "team-a", "team": "",
                            "app.kubernetes.io/part-of": "search"}),
    ("podTemplate.annotations", {"sidecar.istio.io/inject": "false", "note": "any text: ok"}),
    ("trainers.podTemplate", {"serviceAccountName": "trainer", "priorityClassName": "batch-low",
                              "schedulerName": "volcano",
                              "automountServiceAccountToken": False}),
    # Names that say they name a file, a role or a place; and credentials from a Secret.
    ("podTemplate.env", [{"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": "/var/run/token"},
                         {"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::1:role/r"},
                         {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/key.json"},
                         {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                             "name": "hf", "key": "token"}}},
                         {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                             "fieldPath": "metadata.name"}}}]),
    ("podTemplate", {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                     "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True},
                                      {"name": "data", "mountPath": "/tmpdata",
                                       "subPath": "x"}]}),
    # A mount written job-wide may name a volume each role gives itself.
    ("trainers.podTemplate.volumes", [SCRATCH]),
])
def test_valid_pod_templates_are_accepted(path: str, value: Any) -> None:
    parse_spec(changed(path, value))


def test_a_job_wide_mount_needs_its_volume_in_every_role_that_has_pods() -> None:
    spec = changed("podTemplate.volumeMounts", [{"name": "scratch", "mountPath": "/scratch"}])
    spec["trainers"] = {"replicas": 2, "podTemplate": {"volumes": [SCRATCH]}}
    with pytest.raises(ConfigError) as raised:  # two trainers: a lock server, without it
        parse_spec(spec)
    assert raised.value.path == "spec.podTemplate.volumeMounts[0].name"
    assert "for the lockServer pods" in str(raised.value)
    spec["lockServer"] = {"podTemplate": {"volumes": [SCRATCH]}}
    assert parse_spec(spec).distributed


def test_the_operators_storage_variables_are_the_users_without_spec_storage() -> None:
    spec = changed("podTemplate.env", [{"name": "AWS_ACCESS_KEY_ID", "valueFrom": {
        "secretKeyRef": {"name": "own", "key": "id"}}}])
    with pytest.raises(ConfigError, match="the operator sets AWS_ACCESS_KEY_ID"):
        parse_spec(spec)
    del spec["storage"]
    assert parse_spec(spec).pod_template.env[0]["name"] == "AWS_ACCESS_KEY_ID"


def test_every_pod_of_a_job_waits_in_one_kueue_queue() -> None:
    spec = changed("trainers", {"replicas": 2, "podTemplate": {
        "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}})
    with pytest.raises(ConfigError) as raised:
        parse_spec(spec)
    assert raised.value.path == "spec.podTemplate.labels.kueue.x-k8s.io/queue-name"
    assert "lockServer: none, partitionServers" not in str(raised.value)  # no pods, no say
    assert "lockServer: none, trainers: team-a" in str(raised.value)
    spec["trainers"]["replicas"] = 1  # one pod: no lock server
    parse_spec(spec)


def test_role_templates_merge_over_the_jobs() -> None:
    spec = base_spec()
    spec["podTemplate"] = {
        "labels": {"team": "kg", "tier": "batch"}, "annotations": {"a": "job"},
        "priorityClassName": "low", "serviceAccountName": "job-sa",
        "env": [{"name": "A", "value": "job"}, {"name": "B", "value": "job"}],
        "volumes": [SCRATCH, {"name": "data", "emptyDir": {}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
    spec["trainers"] = {"podTemplate": {
        "labels": {"tier": "gpu"}, "priorityClassName": "high",
        "automountServiceAccountToken": False,
        "env": [{"name": "B", "value": "role"}, {"name": "C", "value": "role"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
        "volumeMounts": [{"name": "data", "mountPath": "/scratch"}]}}
    parsed = parse_spec(spec)
    merged = parsed.role_template(parsed.trainers)
    assert merged.labels == {"team": "kg", "tier": "gpu"} and merged.annotations == {"a": "job"}
    assert (merged.priority_class_name, merged.service_account_name) == ("high", "job-sa")
    assert merged.mounts_token is False
    assert [(e["name"], e["value"]) for e in merged.env] == [("A", "job"), ("B", "role"),
                                                             ("C", "role")]
    assert merged.volumes == (SCRATCH, {"name": "data",
                                        "persistentVolumeClaim": {"claimName": "d"}})
    assert merged.volume_mounts == ({"name": "data", "mountPath": "/scratch"},)
    lock_server = parsed.role_template(parsed.lock_server)
    assert lock_server.mounts_token is True and lock_server.priority_class_name == "low"


@pytest.mark.parametrize(("path", "value"), [
    ("podTemplate.labels", {"team": "kg"}),
    ("trainers.podTemplate.annotations", {"cost": "ml"}),
    ("lockServer.podTemplate.priorityClassName", "high"),
    ("podTemplate.env", [{"name": "X", "value": "1"}]),
])
def test_a_pod_template_edit_restarts_the_pods_and_an_empty_one_does_not(
        path: str, value: Any) -> None:
    before, after = parse_spec(base_spec()), parse_spec(changed(path, value))
    assert before.config_fingerprint() == after.config_fingerprint()
    assert before.pods_fingerprint() != after.pods_fingerprint()
    empty = changed(path.rsplit(".", 1)[0], {})
    assert parse_spec(empty).pods_fingerprint() == before.pods_fingerprint()
