"""`tessera_operator.api` against the test API server (`e2e.kube_api`): what a reconcile's
calls do, and what their failures say."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kopf
import pytest
from e2e.cluster import NAMESPACE, start_api, write_kubeconfig

from tessera_operator.api import KubeApi
from tessera_operator.connection import load_login


async def _patch_config_map(name: str, patch: dict[str, object]) -> None:
    login = await load_login()
    async with KubeApi(login.configuration) as api:
        await api.patch_config_map(NAMESPACE, name, patch)


def test_patching_a_config_map_merges_and_a_failure_says_the_servers_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server, kube = start_api()
    try:
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(server.url, tmp_path / "config")))
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "run-config"}, "data": {"a": "1", "b": "2"}})
        asyncio.run(_patch_config_map("run-config", {"data": {"b": "3"}}))
        assert kube.get("v1", "ConfigMap", "run-config")["data"] == {"a": "1", "b": "3"}
        with pytest.raises(kopf.TemporaryError) as failure:
            asyncio.run(_patch_config_map("no-such-config", {"data": {"b": "3"}}))
        assert "404" in str(failure.value) and "no-such-config" in str(failure.value)
        assert "b'" not in str(failure.value) and 'b"' not in str(failure.value)
    finally:
        server.stop()
