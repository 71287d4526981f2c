"""Fixtures of the end-to-end tests (see `cluster` for what they start).

`cluster` is a whole cluster: API server, kubelet and operator; `kube` only the API server
(with the namespace and the CRD), for what needs no controller. Both serve the API with the
emulator of `kube_api`; `control_plane` is a real one (`real_cluster`: etcd, kube-apiserver,
kube-controller-manager), shared by a test module, which may override `static_token_users`
(the users the API server's token file authenticates). `s3_job` turns
`crds/examples/s3-secret.yaml` into a job that trains a small planted graph uploaded to the
test S3 server, with the Secret holding that server's credentials. When a test fails, pytest
shows the operator's log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
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
from e2e.pki import Pki
from e2e.real_cluster import ControlPlane, MissingBinaries
from support.planted import write_planted_graph

Job = tuple[dict[str, Any], dict[str, Any]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    api, kube = start_api()
    kubelet = Kubelet(api.url, api.emulator, NAMESPACE, tmp_path / "node", NODE_ENV)
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
        admin = plane.client("default")
        for path in sorted((REPO / "crds").glob("*.yaml")):
            for crd in [admin.apply(document) for document in
                        yaml.safe_load_all(path.read_text())]:
                eventually(lambda c=crd: _established(admin.get(
                    c["apiVersion"], c["kind"], c["metadata"]["name"])),
                    f"the CRD {crd['metadata']['name']} to be established", 60)
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
