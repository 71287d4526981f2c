"""The operator end to end over HTTP: kopf runs the handlers against a small in-memory API server.

`FakeApiServer` speaks just enough of the Kubernetes API for kopf and the handlers, on
127.0.0.1: discovery, list (with label selectors), watch (resuming after a resourceVersion),
get, create (uid, resourceVersion, generation, 409 on duplicates), PUT, merge and JSON patches
(a failed `test` answers 422), the status subresource, delete with finalizers, pod logs. The
test plays the user and the kubelet: it applies the minimal example job, then moves the pod
through its phases by patching its status, and watches the job's phase follow.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kopf.testing import KopfRunner

from tessera_operator.crd import GROUP, PLURAL
from tessera_operator.labels import job_labels

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "ml"
WAIT_SECONDS = 30.0
JOBS = f"/apis/{GROUP}/v1alpha1/namespaces/{NAMESPACE}/{PLURAL}"
CORE = f"/api/v1/namespaces/{NAMESPACE}"
RESOURCES = {  # API prefix -> (plural, kind, namespaced, subresources)
    "api/v1": [("pods", "Pod", True, ("status", "log")), ("configmaps", "ConfigMap", True, ()),
               ("services", "Service", True, ()), ("events", "Event", True, ()),
               ("namespaces", "Namespace", False, ())],
    "apis/networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True, ())],
    f"apis/{GROUP}/v1alpha1": [(PLURAL, "EmbeddingJob", True, ("status",))],
    "apis/apiextensions.k8s.io/v1": [
        ("customresourcedefinitions", "CustomResourceDefinition", False, ())],
}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def json_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """RFC 6902 JSON patch (add, replace, remove, test); None when a test fails."""
    result = copy.deepcopy(obj)
    for operation in operations:
        *parents, last = [part.replace("~1", "/").replace("~0", "~")
                          for part in operation["path"].split("/")[1:]]
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        index: Any = (len(node) if last == "-" else int(last)) if isinstance(node, list) else last
        if operation["op"] == "test":
            present = index < len(node) if isinstance(node, list) else index in node
            if not present or node[index] != operation["value"]:
                return None
        elif operation["op"] == "remove":
            del node[index]
        elif isinstance(node, list) and operation["op"] == "add":
            node.insert(index, operation["value"])
        else:
            node[index] = operation["value"]
    return result


def selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key not in labels or ("=" in term and labels[key] != value):
            return False
    return True


class FakeApiServer:
    """Objects in memory, served over HTTP as the Kubernetes API serves them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, dict[str, Any]]] = {}
        self.history: list[tuple[int, tuple[str, str | None, str], str, dict[str, Any]]] = []
        self.versions = itertools.count(1)
        self.changed = asyncio.Condition()

    # --- storage ------------------------------------------------------------------------------

    async def record(self, key: tuple[str, str | None, str], kind: str,
                     obj: dict[str, Any]) -> dict[str, Any]:
        version = next(self.versions)
        obj["metadata"]["resourceVersion"] = str(version)
        store = self.objects.setdefault(key, {})
        if kind == "DELETED":
            store.pop(obj["metadata"]["name"], None)
        else:
            store[obj["metadata"]["name"]] = obj
        self.history.append((version, key, kind, copy.deepcopy(obj)))
        async with self.changed:
            self.changed.notify_all()
        return obj

    async def create(self, key: tuple[str, str | None, str], obj: dict[str, Any]) -> web.Response:
        metadata = obj.setdefault("metadata", {})
        if "name" not in metadata:
            metadata["name"] = metadata.get("generateName", "obj-") + uuid.uuid4().hex[:5]
        if metadata["name"] in self.objects.get(key, {}):
            return web.json_response({"kind": "Status", "reason": "AlreadyExists"}, status=409)
        metadata.update(uid=str(uuid.uuid4()), generation=1,
                        creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if key[1] is not None:
            metadata["namespace"] = key[1]
        obj.update(apiVersion=key[0].removeprefix("api/").removeprefix("apis/"),
                   kind=self.kind(key))
        return web.json_response(await self.record(key, "ADDED", obj), status=201)

    async def update(self, key: tuple[str, str | None, str], old: dict[str, Any],
                     new: dict[str, Any], subresource: str | None) -> dict[str, Any]:
        if subresource == "status":
            new = {**old, "status": new.get("status", {})}
        elif "status" in old or "status" in new:
            new = {**new, "status": old.get("status", {})}  # the status is the subresource's
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"]["generation"] + 1
        meta = new["metadata"]
        gone = meta.get("deletionTimestamp") and not meta.get("finalizers")
        return await self.record(key, "DELETED" if gone else "MODIFIED", new)

    def kind(self, key: tuple[str, str | None, str]) -> str:
        return next(kind for plural, kind, *_ in RESOURCES[key[0]] if plural == key[2])

    # --- HTTP ---------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        prefix_length = 2 if parts[0] == "api" else 3
        prefix, rest = "/".join(parts[:prefix_length]), parts[prefix_length:]
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            return web.json_response({"kind": "APIGroupList", "groups": [
                {"name": p.split("/")[1], "preferredVersion": version, "versions": [version]}
                for p in RESOURCES if p.startswith("apis/")
                for version in [{"groupVersion": p[5:], "version": p.split("/")[2]}]]})
        if not rest:
            return web.json_response(self.discovery(prefix))
        namespace = rest[1] if rest[0] == "namespaces" and len(rest) > 2 else None
        plural, *tail = rest[2:] if namespace else rest
        key = (prefix, namespace, plural)
        name, subresource = (tail + [None, None])[:2]
        store = self.objects.setdefault(key, {})
        if name is None and request.method == "GET":
            return await self.list_or_watch(request, key)
        if name is None:
            return await self.create(key, await request.json())
        if name not in store:
            return web.json_response({"kind": "Status", "reason": "NotFound"}, status=404)
        old = store[name]
        if subresource == "log":
            return web.Response(text="", content_type="text/plain")
        if request.method == "GET":
            return web.json_response(old)
        if request.method == "DELETE":
            if old["metadata"].get("finalizers"):
                gone = merge(old, {"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}})
                return web.json_response(await self.record(key, "MODIFIED", gone))
            return web.json_response(await self.record(key, "DELETED", copy.deepcopy(old)))
        body = await request.json()
        if request.method == "PUT":
            new = merge(body, {"metadata": {k: old["metadata"][k] for k in (
                "uid", "creationTimestamp", "generation")}})
        elif request.content_type == "application/json-patch+json":
            new = json_patch(old, body)
            if new is None:
                return web.json_response({"kind": "Status", "reason": "Invalid"}, status=422)
        else:
            new = merge(old, body)
        return web.json_response(await self.update(key, old, new, subresource))

    def discovery(self, prefix: str) -> dict[str, Any]:
        resources = []
        for plural, kind, namespaced, subresources in RESOURCES[prefix]:
            verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
            resources += [{"name": plural, "singularName": kind.lower(), "kind": kind,
                           "namespaced": namespaced, "verbs": verbs}]
            resources += [{"name": f"{plural}/{sub}", "kind": kind, "namespaced": namespaced,
                           "verbs": ["get", "patch"]} for sub in subresources]
        return {"kind": "APIResourceList", "groupVersion": prefix.split("/", 1)[1],
                "resources": resources}

    async def list_or_watch(self, request: web.Request,
                            key: tuple[str, str | None, str]) -> web.StreamResponse:
        selector = request.query.get("labelSelector", "")

        def matching(candidate: tuple[str, str | None, str], obj: dict[str, Any]) -> bool:
            same = candidate[::2] == key[::2] and key[1] in (None, candidate[1])
            return same and selected(obj, selector)

        if request.query.get("watch") not in ("true", "1"):
            items = [obj for store_key, store in self.objects.items()
                     for obj in store.values() if matching(store_key, obj)]
            return web.json_response({"kind": f"{self.kind(key)}List", "items": items,
                                      "metadata": {"resourceVersion": str(len(self.history))}})
        return await self.watch(request, matching)

    async def watch(self, request: web.Request,
                    matching: Callable[[tuple[str, str | None, str], dict[str, Any]], bool]
                    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        seen = int(request.query.get("resourceVersion") or 0)
        while True:
            for version, key, kind, obj in self.history:
                if version > seen and matching(key, obj):
                    await response.write(json.dumps({"type": kind, "object": obj}).encode()
                                         + b"\n")
            seen = len(self.history)  # the resourceVersion of the latest change
            async with self.changed:
                await self.changed.wait_for(lambda last=seen: len(self.history) > last)


class ServerThread:
    """Runs the fake API server on its own event loop, in a thread, on 127.0.0.1."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.call(self._make_server)
        self.runner = web.AppRunner(self._app(), handler_cancellation=True)
        self.call(self.runner.setup)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.call(site.start)
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def _make_server(self) -> FakeApiServer:
        return FakeApiServer()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.server.handle)
        return app

    def call(self, make: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(WAIT_SECONDS)

    def stop(self) -> None:
        self.call(self.runner.cleanup)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_SECONDS)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    server = ServerThread()
    http(server, "POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
                  "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                  "users": [{"name": "tester", "user": {"token": "secret-token"}}],
                  "contexts": [{"name": "test", "context": {
                      "cluster": "fake", "user": "tester", "namespace": NAMESPACE}}]}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    yield server
    server.stop()


def http(server: ServerThread, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data, method=method,
                                     headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as response:
        return json.loads(response.read())


def eventually(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stored(server: ServerThread, path: str, name: str) -> dict[str, Any] | None:
    """An object as the fake server holds it (the prefix-free path of its collection)."""
    parts = path.strip("/").split("/")
    prefix_length = 2 if parts[0] == "api" else 3
    key = ("/".join(parts[:prefix_length]), parts[prefix_length + 1], parts[-1])
    return copy.deepcopy(server.server.objects.get(key, {}).get(name))


def job_phase(server: ServerThread) -> str | None:
    job = stored(server, JOBS, "livejournal") or {}
    return (job.get("status") or {}).get("phase")


def test_operator_runs_a_job_through_its_phases(api: ServerThread) -> None:
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    operator = KopfRunner(["run", "-m", "tessera_operator.handlers", "--standalone",
                           "--namespace", NAMESPACE], timeout=WAIT_SECONDS)
    with operator:
        uid = http(api, "POST", JOBS, job)["metadata"]["uid"]
        owner = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "EmbeddingJob",
                 "name": "livejournal", "uid": uid, "controller": True,
                 "blockOwnerDeletion": True}
        children = [(CORE + "/configmaps", "livejournal-config"),
                    (f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies",
                     "livejournal-isolation"),
                    (CORE + "/pods", "livejournal-trainer-0")]
        for path, name in children:
            child = eventually(lambda p=path, n=name: stored(api, p, n), f"{name} to be created")
            assert child["metadata"]["ownerReferences"] == [owner]
            assert child["metadata"]["labels"].items() >= job_labels("livejournal").items()
        eventually(lambda: job_phase(api) == "Pending", "phase Pending")

        pod = CORE + "/pods/livejournal-trainer-0/status"
        http(api, "PATCH", pod, {"status": {"phase": "Running", "containerStatuses": [
            {"name": "trainer", "state": {"running": {}}}]}}, "application/merge-patch+json")
        eventually(lambda: job_phase(api) == "Running", "phase Running")
        assert stored(api, JOBS, "livejournal")["status"]["readyPods"] == {"trainers": 1}

        http(api, "PATCH", pod, {"status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 0}}}]}},
            "application/merge-patch+json")
        eventually(lambda: job_phase(api) == "Succeeded", "phase Succeeded")
        events = ("api/v1", NAMESPACE, "events")
        eventually(lambda: {event.get("reason") for event in api.server.objects.get(
            events, {}).values()} >= {"PodsCreated", "TrainingFinished"},
                   "the Events of creation and success")
    assert operator.exception is None
    assert operator.exit_code == 0
