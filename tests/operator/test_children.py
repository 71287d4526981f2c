"""The children of a run: golden manifests, valid objects, locked-down pods, no credentials.

The golden files under golden/ are the children of the first run of each example in
crds/examples. After an intended change, regenerate them with

    TESSERA_UPDATE_GOLDEN=1 python -m pytest tests/operator/test_children.py

and review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from operator_support import NAMESPACE, UID, example_jobs, job_object

from tessera.config import parse_config
from tessera.distributed.world import WorldLayout
from tessera_operator.children import SECRET_KEYS, children, command
from tessera_operator.job import view_job
from tessera_operator.labels import JobRef, Role, expected_pods, is_pod_name
from tessera_operator.run_config import (
    CONFIG_PATH,
    RunPlan,
    first_plan,
    restarted_plan,
    retraining_plan,
    run_config,
)
from tessera_operator.spec import OPERATOR_ENV, OPERATOR_VOLUMES

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES_DIR = Path(__file__).parents[2] / "crds" / "examples"
UPDATE_GOLDEN = os.environ.get("TESSERA_UPDATE_GOLDEN") == "1"
KUBERNETES_VERSION = "1.30"
EXAMPLES = example_jobs()


def first_run_children(job: dict[str, Any]) -> list[dict[str, Any]]:
    view = view_job(job)
    assert view.spec is not None, view.spec_error
    return children(view.ref, view.spec, first_plan(view.spec))


def pods_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod"]


def all_children() -> list[tuple[str, dict[str, Any]]]:
    return [(name, child) for name, job in {**EXAMPLES, "demo": job_object()}.items()
            for child in first_run_children(job)]


CHILDREN = all_children()
CHILD_IDS = [f"{name}/{child['kind']}/{child['metadata']['name']}" for name, child in CHILDREN]


class _ReadableDumper(yaml.SafeDumper):
    """Writes multi-line strings (the config file) as YAML blocks, so diffs read well."""


_ReadableDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_children_match_the_golden_manifests(example: str) -> None:
    objects = first_run_children(EXAMPLES[example])
    text = yaml.dump_all(objects, Dumper=_ReadableDumper, sort_keys=False, width=100)
    assert list(yaml.safe_load_all(text)) == objects  # the golden file is the manifests
    golden = GOLDEN / f"{example}.yaml"
    if UPDATE_GOLDEN:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: run with TESSERA_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"the children of {example} changed; if intended, regenerate {golden.name} with "
        "TESSERA_UPDATE_GOLDEN=1 and review the diff")


@pytest.mark.parametrize(("example", "child"), CHILDREN, ids=CHILD_IDS)
def test_every_child_is_a_valid_kubernetes_object(example: str, child: dict[str, Any]) -> None:
    kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(("example", "child"), CHILDREN, ids=CHILD_IDS)
def test_every_child_is_labelled_and_owned_by_its_job(example: str, child: dict[str, Any]) -> None:
    job = {**EXAMPLES, "demo": job_object()}[example]["metadata"]["name"]
    metadata = child["metadata"]
    assert metadata["name"].startswith(f"{job}-") and metadata["namespace"] == NAMESPACE
    assert {"app.kubernetes.io/name": "tessera", "app.kubernetes.io/instance": job,
            "tessera.dev/job": job}.items() <= metadata["labels"].items()
    assert metadata["ownerReferences"] == [{
        "apiVersion": "tessera.dev/v1alpha1", "kind": "EmbeddingJob", "name": job, "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]


def test_names_are_deterministic_and_distinct() -> None:
    objects = first_run_children(EXAMPLES["partitioned"])
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert names == [
        ("ConfigMap", "freebase-config"), ("NetworkPolicy", "freebase-isolation"),
        ("Service", "freebase-lock-server"), ("Service", "freebase-partition-servers"),
        ("Pod", "freebase-lock-server"), ("Pod", "freebase-partition-server-0"),
        ("Pod", "freebase-partition-server-1"), ("Pod", "freebase-trainer-0"),
        ("Pod", "freebase-trainer-1")]
    assert names == [(o["kind"], o["metadata"]["name"])
                     for o in first_run_children(EXAMPLES["partitioned"])]


@pytest.mark.parametrize("example", sorted(EXAMPLES) + ["demo"])
def test_every_pod_is_locked_down(example: str) -> None:
    for pod in pods_of(first_run_children({**EXAMPLES, "demo": job_object()}[example])):
        spec = pod["spec"]
        (container,) = spec["containers"]
        assert spec["restartPolicy"] == "Never"
        # The API token only for an account the job names (what cloud identities bind to).
        assert spec["automountServiceAccountToken"] is ("serviceAccountName" in spec)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["privileged"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
        assert volumes[mounts["/tmp"]]["emptyDir"] == {}
        assert volumes[mounts["/etc/tessera"]]["configMap"]["name"].endswith("-config")


def test_commands_per_role() -> None:
    tail = ["--log-format", "json", "--metrics-port", "8081"]
    single = pods_of(first_run_children(EXAMPLES["minimal"]))
    assert [p["spec"]["containers"][0]["command"] for p in single] == [
        ["tessera", "train", "/etc/tessera/config.json", *tail]]
    commands = {p["metadata"]["name"]: p["spec"]["containers"][0]["command"]
                for p in pods_of(first_run_children(EXAMPLES["partitioned"]))}
    assert commands == {
        "freebase-lock-server": ["tessera", "lock-server", CONFIG_PATH, *tail],
        "freebase-partition-server-0": ["tessera", "partition-server", CONFIG_PATH, "--rank",
                                        "0", *tail],
        "freebase-partition-server-1": ["tessera", "partition-server", CONFIG_PATH, "--rank",
                                        "1", *tail],
        "freebase-trainer-0": ["tessera", "train", CONFIG_PATH, "--rank", "0", *tail],
        "freebase-trainer-1": ["tessera", "train", CONFIG_PATH, "--rank", "1", *tail]}
    spec = view_job(EXAMPLES["minimal"]).spec
    assert spec is not None and "--rank" not in command(spec, Role.TRAINER, 0)


def test_pod_labels_carry_role_rank_and_run() -> None:
    view = view_job(EXAMPLES["partitioned"])
    assert view.spec is not None
    plan = RunPlan(7, "s3://b/c", None)
    labels = {p["metadata"]["name"]: p["metadata"]["labels"]
              for p in pods_of(children(view.ref, view.spec, plan))}
    assert labels["freebase-partition-server-1"]["tessera.dev/role"] == "partition-server"
    assert labels["freebase-partition-server-1"]["tessera.dev/rank"] == "1"
    assert "tessera.dev/rank" not in labels["freebase-lock-server"]
    assert {label["tessera.dev/run"] for label in labels.values()} == {"7"}


def test_storage_credentials_come_only_from_the_secret() -> None:
    for pod in pods_of(first_run_children(EXAMPLES["s3-secret"])):
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        for key in SECRET_KEYS:
            assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {
                "name": "tessera-s3", "key": key}}}
        assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage.svc:9000"
    for pod in pods_of(first_run_children(EXAMPLES["minimal"])):
        names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert not names & {*SECRET_KEYS, "AWS_ENDPOINT_URL"}


def test_no_secret_value_appears_in_any_manifest() -> None:
    secrets = [document["stringData"]["AWS_SECRET_ACCESS_KEY"]
               for path in sorted(EXAMPLES_DIR.glob("*.yaml"))
               for document in yaml.safe_load_all(path.read_text())
               if document["kind"] == "Secret"]
    assert secrets == ["change-me"]
    text = json.dumps([child for _, child in CHILDREN])
    assert "change-me" not in text
    # Two single-trainer jobs (s3-secret and demo) name a Secret: one reference per key each.
    assert text.count("secretKeyRef") == 2 * len(SECRET_KEYS)
    for _, child in CHILDREN:
        if child["kind"] == "ConfigMap":
            config = json.loads(child["data"]["config.json"])
            assert config["storage_options"] == {}


def test_network_policy_admits_only_the_jobs_pods_but_to_the_metrics() -> None:
    (policy,) = [o for o in first_run_children(EXAMPLES["partitioned"])
                 if o["kind"] == "NetworkPolicy"]
    own = {"matchLabels": {"tessera.dev/job": "freebase"}}
    metrics = {"ports": [{"port": 8081, "protocol": "TCP"}]}
    assert policy["spec"] == {"podSelector": own, "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"podSelector": own}]}, metrics]}
    for pod in pods_of(first_run_children(EXAMPLES["partitioned"])):
        ports = pod["spec"]["containers"][0]["ports"]
        assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in ports
    servers = [p for p in pods_of(first_run_children(EXAMPLES["partitioned"]))
               if p["metadata"]["labels"]["tessera.dev/role"] != "trainer"]
    assert len(servers) == 3
    assert all(p["metadata"]["labels"]["tessera.dev/job"] == "freebase" for p in servers)


def test_partition_servers_get_a_dns_name_per_rank() -> None:
    objects = first_run_children(EXAMPLES["partitioned"])
    (service,) = [o for o in objects if o["metadata"]["name"] == "freebase-partition-servers"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"tessera.dev/job": "freebase",
                                           "tessera.dev/role": "partition-server"}
    server = [p for p in pods_of(objects) if p["metadata"]["name"].endswith("server-1")][0]
    assert (server["spec"]["hostname"], server["spec"]["subdomain"]) == (
        "freebase-partition-server-1", "freebase-partition-servers")


# --- the run's config file --------------------------------------------------------------------

def test_config_file_is_a_valid_config_with_the_operators_keys() -> None:
    view = view_job(EXAMPLES["partitioned"])
    assert view.spec is not None
    (config_map,) = [o for o in children(view.ref, view.spec, first_plan(view.spec))
                     if o["kind"] == "ConfigMap"]
    written = json.loads(config_map["data"]["config.json"])
    assert parse_config(written).to_dict() == written
    assert (written["num_machines"], written["num_partition_servers"]) == (2, 2)
    assert written["distributed_init_method"] == "tcp://freebase-lock-server.ml.svc:29500"
    assert written["checkpoint_path"] == "s3://tessera-examples/freebase/checkpoints"
    assert written["dimension"] == 400 and written["workers"] == 8


def test_single_trainer_config_has_no_rendezvous() -> None:
    view = view_job(EXAMPLES["minimal"])
    assert view.spec is not None
    written = run_config(view.ref, view.spec, first_plan(view.spec))
    assert (written["num_machines"], written["num_partition_servers"]) == (1, 0)
    assert written["distributed_init_method"] is None


def test_run_plans() -> None:
    view = view_job(job_object())
    assert view.spec is not None
    first = first_plan(view.spec)
    assert first == RunPlan(1, "s3://bucket/demo/checkpoints", None)
    assert restarted_plan(first) == RunPlan(2, "s3://bucket/demo/checkpoints", None)
    retrained = retraining_plan(view.spec, restarted_plan(first), 4, generation=3)
    assert retrained == RunPlan(3, "s3://bucket/demo/checkpoints/generation_3",
                                "s3://bucket/demo/checkpoints")
    # Without a committed checkpoint, the new run starts where the previous one did.
    assert retraining_plan(view.spec, retrained, None, generation=4) == RunPlan(
        4, "s3://bucket/demo/checkpoints/generation_4", "s3://bucket/demo/checkpoints")
    written = run_config(JobRef("demo", NAMESPACE, UID), view.spec, retrained)
    assert (written["checkpoint_path"], written["init_path"]) == (
        retrained.checkpoint_path, retrained.init_path)


def test_pod_names_are_the_names_the_trainers_address_each_other_by() -> None:
    # A pod's host name is how its peers reach it: `{job}-` and the trainer's process name.
    spec = view_job(EXAMPLES["partitioned"]).spec
    assert spec is not None
    layout = WorldLayout(spec.partition_servers.replicas, spec.trainers.replicas)
    for name, (role, rank) in expected_pods("freebase", spec).items():
        assert name == "freebase-" + layout.name_of(layout.rank_of(role, rank))
    assert layout.names(Role.PARTITION_SERVER) == ["partition-server-0", "partition-server-1"]


def test_a_pod_name_tells_its_job_whatever_the_run_and_size() -> None:
    assert all(is_pod_name("freebase", name) for name in (
        "freebase-lock-server", "freebase-partition-server-12", "freebase-trainer-3"))
    assert not any(is_pod_name("freebase", name) for name in (
        "freebase-config", "freebase-trainer-", "freebase-trainer-0-x", "freebase2-trainer-0",
        "other-trainer-0", "freebase", "lock-server"))


# --- GPUs and per-role scheduling -------------------------------------------------------------

def partitioned_with(**spec_changes: Any) -> dict[str, dict[str, Any]]:
    """The pods of the partitioned example, by name, with `spec_changes` applied (`a__b=v`
    sets spec.a.b to v)."""
    job = json.loads(json.dumps(EXAMPLES["partitioned"]))
    for path, value in spec_changes.items():
        *parents, last = path.split("__")
        node = job["spec"]
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return {pod["metadata"]["name"]: pod for pod in pods_of(first_run_children(job))}


def test_num_gpus_asks_for_gpus_on_the_trainer_pods_only() -> None:
    pods = partitioned_with(config__num_gpus=2)
    for name, pod in pods.items():
        resources = pod["spec"]["containers"][0]["resources"]
        if "trainer" in name:
            # The user's resources stay; the GPUs come in limits and requests alike.
            assert resources == {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
                                 "limits": {"memory": "40Gi", "nvidia.com/gpu": "2"}}
        else:
            assert "nvidia.com/gpu" not in json.dumps(resources), name
    assert len([name for name in pods if "trainer" in name]) == 2
    without = partitioned_with()
    assert "nvidia.com/gpu" not in json.dumps(without)
    lock_server = partitioned_with(config__num_gpus=1, lockServer={})["freebase-lock-server"]
    assert lock_server["spec"]["containers"][0]["resources"] == {}
    for pod in pods.values():
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_each_role_adds_its_own_scheduling_to_the_jobs() -> None:
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    node_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}]}}
    pods = partitioned_with(
        trainers__nodeSelector={"node-pool": "gpu", "accelerator": "h100"},
        trainers__tolerations=[gpu_toleration],
        lockServer__affinity={"nodeAffinity": node_affinity})
    job = EXAMPLES["partitioned"]["spec"]
    trainer, lock_server = pods["freebase-trainer-1"]["spec"], pods["freebase-lock-server"]["spec"]
    server = pods["freebase-partition-server-0"]["spec"]
    # Node labels: the role's value wins over the job's for the same key.
    assert trainer["nodeSelector"] == {"node-pool": "gpu", "accelerator": "h100"}
    assert lock_server["nodeSelector"] == server["nodeSelector"] == {"node-pool": "training"}
    # Tolerations add up.
    assert trainer["tolerations"] == [*job["tolerations"], gpu_toleration]
    assert lock_server["tolerations"] == server["tolerations"] == job["tolerations"]
    # Affinity: the role's kinds replace the job's, the others stay.
    assert lock_server["affinity"] == {**job["affinity"], "nodeAffinity": node_affinity}
    assert trainer["affinity"] == server["affinity"] == job["affinity"]
    for pod in pods.values():
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_a_toleration_given_twice_is_written_once() -> None:
    toleration = EXAMPLES["partitioned"]["spec"]["tolerations"][0]
    pods = partitioned_with(trainers__tolerations=[toleration])
    assert pods["freebase-trainer-0"]["spec"]["tolerations"] == [toleration]


# --- what pods carry for the cluster ------------------------------------------------------------

def test_the_jobs_labels_reach_every_child_and_the_operators_win() -> None:
    job = json.loads(json.dumps(EXAMPLES["partitioned"]))
    job["metadata"]["labels"] = {"team": "kg", "app.kubernetes.io/instance": "argocd-app",
                                 "tessera.dev/job": "someone-else"}
    objects = first_run_children(job)
    assert {o["kind"] for o in objects} == {"ConfigMap", "NetworkPolicy", "Service", "Pod"}
    for child in objects:
        labels = child["metadata"]["labels"]
        assert labels["team"] == "kg"
        assert labels["app.kubernetes.io/instance"] == labels["tessera.dev/job"] == "freebase"


def test_operator_labels_cannot_come_from_a_template() -> None:
    # Whatever label the operator puts on a pod, a pod template may not set.
    own = EXAMPLES["partitioned"]["metadata"]["labels"]  # the job's own: team
    for pod in pods_of(first_run_children(EXAMPLES["partitioned"])):
        for key in set(pod["metadata"]["labels"]) - set(own):
            job = json.loads(json.dumps(EXAMPLES["partitioned"]))
            job["spec"]["podTemplate"] = {"labels": {key: "x"}}
            view = view_job(job)
            assert view.spec is None and key in str(view.spec_error), key


def test_templates_add_to_what_the_operator_puts_in_pods_never_replace_it() -> None:
    plain = pods_of(first_run_children(EXAMPLES["partitioned"]))
    operator_volumes = {v["name"]: m["mountPath"] for v, m in zip(
        plain[0]["spec"]["volumes"], plain[0]["spec"]["containers"][0]["volumeMounts"])}
    assert operator_volumes == dict(OPERATOR_VOLUMES)
    assert {e["name"] for e in plain[0]["spec"]["containers"][0]["env"]} == set(OPERATOR_ENV)
    pods = partitioned_with(podTemplate={
        "env": [{"name": "X", "value": "1"}], "volumes": [{"name": "d", "emptyDir": {}}],
        "volumeMounts": [{"name": "d", "mountPath": "/data"}]})
    for before, after in zip(plain, pods.values()):
        container = after["spec"]["containers"][0]
        assert container["env"] == before["spec"]["containers"][0]["env"] + [
            {"name": "X", "value": "1"}]
        assert after["spec"]["volumes"][:-1] == before["spec"]["volumes"]
        assert container["volumeMounts"][-1] == {"name": "d", "mountPath": "/data"}


# (job-wide template, trainers' template) -> what the trainer pods and the lock server get.
TEMPLATES = [
    ({}, {}, {"automountServiceAccountToken": False}, {"automountServiceAccountToken": False}),
    ({"serviceAccountName": "irsa"}, {},
     {"serviceAccountName": "irsa", "automountServiceAccountToken": True},
     {"serviceAccountName": "irsa", "automountServiceAccountToken": True}),
    ({"serviceAccountName": "irsa", "automountServiceAccountToken": False},
     {"serviceAccountName": "gpu-irsa"},
     {"serviceAccountName": "gpu-irsa", "automountServiceAccountToken": False},
     {"serviceAccountName": "irsa", "automountServiceAccountToken": False}),
    ({"priorityClassName": "low", "schedulerName": "volcano"}, {"priorityClassName": "high"},
     {"priorityClassName": "high", "schedulerName": "volcano",
      "automountServiceAccountToken": False},
     {"priorityClassName": "low", "schedulerName": "volcano",
      "automountServiceAccountToken": False}),
    ({}, {"automountServiceAccountToken": True}, {"automountServiceAccountToken": True},
     {"automountServiceAccountToken": False}),
]


@pytest.mark.parametrize(("job_template", "trainers_template", "trainer", "lock_server"),
                         TEMPLATES)
def test_pod_fields_from_the_templates(job_template: dict[str, Any],
                                       trainers_template: dict[str, Any],
                                       trainer: dict[str, Any],
                                       lock_server: dict[str, Any]) -> None:
    pods = partitioned_with(podTemplate=job_template, trainers__podTemplate=trainers_template)
    fields = ("priorityClassName", "schedulerName", "serviceAccountName",
              "automountServiceAccountToken")
    for name, expected in (("freebase-trainer-1", trainer),
                           ("freebase-lock-server", lock_server)):
        spec = pods[name]["spec"]
        assert {key: spec[key] for key in fields if key in spec} == expected, name
        kubernetes_validate.validate(pods[name], KUBERNETES_VERSION, strict=True)


def test_labels_and_annotations_of_the_templates() -> None:
    pods = partitioned_with(
        podTemplate={"labels": {"team": "kg", "tier": "batch"},
                     "annotations": {"sidecar.istio.io/inject": "false"}},
        trainers__podTemplate={"labels": {"tier": "gpu"}, "annotations": {"cost": "ml"}})
    trainer, server = pods["freebase-trainer-0"]["metadata"], pods[
        "freebase-partition-server-0"]["metadata"]
    assert trainer["annotations"] == {"sidecar.istio.io/inject": "false", "cost": "ml"}
    assert server["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert (trainer["labels"]["tier"], server["labels"]["tier"]) == ("gpu", "batch")
    assert trainer["labels"]["tessera.dev/role"] == "trainer"
    assert "annotations" not in pods_of(first_run_children(EXAMPLES["minimal"]))[0]["metadata"]


def test_kueue_gets_one_pod_group_a_run() -> None:
    job = json.loads(json.dumps(EXAMPLES["kueue"]))
    view = view_job(job)
    assert view.spec is not None
    first = pods_of(children(view.ref, view.spec, first_plan(view.spec)))
    second = pods_of(children(view.ref, view.spec, restarted_plan(first_plan(view.spec))))
    for run, pods in ((1, first), (2, second)):
        assert len(pods) == 4  # a lock server, a partition server, two trainers
        for pod in pods:
            labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
            assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
            assert labels["kueue.x-k8s.io/pod-group-name"] == f"wikidata-{UID[:8]}-{run}"
            assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "4"
            assert annotations["kueue.x-k8s.io/retriable-in-group"] == "false"
    # Without a queue, no group; a queue on the job's own labels reaches the pods, and so does
    # the group.
    del job["spec"]["podTemplate"]["labels"]
    assert not any("kueue" in json.dumps(pod["metadata"])
                   for pod in pods_of(first_run_children(job)))
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-b"
    for pod in pods_of(first_run_children(job)):
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"].startswith("wikidata-")
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"


def test_the_gang_scheduling_example_has_a_pod_group_for_every_pod_of_a_run() -> None:
    documents = list(yaml.safe_load_all((EXAMPLES_DIR / "gang-scheduling.yaml").read_text()))
    (group,) = [d for d in documents if d["kind"] == "PodGroup"]
    pods = pods_of(first_run_children(EXAMPLES["gang-scheduling"]))
    assert group["spec"]["minMember"] == len(pods) == 4
    assert group["metadata"]["name"] == EXAMPLES["gang-scheduling"]["metadata"]["name"]
    for pod in pods:
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == \
            group["metadata"]["name"]
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
