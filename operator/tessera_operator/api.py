"""The API calls a reconcile makes, through `kubernetes_asyncio`'s client: its TLS, its
credentials (refreshed as they expire) and its typed calls, which know every kind's URL.

`call` is a plain request to a fixed path (the job, its pods, a pod's log), answered as JSON
or text; `lines` streams a followed log line by line; `create` posts a child manifest to its
kind's collection. One `KubeApi` serves every reconcile of the operator: one connection pool and
one TLS context, not a handshake per reconcile (at a thousand jobs, new clients were most of
the operator's memory and CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client, utils

from .metrics import API_REQUESTS

REQUEST_SECONDS = 30.0
RETRY_SECONDS = 5.0
MERGE_PATCH = "application/merge-patch+json"


class ApiError(kopf.TemporaryError):
    """An error status from the API server (`status` says which, for status messages)."""

    def __init__(self, status: int, message: str, *, delay: float) -> None:
        super().__init__(message, delay=delay)
        self.status = status


class KubeApi:
    """One client session, shared by the reconciles (`close` it when done)."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.client = client.ApiClient(configuration)

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    async def call(self, method: str, path: str, body: Any = None, *,
                   params: Mapping[str, str] | None = None,
                   headers: Mapping[str, str] | None = None, ok: tuple[int, ...] = ()) -> Any:
        """The JSON (or text) answer; None for a status listed in `ok` (404, 409...)."""
        API_REQUESTS.labels(method).inc()
        try:
            response = await self.client.call_api(
                path, method, query_params=list((params or {}).items()),
                header_params={"Accept": "application/json", **(headers or {})}, body=body,
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=REQUEST_SECONDS)
            async with response:
                if response.status in ok:
                    return None
                if response.status >= 400:
                    raise ApiError(
                        response.status,
                        f"{method} {path}: {response.status} {await response.text()}",
                        delay=RETRY_SECONDS)
                if response.content_type == "application/json":
                    return await response.json()
                return await response.text()
        except asyncio.TimeoutError:
            raise kopf.TemporaryError(f"{method} {path}: no answer in {REQUEST_SECONDS:.0f} s",
                                      delay=RETRY_SECONDS) from None

    async def lines(self, path: str, params: Mapping[str, str]) -> AsyncIterator[str]:
        """The lines of a streamed answer (a followed log) as they come; it ends when the
        server ends it. An error status raises `ApiError`."""
        API_REQUESTS.labels("STREAM").inc()
        response = await self.client.call_api(
            path, "GET", query_params=list(params.items()), header_params={"Accept": "*/*"},
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=REQUEST_SECONDS))
        async with response:
            if response.status >= 400:
                raise ApiError(response.status, f"GET {path}: {response.status} "
                               f"{await response.text()}", delay=RETRY_SECONDS)
            async for line in response.content:
                yield line.decode("utf-8", errors="replace").rstrip("\n")

    async def create(self, namespace: str, manifest: Mapping[str, Any]) -> bool:
        """Create the object in its kind's collection; False if one of that name exists."""
        API_REQUESTS.labels("POST").inc()
        try:
            await utils.create_from_dict(self.client, dict(manifest), namespace=namespace,
                                         _request_timeout=REQUEST_SECONDS)
        except utils.FailToCreateError as failure:
            if all(error.status == 409 for error in failure.api_exceptions):
                return False
            raise kopf.TemporaryError(f"creating {_describe(manifest)}: {failure}",
                                      delay=RETRY_SECONDS) from None
        except asyncio.TimeoutError:
            raise kopf.TemporaryError(f"creating {_describe(manifest)}: no answer",
                                      delay=RETRY_SECONDS) from None
        return True

    async def patch_config_map(self, namespace: str, name: str,
                               patch: Mapping[str, Any]) -> None:
        # A plain request: the typed call's error body is bytes, and would be shown as b'...'.
        await self.call("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                        dict(patch), headers={"Content-Type": MERGE_PATCH})


def _describe(manifest: Mapping[str, Any]) -> str:
    return f"{manifest['kind']} {manifest['metadata']['name']}"
