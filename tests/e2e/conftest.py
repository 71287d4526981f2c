"""Fixtures of the end-to-end tests (see `cluster` for what they start).

`cluster` is a whole cluster: API server, kubelet and operator, on a real control plane
(`real_cluster`: etcd, kube-apiserver, kube-controller-manager; the kubelet of `node_kubelet`;
the operator with the Helm chart's namespaced RBAC and a kind-style kubeconfig), or, with
`TESSERA_E2E_API=emulator` (where the binaries are missing), on the emulator of `kube_api`.
`kube` is only the emulator's API server (with the namespace and the CRD), for what a v1.20
server cannot do: refuse unknown fields (strict field validation came in v1.25).
`control_plane` is a real control plane shared by a test module, which may override
`static_token_users` (the users the API server's token file authenticates). `s3_job` turns
`crds/examples/s3-secret.yaml` into a job that trains a small planted graph uploaded to the
test S3 server, with the Secret holding that server's credentials. When a test fails, pytest
shows the operator's log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.chart import chart_objects, operator_user
from e2e.cluster import (
    NAMESPACE,
    NODE_ENV,
    REPO,
    Cluster,
    OperatorProcess,
    TrainingData,
    start_api,
    write_kubeconfig,
)
from e2e.kube_client import KubeClient, eventually
from e2e.kubelet import Kubelet
from e2e.node_kubelet import NODE_ADDRESS, NodeKubelet
from e2e.pki import Pki
from e2e.real_api import RealApi
from e2e.real_cluster import ControlPlane, MissingBinaries
from support.planted import write_planted_graph

Job = tuple[dict[str, Any], dict[str, Any]]


OPERATOR_RELEASE = "tessera"
CLUSTER_APIS = os.environ.get("TESSERA_E2E_API", "real").split(",")  # real, emulator or both


@pytest.fixture(params=[pytest.param(api, marks=[pytest.mark.real_cluster, pytest.mark.slow])
                        if api == "real" else api for api in CLUSTER_APIS])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "real":
        with real_cluster_in(tmp_path) as real:
            yield real
        return
    api, kube = start_api()
    kubelet = Kubelet(api.url, NAMESPACE, tmp_path / "node", NODE_ENV,
                      publish_log=api.publish_log)
    operator = OperatorProcess(write_kubeconfig(api.url, tmp_path / "kubeconfig"),
                               tmp_path / "operator.log")
    kubelet.start()
    operator.start()
    try:
        yield Cluster(api, kube, kubelet, operator)
    finally:
        operator.stop()
        kubelet.stop()
        api.stop()
        print(f"--- operator log ---\n{operator.output()[-30000:]}")  # shown on failure


@contextlib.contextmanager
def real_cluster_in(tmp_path: Path) -> Iterator[Cluster]:
    """A real control plane with one node, and the operator as the chart's service account."""
    folder = tmp_path / "control-plane"
    folder.mkdir()
    plane = ControlPlane(folder, Pki(folder / "pki"))
    with contextlib.ExitStack() as stack:
        stack.callback(plane.stop)
        try:
            plane.start()
        except MissingBinaries as missing:
            pytest.fail(str(missing), pytrace=False)
        kube = plane.client(NAMESPACE)
        install_crd(kube)
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        eventually(lambda: kube.get("v1", "ServiceAccount", "default"),
                   f"the default service account of {NAMESPACE}", 60)
        for manifest in chart_objects(NAMESPACE, OPERATOR_RELEASE, cluster_wide=False):
            kube.apply(manifest)
        identity = plane.pki.client(operator_user(NAMESPACE, OPERATOR_RELEASE, False))
        operator = OperatorProcess(plane.write_kubeconfig(tmp_path / "kubeconfig", identity,
                                                          NAMESPACE),
                                   tmp_path / "operator.log")
        kubelet = NodeKubelet(plane.url, NAMESPACE, tmp_path / "node", NODE_ENV,
                              plane.ssl_context(plane.admin),
                              plane.pki.serving("node-0", [NODE_ADDRESS]),
                              plane.pki.ca.certificate)
        kubelet.start()
        stack.callback(kubelet.stop)
        operator.start()
        stack.callback(lambda: print(f"--- operator log ---\n{operator.output()[-30000:]}"))
        stack.callback(operator.stop)
        yield Cluster(RealApi(plane, kubelet), kube, kubelet, operator, plane)


def install_crd(admin: KubeClient) -> None:
    """Every CRD in `crds/` (the EmbeddingJob's, kopf's peering ones), once established."""
    for path in sorted((REPO / "crds").glob("*.yaml")):
        for crd in [admin.apply(document) for document in
                    yaml.safe_load_all(path.read_text())]:
            eventually(lambda c=crd: _established(admin.get(
                c["apiVersion"], c["kind"], c["metadata"]["name"])),
                f"the CRD {crd['metadata']['name']} to be established", 60)


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeClient]:
    api, kube = start_api()
    try:
        yield kube
    finally:
        api.stop()


@pytest.fixture(scope="module")
def static_token_users() -> tuple[str, ...]:
    return ()


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory,
                  static_token_users: tuple[str, ...]) -> Iterator[ControlPlane]:
    """A real control plane with the CRDs from `crds/` (EmbeddingJob, kopf's peering; no
    nodes)."""
    folder = tmp_path_factory.mktemp("control-plane")
    plane = ControlPlane(folder, Pki(folder / "pki"))
    try:
        plane.start(static_token_users)
        install_crd(plane.client("default"))
        yield plane
    except MissingBinaries as missing:
        pytest.fail(str(missing), pytrace=False)
    finally:
        plane.stop()


def _established(crd: dict[str, Any] | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _planted_on_s3(s3_dir: Any, tmp_path: Path, partitions: int) -> TrainingData:
    data = TrainingData(write_planted_graph(tmp_path / "graph", num_partitions=partitions),
                        s3_dir.url, s3_dir.storage_options)
    data.upload()
    return data


@pytest.fixture
def training_data(s3_dir: Any, tmp_path: Path) -> TrainingData:
    """The planted graph in one partition, on the test S3 server."""
    return _planted_on_s3(s3_dir, tmp_path, 1)


@pytest.fixture
def partitioned_data(s3_dir: Any, tmp_path: Path) -> TrainingData:
    """The planted graph in four partitions (sixteen buckets), on the test S3 server."""
    return _planted_on_s3(s3_dir, tmp_path, 4)


@pytest.fixture
def s3_job(s3_server: Any, training_data: TrainingData) -> Callable[..., Job]:
    """Makes the Secret and the job of crds/examples/s3-secret.yaml, for the test S3 server
    and the planted graph: `s3_job(name, **training_config_overrides)`."""
    def make(name: str, **config: Any) -> Job:
        secret, job = yaml.safe_load_all((REPO / "crds" / "examples" / "s3-secret.yaml")
                                         .read_text())
        secret["stringData"] = {"AWS_ACCESS_KEY_ID": s3_server.key,
                                "AWS_SECRET_ACCESS_KEY": s3_server.secret}
        job["metadata"]["name"] = name
        job["spec"]["storage"]["endpoint"] = s3_server.endpoint_url
        job["spec"]["config"] = training_data.config(**config)
        return secret, job

    return make
