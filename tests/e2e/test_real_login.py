"""The operator logs in to a real API server with every kind of credentials users have, as the
Helm chart's service account, and reconciles a job there.

Each case installs the chart's ServiceAccount and RBAC (rendered by Helm's SDK; cluster-wide or
namespaced, as the case says) in a namespace of its own, then starts `python -m
tessera_operator --standalone` as its own process with the credentials of that account in one
form: a kubeconfig like kind's (CA and client certificate as data), one with files, a static
bearer token, a token file, an exec plugin, or the pod's service account (the process runs in
a mount namespace that shows it the account's token and CA where a pod has them). It applies
the minimal example job and expects the trainer Pod and the ConfigMap, owned by the job, and
the job's status. There is no kubelet: the pod stays Pending, and so does the job.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from e2e.chart import chart_objects as objects_of_chart
from e2e.chart import operator_user
from e2e.cluster import REPO, OperatorProcess
from e2e.kube_client import ApiError, KubeClient, eventually
from e2e.pod_sandbox import Mount, Sandbox, sandbox_command
from e2e.real_cluster import ControlPlane, exec_credential, write_kubeconfig

from tessera_operator.connection import SERVICE_ACCOUNT

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

JOB = "livejournal"
WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class Case:
    credentials: str  # how the operator is given its credentials
    cluster_wide: bool  # the chart's ClusterRole and --all-namespaces, or a Role and --namespace

    @property
    def namespace(self) -> str:
        return f"ns-{self.credentials}"

    @property
    def release(self) -> str:
        return self.credentials  # (user names of client certificates: 64 characters at most)


CASES = [Case("cert-data", cluster_wide=False), Case("cert-files", True),
         Case("token", False), Case("token-file", True), Case("exec", False),
         Case("in-cluster", True)]


def chart_objects(case: Case) -> list[dict[str, Any]]:
    return objects_of_chart(case.namespace, case.release, case.cluster_wide)


def service_account(case: Case) -> str:
    (account,) = [o for o in chart_objects(case) if o["kind"] == "ServiceAccount"]
    return account["metadata"]["name"]


def user_name(case: Case) -> str:
    """The name a service account authenticates as, which RBAC bindings to it match."""
    return operator_user(case.namespace, case.release, case.cluster_wide)


@pytest.fixture(scope="module")
def static_token_users() -> tuple[str, ...]:
    return tuple(user_name(case) for case in CASES if case.credentials == "token")


def install(plane: ControlPlane, case: Case) -> KubeClient:
    """The case's namespace (with its default account) and the chart's objects in it."""
    admin = plane.client(case.namespace)
    for manifest in [{"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": case.namespace}}, *chart_objects(case)]:
        try:
            admin.apply(manifest)
        except ApiError as error:
            if error.status != 409:  # installed by an earlier test
                raise
        if manifest["kind"] == "Namespace":
            eventually(lambda: admin.get("v1", "ServiceAccount", "default"),
                       f"the default service account of {case.namespace}", WAIT_SECONDS)
    return admin


def operator_for(plane: ControlPlane, case: Case, folder: Path) -> OperatorProcess:
    """The operator, given the chart's service account's credentials in the case's form."""
    scope = ("--all-namespaces",) if case.cluster_wide else ("--namespace", case.namespace)
    log = folder / "operator.log"
    cluster: dict[str, Any] = {"server": plane.url}
    if case.credentials in ("cert-files", "token-file"):
        cluster["certificate-authority"] = str(plane.pki.ca.certificate)
    else:
        cluster["certificate-authority-data"] = plane.pki.ca.certificate_data()
    account = service_account(case)
    if case.credentials == "in-cluster":
        return OperatorProcess(None, log, scope, launch=in_pod(plane, case, folder))
    if case.credentials == "cert-data":
        pair = plane.pki.client(user_name(case))
        user = {"client-certificate-data": pair.certificate_data(),
                "client-key-data": pair.key_data()}
    elif case.credentials == "cert-files":
        pair = plane.pki.client(user_name(case))
        user = {"client-certificate": str(pair.certificate), "client-key": str(pair.key)}
    elif case.credentials == "token":
        user = {"token": plane.tokens[user_name(case)]}
    elif case.credentials == "token-file":
        token_file = folder / "token"
        token_file.write_text(plane.service_account_token(case.namespace, account))
        user = {"tokenFile": str(token_file)}
    else:
        plugin = folder / "credential-plugin"
        credential = exec_credential(plane.service_account_token(case.namespace, account))
        plugin.write_text(f"#!/bin/sh\nprintf '%s' '{credential}'\n")
        plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                         "command": str(plugin), "interactiveMode": "Never"}}
    kubeconfig = write_kubeconfig(folder / "kubeconfig", cluster, user, case.namespace)
    return OperatorProcess(kubeconfig, log, scope)


def in_pod(plane: ControlPlane, case: Case, folder: Path):  # -> e2e.cluster.Launcher
    """Run the operator as in its pod: the service account's token, CA and namespace at
    /var/run/secrets/kubernetes.io/serviceaccount, the API server in KUBERNETES_SERVICE_*."""
    secrets = folder / "serviceaccount"
    secrets.mkdir()
    (secrets / "token").write_text(plane.service_account_token(case.namespace,
                                                               service_account(case)))
    (secrets / "ca.crt").write_bytes(plane.pki.ca.certificate.read_bytes())
    (secrets / "namespace").write_text(case.namespace)
    hosts = folder / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    url = urlparse(plane.url)

    def launch(command: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        pod_env = {"PATH": os.environ["PATH"], "KUBERNETES_SERVICE_HOST": str(url.hostname),
                   "KUBERNETES_SERVICE_PORT": str(url.port)}
        sandbox = Sandbox(argv=command, env=pod_env, hostname="tessera-operator",
                          hosts_file=hosts, stage=folder / "stage",
                          mounts=[Mount(str(SERVICE_ACCOUNT), secrets, read_only=True)])
        return sandbox_command(sandbox), env

    return launch


@pytest.fixture(params=CASES, ids=lambda case: case.credentials)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


@pytest.fixture
def operator(control_plane: ControlPlane, case: Case, tmp_path: Path) -> Iterator[
        OperatorProcess]:
    install(control_plane, case)
    process = operator_for(control_plane, case, tmp_path)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ---\n{process.output()[-20000:]}")  # shown on failure


def test_operator_logs_in_and_reconciles(control_plane: ControlPlane, case: Case,
                                         operator: OperatorProcess) -> None:
    kube = control_plane.client(case.namespace)
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    eventually(lambda: "logged in to" in operator.output(), "the operator to log in",
               WAIT_SECONDS)
    source = "in-cluster service account" if case.credentials == "in-cluster" else "kubeconfig"
    assert f"with the {source}" in operator.output()
    uid = kube.apply(job)["metadata"]["uid"]

    for kind, name in (("ConfigMap", f"{JOB}-config"), ("Pod", f"{JOB}-trainer-0")):
        child = eventually(lambda k=kind, n=name: kube.get("v1", k, n),
                           f"the operator to create {kind} {name}", WAIT_SECONDS)
        assert [owner["uid"] for owner in child["metadata"]["ownerReferences"]] == [uid]
    status = eventually(
        lambda: (kube.get("tessera.dev/v1alpha1", "EmbeddingJob", JOB) or {}).get("status"),
        "the job's status", WAIT_SECONDS)
    assert status["phase"] == "Pending"
    assert {condition["type"] for condition in status["conditions"]}
    assert operator.process is not None and operator.process.poll() is None


def test_the_charts_service_account_gets_only_the_charts_rules(
        control_plane: ControlPlane) -> None:
    namespaced = CASES[0]
    assert not namespaced.cluster_wide
    install(control_plane, namespaced)
    identity = KubeClient(control_plane.url, namespaced.namespace, control_plane.ssl_context(
        control_plane.pki.client(user_name(namespaced))))
    pods = identity.list("v1", "Pod")  # allowed: its own namespace's pods
    assert all(pod["metadata"]["namespace"] == namespaced.namespace for pod in pods)
    for forbidden in (lambda: identity.list("v1", "Secret"),
                      lambda: identity.request("GET", "/api/v1/namespaces/default/pods")):
        with pytest.raises(ApiError) as refused:
            forbidden()
        assert refused.value.status == 403
