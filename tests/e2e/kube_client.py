"""A small synchronous Kubernetes client for tests: what `kubectl` does, over plain HTTP.

Objects are addressed by kind and name; the URL of a kind comes from API discovery, as
kubectl finds it (so a custom resource is reachable once its CRD is created). `apply` POSTs
a manifest with strict field validation, as `kubectl apply` does for a new object. Every
request has a timeout, and `eventually` bounds every wait.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

REQUEST_TIMEOUT_SECONDS = 10.0
MERGE_PATCH = "application/merge-patch+json"
T = TypeVar("T")


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{status}: {message}")


class KubeClient:
    """Create, read, patch and delete objects of one namespace (or cluster-scoped ones)."""

    def __init__(self, server: str, namespace: str,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.server = server.rstrip("/")
        self.namespace = namespace
        self.ssl_context = ssl_context  # the CA and client certificate of an https server
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json",
                params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path + query, data, method=method,
                                         headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS,
                                        context=self.ssl_context) as response:
                text = response.read().decode()
                is_json = response.headers.get_content_type() == "application/json"
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            raise ApiError(error.code, _json_or_text(text)) from None
        return json.loads(text) if is_json else text

    # --- addressing ---------------------------------------------------------------------------

    def path(self, api_version: str, kind: str, name: str | None = None,
             namespace: str | None = None) -> str:
        """The URL path of a kind's collection, or of one object of it."""
        plural, namespaced = self._resource(api_version, kind)
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        scope = f"/namespaces/{namespace or self.namespace}" if namespaced else ""
        return f"{root}{scope}/{plural}" + (f"/{name}" if name else "")

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        if (api_version, kind) not in self._resources:
            root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for entry in self.request("GET", root)["resources"]:
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = (entry["name"],
                                                                     entry["namespaced"])
        if (api_version, kind) not in self._resources:
            raise ApiError(404, f"the server has no {kind} in {api_version}")
        return self._resources[(api_version, kind)]

    # --- verbs --------------------------------------------------------------------------------

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object, rejecting unknown fields (what `kubectl apply` does first)."""
        path = self.path(manifest["apiVersion"], manifest["kind"],
                         namespace=manifest.get("metadata", {}).get("namespace"))
        return self.request("POST", path, manifest, params={"fieldValidation": "Strict"})

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path(api_version, kind, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, selector: str = "") -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else None
        return self.request("GET", self.path(api_version, kind), params=params)["items"]

    def patch(self, api_version: str, kind: str, name: str, patch: Mapping[str, Any],
              subresource: str = "") -> dict[str, Any]:
        path = self.path(api_version, kind, name) + (f"/{subresource}" if subresource else "")
        return self.request("PATCH", path, patch, content_type=MERGE_PATCH)

    def delete(self, api_version: str, kind: str, name: str, **options: Any) -> Any:
        return self.request("DELETE", self.path(api_version, kind, name), options or None)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def eventually(check: Callable[[], T | None], what: str, timeout: float) -> T:
    """The first truthy value `check` returns, polling for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
