"""Where the operator's credentials come from (`tessera_operator.connection`), without a
server: each kubeconfig form becomes the same credentials for kopf's watches as for the
reconcile's client, and credentials that cannot be used stop the operator with one line.
The forms at work against a real API server: tests/e2e/test_real_login.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.pki import Pki
from e2e.real_cluster import exec_credential, write_kubeconfig

from tessera_operator.connection import CredentialsError, connection_info, load_login

SERVER = "https://127.0.0.1:6443"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def login_with(monkeypatch: pytest.MonkeyPatch, path: Path, user: dict[str, Any],
               cluster: dict[str, Any]) -> Any:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(path, {"server": SERVER, **cluster},
                                                          user)))
    return asyncio.run(load_login())


def test_kind_style_kubeconfig_gives_kopf_the_ca_and_client_certificate(
        pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = pki.client("someone", ("some-group",))
    found = login_with(monkeypatch, tmp_path / "config",
                       {"client-certificate-data": pair.certificate_data(),
                        "client-key-data": pair.key_data()},
                       {"certificate-authority-data": pki.ca.certificate_data()})
    info = connection_info(found)
    assert info.server == SERVER and not info.insecure and info.token is None
    assert Path(info.ca_path).read_bytes() == pki.ca.certificate.read_bytes()
    assert Path(info.certificate_path).read_bytes() == pair.certificate.read_bytes()
    assert Path(info.private_key_path).read_bytes() == pair.key.read_bytes()
    assert info.as_ssl_context() is not None  # what kopf's session is built with
    assert found.configuration.ssl_ca_cert == info.ca_path  # one source for both clients


def test_tokens_reach_kopf_with_their_scheme_and_an_exec_credentials_expiry(
        pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = {"certificate-authority": str(pki.ca.certificate)}
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file")
    info = connection_info(login_with(monkeypatch, tmp_path / "a", {"tokenFile": str(token_file)},
                                      ca))
    assert (info.scheme, info.token, info.ca_path) == ("Bearer", "from-a-file",
                                                       str(pki.ca.certificate))

    plugin = tmp_path / "plugin"
    credential = json.loads(exec_credential("from-a-plugin"))
    credential["status"]["expirationTimestamp"] = "2031-01-02T03:04:05Z"
    plugin.write_text(f"#!/bin/sh\nprintf '%s' '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    info = connection_info(login_with(monkeypatch, tmp_path / "b", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin),
        "interactiveMode": "Never"}}, ca))
    assert (info.scheme, info.token) == ("Bearer", "from-a-plugin")
    assert info.expiration is not None and info.expiration.year == 2031


@pytest.mark.parametrize("kubeconfig, says", [
    ("missing", "KUBECONFIG: no such file"),
    ("no-such-context", "cannot use it (Invalid kube-config file"),
    (None, "no Kubernetes credentials"),
])
def test_unusable_credentials_stop_the_operator_with_one_line(
        tmp_path: Path, kubeconfig: str | None, says: str) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if kubeconfig is not None:
        path = tmp_path / kubeconfig
        env["KUBECONFIG"] = str(path)
        if kubeconfig != "missing":
            path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                                            "current-context": "gone", "clusters": [],
                                            "contexts": [], "users": []}))
    done = subprocess.run([sys.executable, "-m", "tessera_operator", "--standalone"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 65
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert done.stderr.startswith("python -m tessera_operator: error: ")


def test_a_kubeconfig_with_an_empty_server_is_refused_with_its_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = login_with(monkeypatch, tmp_path / "config", {"token": "t"}, {"server": ""})
    with pytest.raises(CredentialsError, match=r"kubeconfig .*config: no API server address"):
        connection_info(found)
