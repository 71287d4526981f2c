"""The cluster of the end-to-end tests: an API server (a real kube-apiserver, or the emulator),
a kubelet and the operator, and what the tests ask of them (a job's phases and statuses, pod
logs, pausing a pod, log faults).

The operator runs as users run it, `python -m tessera_operator --standalone --namespace ml`,
in a process of its own that logs in with a kubeconfig, so that it can be stopped and
started again like a Deployment's pod.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import kmock
import s3fs
import yaml
from e2e.kube_api import ApiServer
from e2e.kube_client import KubeClient, eventually
from e2e.kubelet import Kubelet
from e2e.real_cluster import ControlPlane
from support.planted import PlantedGraph
from support.ports import free_port

from tessera.storage.checkpoint import JOURNAL_FILE, CheckpointStore
from tessera.storage.fs import Directory

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "ml"
JOB_API = "tessera.dev/v1alpha1"
JOB_KIND = "EmbeddingJob"
JOBS = kmock.resource("tessera.dev", "v1alpha1", "embeddingjobs")
Launcher = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
STOP_SECONDS = 10.0
JOB_SECONDS = 120.0  # the longest a job of these tests may take, on a busy machine
STATUS_SECONDS = 30.0  # the operator reads progress at least every 10 s
# kube-controller-manager's garbage collector learns of a new kind (the EmbeddingJob CRD,
# installed after it started) at its next discovery resync, every 30 s: until then it leaves
# the dependents of a deleted job in place.
GC_SECONDS = 75.0
# What a node gives every container besides the pod's environment: one intra-op thread (the
# machine is small), and the loopback interface for torch's process groups.
NODE_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo"}


class ApiView(Protocol):
    """What tests ask of the API server beyond the API: `kube_api.ApiServer` (the emulator)
    answers from its state, `real_api.RealApi` from kube-apiserver's audit log and the
    kubelet's log endpoint."""

    @property
    def url(self) -> str: ...

    def history(self, resource: kmock.resource, namespace: str | None,
                name: str) -> list[dict[str, Any] | None]: ...

    def reads(self, resource: kmock.resource, name: str, subresource: str = "") -> int: ...

    def fail_logs(self, status: int | None) -> None: ...


def start_api() -> tuple[ApiServer, KubeClient]:
    """An API server with the jobs' namespace and the EmbeddingJob CRD from `crds/`."""
    api = ApiServer()
    kube = KubeClient(api.url, NAMESPACE)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kube.apply(yaml.safe_load((REPO / "crds" / "embeddingjob.yaml").read_text()))
    return api, kube


def write_kubeconfig(server: str, path: Path) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
              "clusters": [{"name": "e2e", "cluster": {"server": server}}],
              "users": [{"name": "operator", "user": {"token": "e2e-operator-token"}}],
              "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "operator",
                                                       "namespace": NAMESPACE}}]}
    path.write_text(yaml.safe_dump(config))
    return path


class OperatorProcess:
    """`python -m tessera_operator` against the test API server; stoppable and restartable.

    It logs in with `kubeconfig`, or, with none, as `launch` arranges (a sandbox that shows it
    a service account where a pod has one): `launch` turns the command and environment into
    those to run. Its metrics are at `metrics_url` (a free port on 127.0.0.1)."""

    def __init__(self, kubeconfig: Path | None, log: Path,
                 scope: tuple[str, ...] = ("--namespace", NAMESPACE),
                 launch: Launcher | None = None,
                 peering: tuple[str, ...] = ("--standalone",)) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.scope = scope
        self.launch = launch
        self.peering = peering  # --standalone, or --peering NAME for one of several replicas
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> None:
        command = [sys.executable, "-m", "tessera_operator", *self.peering, *self.scope,
                   "--verbose", "--metrics-port", f"127.0.0.1:{self.metrics_port}"]
        env = {key: value for key, value in os.environ.items()
               if key not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        if self.launch is not None:
            command, env = self.launch(command, env)
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)

    def stop(self) -> None:
        """SIGTERM (kopf stops its daemons), SIGKILL if it takes too long."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_SECONDS)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """The parts of a cluster the tests use, and what they ask of it."""

    api: ApiView
    kube: KubeClient
    kubelet: Kubelet
    operator: OperatorProcess
    control_plane: ControlPlane | None = None  # a real one's processes, None on the emulator

    def job(self, name: str) -> dict[str, Any] | None:
        return self.kube.get(JOB_API, JOB_KIND, name)

    def statuses(self, name: str) -> list[dict[str, Any]]:
        """Every status the job had, in order (each written version, deletions left out)."""
        seen: list[dict[str, Any]] = []
        for version in self.api.history(JOBS, NAMESPACE, name):
            status = (version or {}).get("status") or {}
            if status and (not seen or seen[-1] != status):
                seen.append(status)
        return seen

    def phases(self, name: str) -> list[str]:
        """The phases the job went through, each change once."""
        phases: list[str] = []
        for status in self.statuses(name):
            if "phase" in status and (not phases or phases[-1] != status["phase"]):
                phases.append(status["phase"])
        return phases

    def wait_for_phase(self, name: str, phase: str, timeout: float,
                       run: int | None = None) -> dict[str, Any]:
        """The job once it is in `phase` (in its `run`-th run, if given)."""
        def reached() -> dict[str, Any] | None:
            status = (self.job(name) or {}).get("status") or {}
            in_run = run is None or (status.get("run") or {}).get("number") == run
            return self.job(name) if status.get("phase") == phase and in_run else None

        return eventually(reached, f"job {name} to be {phase}", timeout)

    def pods(self, name: str) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", f"tessera.dev/job={name}")

    def pod_uids(self, pod: str) -> set[str]:
        """The uid of every pod that ever had this name."""
        return {version["metadata"]["uid"] for version in
                self.api.history(kmock.resource("", "v1", "pods"), NAMESPACE, pod) if version}

    def wait_for_log(self, pod: str, text: str, timeout: float) -> str:
        """The log of the pod's latest container, once it shows `text`."""
        def shown() -> str | None:
            logs = self.kubelet.logs(pod)
            return logs[-1] if logs and text in logs[-1] else None

        return eventually(shown, f"{text!r} in the log of {pod}", timeout)

    def pause(self, pod: str) -> None:
        """Hold the pod's process where it is (a very slow node), until `resume`."""
        assert self.kubelet.kill(pod, signal.SIGSTOP), f"{pod} has no running container"

    def resume(self, pod: str) -> None:
        assert self.kubelet.kill(pod, signal.SIGCONT), f"{pod} has no running container"


@dataclass(frozen=True)
class TrainingData:
    """A planted graph on the test S3 server, and where its checkpoints go."""

    graph: PlantedGraph
    root: str  # s3://bucket/prefix
    storage_options: dict[str, Any]

    @property
    def checkpoint_path(self) -> str:
        return f"{self.root}/checkpoints"

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The planted graph's training config, reading from and writing to S3."""
        return self.graph.config(**{
            "entity_path": f"{self.root}/entities", "edge_paths": [f"{self.root}/train"],
            "checkpoint_path": self.checkpoint_path, **overrides})

    def filesystem(self) -> s3fs.S3FileSystem:
        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def upload(self) -> None:
        for part in ("entities", "train"):
            self.filesystem().put(str(self.graph.root / part),
                                  f"{self.root}/{part}".removeprefix("s3://"), recursive=True)

    def read(self, path: str) -> str:
        return self.filesystem().cat_file(path.removeprefix("s3://")).decode()

    def checkpoint_version(self, directory: str) -> int:
        return int(self.read(f"{directory}/checkpoint_version.txt"))

    def first_chunk_loss(self, directory: str) -> float:
        """The mean loss of the first bucket chunk trained into `directory`: the first line
        of its training_stats.json or, for a run stopped between committing that chunk and
        appending its statistics, the commit's journal (which the next run there appends).
        A trainer's log may hold no loss before it is stopped: progress records come every
        10 s."""
        lines = CheckpointStore(Directory(directory, self.storage_options)).read_stats()
        journal = f"{directory}/{JOURNAL_FILE}"
        if self.filesystem().exists(journal.removeprefix("s3://")):
            lines += json.loads(self.read(journal))["stats"]
        return float(lines[0]["stats"]["metrics"]["loss"])
