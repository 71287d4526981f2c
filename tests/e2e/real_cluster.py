"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and
kube-controller-manager (v1.20.2, the envtest set), set up as a cluster sets them up, minus the
nodes: TLS with a test CA, client-certificate and static-token authentication, RBAC,
service-account tokens signed by the API server, garbage collection by owner references.
kube-apiserver reaches kubelets (`pods/log`) with a client certificate and checks theirs against
the test CA, and writes an audit log (`audit.log`: every write of a Pod or an EmbeddingJob with
the object it answered, and every read of one, as JSON lines) that tests read to see what
happened through the API (`real_api`). `restart_api_server` kills it (SIGKILL) and starts it
again on the same port, as a crashed control plane node comes back.

The binaries come from `KUBEBUILDER_ASSETS` (a folder holding the three), else from the cache
that `tests/e2e/k8s_binaries.sh` fills; if they are missing, the tests that need them fail
with the command that makes them. Every process is stopped at the end (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from e2e.kube_client import KubeClient
from e2e.pki import KeyPair, Pki
from support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests" / "e2e" / "k8s_binaries.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
START_SECONDS = 90.0
STOP_SECONDS = 10.0
ADMIN = "tessera-test-admin"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# Writes of pods and jobs with their answer, reads of them (and of pods/log) by name only.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "RequestResponse", "verbs": ["create", "update", "patch", "delete"],
         "resources": [{"group": "", "resources": ["pods", "pods/status"]},
                       {"group": "tessera.dev",
                        "resources": ["embeddingjobs", "embeddingjobs/status"]}]},
        {"level": "Metadata", "verbs": ["get"],
         "resources": [{"group": "", "resources": ["pods", "pods/log"]},
                       {"group": "tessera.dev", "resources": ["embeddingjobs"]}]},
        {"level": "None"}]}


class MissingBinaries(Exception):
    """The control plane's binaries are not where the tests look."""


def binaries_folder() -> Path:
    """`KUBEBUILDER_ASSETS`, else the build script's cache folder, holding all three."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        folder, source = Path(assets), "KUBEBUILDER_ASSETS"
    else:
        where = subprocess.run([str(BUILD_SCRIPT), "--where"], capture_output=True,
                               text=True, check=True, timeout=10)
        folder, source = Path(where.stdout.strip()), "the cache"
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise MissingBinaries(
            f"{', '.join(missing)} not found in {folder} ({source}): run {BUILD_SCRIPT} "
            "(Debian 12, about 12 minutes once), or set KUBEBUILDER_ASSETS to a folder with "
            f"{', '.join(BINARIES)}; deselect these tests with -m 'not real_cluster'")
    return folder


@dataclass
class ControlPlane:
    """The three processes, their folder, and how to reach the API server."""

    folder: Path
    pki: Pki
    url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # user -> static bearer token
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)

    @property
    def audit_log(self) -> Path:
        return self.folder / "audit.log"

    @cached_property
    def admin(self) -> KeyPair:
        return self.pki.client(ADMIN, ("system:masters",))

    def start(self, static_token_users: tuple[str, ...] = ()) -> None:
        binaries = binaries_folder()
        etcd_port, etcd_peer_port, api_port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{api_port}"
        serving = self.pki.serving("kube-apiserver", ["127.0.0.1", "localhost", "kubernetes",
                                                      "kubernetes.default.svc"])
        token_file = self.folder / "tokens.csv"
        self.tokens = {user: os.urandom(16).hex() for user in static_token_users}
        token_file.write_text("".join(f"{token},{user},{user}\n"
                                      for user, token in self.tokens.items()))
        audit_policy = self.folder / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{etcd_peer_port}"
        self._run("etcd", [
            str(binaries / "etcd"), "--name=test", f"--data-dir={self.folder / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=test={peer_url}", "--unsafe-no-fsync"])
        self._run("kube-apiserver", [
            str(binaries / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}", "--insecure-port=0",
            f"--cert-dir={self.folder / 'apiserver'}",
            f"--tls-cert-file={serving.certificate}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca.certificate}",
            f"--token-auth-file={token_file}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.pki.service_account_public_key}",
            f"--service-account-signing-key-file={self.pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--endpoint-reconciler-type=none", "--allow-privileged=true", "--profiling=false",
            f"--kubelet-client-certificate={self.admin.certificate}",
            f"--kubelet-client-key={self.admin.key}",
            f"--kubelet-certificate-authority={self.pki.ca.certificate}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--audit-policy-file={audit_policy}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking"])
        self._wait_until_ready()
        admin_kubeconfig = self.write_kubeconfig(self.folder / "admin.kubeconfig", self.admin)
        self._run("kube-controller-manager", [
            str(binaries / "kube-controller-manager"), f"--kubeconfig={admin_kubeconfig}",
            "--controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            f"--root-ca-file={self.pki.ca.certificate}", "--leader-elect=false",
            "--port=0", "--secure-port=0", "--use-service-account-credentials=false"])
        # The service-account controllers are up once the default namespace has its account.
        self._wait_for("the default service account", lambda: self.client("default").get(
            "v1", "ServiceAccount", "default"))

    def restart_api_server(self, down_seconds: float) -> None:
        """SIGKILL kube-apiserver, leave it down for `down_seconds`, start it again."""
        server = self.processes["kube-apiserver"]
        server.kill()
        server.wait(STOP_SECONDS)
        time.sleep(down_seconds)
        self._run("kube-apiserver", self.commands["kube-apiserver"])
        self._wait_until_ready()

    def _run(self, name: str, command: list[str]) -> None:
        self.commands[name] = command
        with open(self.folder / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def _wait_until_ready(self) -> None:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2,
                                            context=self.ssl_context(self.admin)) as answer:
                    return answer.status == 200
            except (OSError, urllib.error.URLError):
                return False

        self._wait_for("kube-apiserver's /readyz", ready)

    def _wait_for(self, what: str, check: Any) -> None:
        deadline = time.monotonic() + START_SECONDS
        while not check():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode} while "
                                       f"waiting for {what}:\n{self.log(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {START_SECONDS:.0f} s waiting for "
                                   f"{what}:\n" + "\n".join(map(self.log, self.processes)))
            time.sleep(0.2)

    def log(self, name: str, characters: int = 4000) -> str:
        path = self.folder / f"{name}.log"
        text = path.read_text(errors="replace")[-characters:] if path.exists() else ""
        return f"--- {name} ---\n{text}"

    def stop(self) -> None:
        """The controller manager first, etcd last; SIGKILL for what outlives the grace."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(STOP_SECONDS)

    # --- reaching it --------------------------------------------------------------------------

    def ssl_context(self, client: KeyPair | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.certificate))
        if client is not None:
            context.load_cert_chain(str(client.certificate), str(client.key))
        return context

    def client(self, namespace: str) -> KubeClient:
        """An admin client (group system:masters), like `kubectl` with kind's kubeconfig."""
        return KubeClient(self.url, namespace, ssl_context=self.ssl_context(self.admin))

    def write_kubeconfig(self, path: Path, user: KeyPair, namespace: str = "default") -> Path:
        """A kubeconfig as kind writes it: the CA and the client certificate as data."""
        return write_kubeconfig(path, {"server": self.url, "certificate-authority-data":
                                       self.pki.ca.certificate_data()},
                                {"client-certificate-data": user.certificate_data(),
                                 "client-key-data": user.key_data()}, namespace)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token of the service account, from the TokenRequest API (what a kubelet mounts)."""
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}
        answer = self.client(namespace).request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
        return answer["status"]["token"]


def write_kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any],
                     namespace: str = "default") -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
              "clusters": [{"name": "test", "cluster": cluster}],
              "users": [{"name": "test", "user": user}],
              "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test",
                                                        "namespace": namespace}}]}
    path.write_text(yaml.safe_dump(config))
    return path


def exec_credential(token: str) -> str:
    """What an exec credential plugin prints (client.authentication.k8s.io)."""
    return json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                       "kind": "ExecCredential", "status": {"token": token}})
