"""End to end on a real API server: a job with the pod template of crds/examples/kueue.yaml
(a Kueue queue, a priority class, a service account, an annotation, environment from a
ConfigMap, a volume) gets pods that carry all of it, one Kueue pod group a run and the job's
own labels, which the API server's admission (service accounts, priority classes) accepts and
the kubelet runs to success. The job carries the operator's finalizer, goes when deleted, and
the operator's log says what it did, one line an action, with kopf's routine successes at
debug. There is no Kueue in the test cluster: what is checked is what Kueue would read.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from e2e.cluster import JOB_API, JOB_KIND, JOB_SECONDS, NAMESPACE, REPO, Cluster
from e2e.kube_client import eventually

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

RECIPE = yaml.safe_load((REPO / "crds" / "examples" / "kueue.yaml").read_text())
TRAINER = "umls-trainer-0"


def with_the_recipe(job: dict[str, Any]) -> dict[str, Any]:
    """The job, with the kueue example's pod templates and its own labels."""
    job = copy.deepcopy(job)
    job["metadata"]["labels"] = {"team": "knowledge-graph"}
    job["spec"]["podTemplate"] = copy.deepcopy(RECIPE["spec"]["podTemplate"])
    job["spec"].setdefault("trainers", {})["podTemplate"] = copy.deepcopy(
        RECIPE["spec"]["trainers"]["podTemplate"])
    return job


def cluster_objects(kube: Any) -> None:
    """What the recipe names: its PriorityClass, ServiceAccount and ConfigMap."""
    template = RECIPE["spec"]["trainers"]["podTemplate"]
    kube.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": RECIPE["spec"]["podTemplate"]["priorityClassName"]},
                "value": 100, "description": "batch training"})
    account = template["serviceAccountName"]
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    reference = template["env"][0]["valueFrom"]["configMapKeyRef"]
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": reference["name"]},
                "data": {reference["key"]: "planted graph, pod template recipe"}})
    # A v1.20 API server mounts an account's token from its Secret, which must exist first.
    eventually(lambda: (kube.get("v1", "ServiceAccount", account) or {}).get("secrets"),
               f"the token Secret of {account}", 60)


def test_pods_carry_the_pod_template_and_the_kueue_group(
        cluster: Cluster, s3_job: Any) -> None:
    if cluster.control_plane is None:
        pytest.skip("the admission of service accounts and priority classes needs a real "
                    "API server")
    cluster_objects(cluster.kube)
    secret, job = s3_job("umls", num_epochs=2)
    cluster.kube.apply(secret)
    cluster.kube.apply(with_the_recipe(job))

    pod = eventually(lambda: cluster.kube.get("v1", "Pod", TRAINER), "the trainer pod", 60)
    applied = cluster.job("umls")
    assert applied is not None
    assert applied["metadata"]["finalizers"] == ["tessera.dev/finalizer"]
    uid = applied["metadata"]["uid"]
    labels, annotations, spec = (pod["metadata"]["labels"], pod["metadata"]["annotations"],
                                 pod["spec"])
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert labels["kueue.x-k8s.io/pod-group-name"] == f"umls-{uid[:8]}-1"
    assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "1"  # one trainer pod
    assert annotations["kueue.x-k8s.io/retriable-in-group"] == "false"
    assert annotations["example.com/cost-center"] == "ml-research"
    assert labels["team"] == "knowledge-graph" and labels["tessera.dev/job"] == "umls"
    assert (spec["priorityClassName"], spec["priority"]) == ("batch-low", 100)  # admitted
    assert spec["serviceAccountName"] == "wikidata-trainer"
    assert spec["automountServiceAccountToken"] is True
    (container,) = spec["containers"]
    assert {"name": "scratch", "mountPath": "/mnt/scratch"} in container["volumeMounts"]
    assert any(m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
               for m in container["volumeMounts"])  # the account's token, for its identity
    note = next(e for e in container["env"] if e["name"] == "TESSERA_RUN_NOTE")
    assert note["valueFrom"]["configMapKeyRef"]["name"] == "wikidata-notes"
    config_map = cluster.kube.get("v1", "ConfigMap", "umls-config")
    assert config_map is not None and config_map["metadata"]["labels"]["team"] == \
        "knowledge-graph"

    cluster.wait_for_phase("umls", "Succeeded", JOB_SECONDS)
    cluster.kube.delete(JOB_API, JOB_KIND, "umls")
    eventually(lambda: cluster.job("umls") is None, "the deleted job to go (its finalizer "
               "removed by the operator)", 60)

    log = cluster.operator.output()
    for action in ("Created", "Succeeded"):
        assert re.search(rf"\[INFO.*\[{NAMESPACE}/umls\] {action} \(\w+\): ", log), action
    routine = [line for line in log.splitlines() if re.search(r"Handler '.*' succeeded\.$", line)]
    assert routine and all("[DEBUG" in line for line in routine)  # shown: it runs --verbose
