"""Where the operator's credentials come from, and the one client configuration built from them.

`kubernetes_asyncio` reads the credentials (every kubeconfig form: CA file or data, client
certificate and key as files or data, bearer token, token file, exec plugins; and the
in-cluster service account), so the operator handles none of those formats itself. The same
loaded configuration becomes kopf's `ConnectionInfo` for its watches and the client of the
reconcile's API calls: one source of truth for who the operator is.

Which credentials, in the order controller-runtime uses: the kubeconfig named by
`$KUBECONFIG`, else the pod's service account (`KUBERNETES_SERVICE_HOST` and the token under
`/var/run/secrets/kubernetes.io/serviceaccount`), else `~/.kube/config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import kopf
from kubernetes_asyncio import client, config

from tessera.errors import BadInputError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")


class CredentialsError(BadInputError):
    """No credentials were found, or they cannot be read; the message says which and why."""


@dataclass(frozen=True)
class Login:
    """A loaded client configuration, and until when its credentials hold (None: no end)."""

    configuration: client.Configuration
    expiration: datetime | None = None
    source: str = ""


async def load_login() -> Login:
    """The operator's credentials, from the first source that exists (see the module doc)."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        return await _from_kubeconfig(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").is_file():
        return _from_service_account()
    if DEFAULT_KUBECONFIG.expanduser().is_file():
        return await _from_kubeconfig(str(DEFAULT_KUBECONFIG.expanduser()))
    raise CredentialsError(
        "no Kubernetes credentials: set KUBECONFIG, run in a pod with a service account, "
        f"or write {DEFAULT_KUBECONFIG}")


async def _from_kubeconfig(paths: str) -> Login:
    configuration = client.Configuration()
    missing = [path for path in paths.split(os.pathsep) if path and not Path(path).is_file()]
    if missing:
        raise CredentialsError(f"KUBECONFIG: no such file {missing[0]}; point it at a "
                               "kubeconfig file")
    try:
        loader = await config.load_kube_config(config_file=paths, persist_config=False,
                                               client_configuration=configuration)
    except (config.ConfigException, KeyError, TypeError, ValueError, OSError,
            AssertionError) as problem:  # (the loader asserts that the context exists)
        raise CredentialsError(f"kubeconfig {paths}: cannot use it ({_said(problem)}); "
                               "check it with `kubectl config view`") from None
    return Login(configuration, getattr(loader, "exec_plugin_expiry", None), f"kubeconfig {paths}")


def _from_service_account() -> Login:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as problem:
        raise CredentialsError(f"service account {SERVICE_ACCOUNT}: {problem}") from None
    return Login(configuration, None, "in-cluster service account")


def _said(problem: BaseException) -> str:
    return " ".join(str(problem).split()) or type(problem).__name__


def connection_info(login: Login) -> kopf.ConnectionInfo:
    """The same credentials as kopf wants them, for its own watches."""
    configuration = login.configuration
    if not configuration.host:
        raise CredentialsError(f"{login.source}: no API server address; name the cluster's "
                               "`server` in it")
    # "Bearer <token>" (tokens, token files, exec plugins, service accounts) or "Basic <b64>"
    scheme, _, token = (configuration.api_key.get("BearerToken") or "").partition(" ")
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        proxy_url=configuration.proxy,
        expiration=login.expiration,
    )
