"""A Kubernetes API server for tests: kmock's emulator with the semantics kopf and kubectl need.

`kmock.KubernetesEmulator` (0.8) serves discovery and keeps objects with their history;
`KubeEmulator` fills in what it lacks, with the rules of `kube_objects`: server-owned metadata
(uid, resourceVersion, generation, creationTimestamp), 409 on a duplicate, JSON patches whose
failed `test` answers 422, merge patches, PUT, the status subresource, lists with `kind`, label
and field selectors, watches that resume after a resourceVersion and stream JSON, the core
group discovered as `v1`, `/api/v1/namespaces` (a namespace must exist before objects are
created in it), CustomResourceDefinitions that register their resources (with the schema
checked and unknown fields pruned, or rejected under `fieldValidation=Strict`), finalizers,
graceful deletion of pods bound to a node (their kubelet finishes it), garbage collection by
ownerReferences, `pods/binding`, and `pods/log` from a source a kubelet registers (with
`tailLines`; with `follow=true`, streamed as it grows until the pod finished or is gone).

`ApiServer` runs one on 127.0.0.1 in a thread of its own; tests talk to it over HTTP (as
kubectl would, see `kube_client`) and read an object's whole history through `history`. A
test may break the route to the kubelet's logs (`fail_logs`: pods/log answers as an API
server does when the kubelet is unreachable or the caller may not read logs, and follow streams
end when the kubelet becomes unreachable) and count the reads the server answered (`reads`).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import copy
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import kmock
from e2e.kube_objects import (
    PatchRejected,
    apply_patch,
    custom_resources,
    deletable_now,
    json_schema,
    now,
    owner_uids,
    prune,
    same_content,
    secret_with_data,
    selected,
    stamp_new,
    stamp_update,
)
from kmock._internal import parsing as kmock_parsing

Key = tuple[kmock.resource, "str | None", str]
PODS = kmock.resource("", "v1", "pods")
NAMESPACES = kmock.resource("", "v1", "namespaces")
SECRETS = kmock.resource("", "v1", "secrets")
CRDS = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
DEFAULT_POD_GRACE_SECONDS = 30
KUBELET_PORT = 10250
START_TIMEOUT_SECONDS = 30.0
FOLLOW_POLL_SECONDS = 0.1
FINISHED = ("Succeeded", "Failed")


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    """kmock reads `/api/v1/namespaces[/NAME[/status]]` as a namespaced path and fails on the
    bare collection; namespaces are cluster-scoped objects like any other."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
            len(parts) <= 4 or (len(parts) == 5 and parts[4] in ("status", "finalize"))):
        return kmock_parsing.ParsedPath("", "v1", "namespaces", None,
                                        parts[3] if len(parts) > 3 else None,
                                        parts[4] if len(parts) > 4 else None)
    return _kmock_parse_path(path)


_kmock_parse_path = kmock_parsing.parse_path
kmock_parsing.parse_path = _parse_path


def _error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=status, reason=reason, message=message,
                                 details={"causes": [{"message": message}]})


def _log_fault(status: int, pod: dict[str, Any]) -> kmock.KubernetesError:
    """What a real API server answers for pods/log when it cannot give the log."""
    metadata = pod["metadata"]
    if status == 403:
        return _error(403, "Forbidden", f'pods "{metadata["name"]}" is forbidden: User '
                      '"system:serviceaccount:tessera-system:tessera" cannot get resource '
                      f'"pods/log" in API group "" in the namespace "{metadata["namespace"]}"')
    node = pod.get("status", {}).get("hostIP", "127.0.0.1")
    reason = {500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable"}.get(
        status, "InternalError")
    return _error(status, reason, f'Get "https://{node}:{KUBELET_PORT}/containerLogs/'
                  f'{metadata["namespace"]}/{metadata["name"]}": dial tcp {node}:'
                  f'{KUBELET_PORT}: connect: connection refused')


def _tail(text: str, lines: int | None) -> str:
    """The last `lines` lines of a log (all of it for None), as `tailLines` asks."""
    if lines is None:
        return text
    return "".join(text.splitlines(keepends=True)[-lines:] if lines else [])


@dataclass(frozen=True)
class Change:
    """One write, as watches replay it."""

    revision: int
    resource: kmock.resource
    kind: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    previous: dict[str, Any] | None


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """An in-memory Kubernetes API server (see the module docstring for what it does)."""

    # (namespace, pod name) -> the text of the pod's log, registered by a kubelet.
    log_sources: dict[tuple[str, str], Callable[[], str]] = attrs.field(factory=dict,
                                                                       init=False)
    # The status pods/log answers with instead of the log (None: the log), and how many
    # reads of each object (and of each pod's log) the server answered.
    log_fault: int | None = attrs.field(default=None, init=False)
    reads: collections.Counter[tuple[str, str, str]] = attrs.field(
        factory=collections.Counter, init=False)  # (plural, subresource, name)
    _revision: int = attrs.field(default=0, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _changes: list[Change] = attrs.field(factory=list, init=False)
    _changed: asyncio.Condition = attrs.field(factory=asyncio.Condition, init=False)
    # custom resource -> (its openAPIV3Schema, a validator of the same as JSON Schema)
    _schemas: dict[kmock.resource, tuple[Any, jsonschema.Draft4Validator]] = attrs.field(
        factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        with warnings.catch_warnings():  # kmock 0.8 reads its data with a deprecated call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()

    async def _handle(self, request: kmock.Request) -> Any:
        """Serve an object request with the API server's rules (discovery stays kmock's).

        kmock's own emulator merges every write into the stored object and then looks for a
        matching reaction, which means filtering every request seen so far: fine for a unit
        test, quadratic for a cluster that runs for minutes. Object requests are routed here
        directly instead."""
        serve = self._route(request)
        if serve is None:
            return await kmock.RawHandler._handle(self, request)
        answer = await serve(request)
        if not isinstance(answer, kmock.Response):
            answer = kmock.Response(payload=answer)
        return await answer(request)

    def _route(self, request: kmock.Request) -> Callable[[kmock.Request], Awaitable[Any]] | None:
        if request.resource is None or request.resource.plural is None:
            return None
        named = request.name is not None
        routes: dict[tuple[str, bool], Callable[[kmock.Request], Awaitable[Any]]] = {
            ("GET", False): self._serve_list, ("GET", True): self._serve_fetch,
            ("POST", False): self._serve_create, ("POST", True): self._serve_subresource,
            ("PATCH", True): self._serve_update, ("PUT", True): self._serve_replace,
            ("DELETE", True): self._serve_delete}
        if request.method == kmock.method.GET and request.params.get("watch") in ("true", "1"):
            return self._serve_watch
        if request.method == kmock.method.GET and request.subresource == "log":
            return self._serve_log
        found = routes.get((str(request.method.value), named))
        if found is None:
            raise _error(405, "MethodNotAllowed", f"{request.method.value} {request.url.path}")
        return found

    # --- reading ------------------------------------------------------------------------------

    async def _serve_version(self, request: kmock.Request) -> Any:
        found = await super()._serve_version(request)
        if request.resource is not None and request.resource.group == "":
            found["groupVersion"] = request.resource.version  # `v1`, not `/v1`
        return found

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        self._count(request)
        return self._current(self._key(request)) or self._not_found(request)

    async def _serve_log(self, request: kmock.Request) -> kmock.Response:
        self._count(request)
        pod = self._current(self._key(request)) or self._not_found(request)
        if self.log_fault is not None:
            raise _log_fault(self.log_fault, pod)
        source = self.log_sources.get((request.namespace or "", request.name or ""))
        if source is None:
            raise _error(400, "BadRequest", f"container of pod {request.name!r} has not "
                         "started")
        tail = request.params.get("tailLines")
        lines = None if tail is None else int(tail)
        if request.params.get("follow") in ("true", "1"):
            payload: Any = self._follow_log(self._key(request), pod["metadata"]["uid"], source,
                                            lines)
        else:
            payload = _tail(source(), lines).encode()
        return kmock.Response(headers={"Content-Type": "text/plain"}, payload=payload)

    async def _follow_log(self, key: Key, uid: str, source: Callable[[], str],
                          lines: int | None) -> AsyncIterator[bytes]:
        """The log as it grows (`kubectl logs -f`): the tail, then what the container writes,
        read every `FOLLOW_POLL_SECONDS`, until the pod finished, is gone or was replaced, and
        all of its log was sent. A newer container's log, the server stopping, or a log fault
        (the kubelet unreachable, or refusing: its streams in progress end too) end it
        sooner."""
        read, first = 0, True
        while True:
            pod = self._current(key)
            over = pod is None or pod["metadata"]["uid"] != uid or \
                pod.get("status", {}).get("phase") in FINISHED  # before reading: all is written
            cut = self._closing or self.log_fault is not None or \
                self.log_sources.get((key[1] or "", key[2])) is not source
            text = source()[read:]
            read += len(text)
            if first:
                text = _tail(text, lines)
            if text or first:
                yield text.encode()  # the first chunk sends the headers, even when empty
            first = False
            if over or cut:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)

    async def _serve_list(self, request: kmock.Request) -> Any:
        info = self._info(request)
        async with self._lock:
            items = [copy.deepcopy(obj) for key, obj in self._live(request.resource)
                     if request.namespace in (None, key[1]) and selected(obj, request.params)]
            revision = self._revision
        return {"apiVersion": self._api_version(request.resource), "kind": f"{info.kind}List",
                "metadata": {"resourceVersion": str(revision)}, "items": items}

    async def _serve_watch(self, request: kmock.Request) -> Any:
        self._info(request)
        return kmock.Response(headers={"Content-Type": "application/json"},
                              payload=self._watch(request))

    async def _watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        """Changes after `resourceVersion` (or every object first, without one), filtered."""
        since = request.params.get("resourceVersion") or "0"
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        async with self._lock:
            cursor = int(since) if since != "0" else self._revision
            initial = [] if since != "0" else [
                {"type": "ADDED", "object": copy.deepcopy(obj)}
                for key, obj in self._live(request.resource) if self._watched(request, obj)]
        yield b""  # the headers go out now, even if nothing happens for a while
        for event in initial:
            yield event
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while True:
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            try:
                async with self._changed:
                    await asyncio.wait_for(self._changed.wait_for(
                        lambda seen=cursor: self._revision > seen or self._closing), left)
            except asyncio.TimeoutError:
                return  # the server ends a watch after its timeoutSeconds
            if self._closing:
                return
            start = bisect.bisect_right(self._changes, cursor, key=lambda c: c.revision)
            for change in self._changes[start:]:
                cursor = change.revision
                event = self._event_for(request, change)
                if event is not None:
                    yield event

    def _event_for(self, request: kmock.Request, change: Change) -> dict[str, Any] | None:
        if change.resource != request.resource:
            return None
        now_in = self._watched(request, change.obj)
        was_in = change.previous is not None and self._watched(request, change.previous)
        if change.kind == "MODIFIED" and now_in != was_in:  # moved in or out of the selection
            return {"type": "ADDED" if now_in else "DELETED", "object": change.obj}
        return {"type": change.kind, "object": change.obj} if now_in else None

    def _watched(self, request: kmock.Request, obj: dict[str, Any]) -> bool:
        metadata = obj.get("metadata", {})
        return request.namespace in (None, metadata.get("namespace")) and \
            request.name in (None, metadata.get("name")) and selected(obj, request.params)

    # --- writing ------------------------------------------------------------------------------

    async def _serve_create(self, request: kmock.Request) -> Any:
        info = self._info(request)
        if not isinstance(request.data, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        namespace = request.namespace if info.namespaced else None
        async with self._lock:
            if namespace is not None and self._current((NAMESPACES, None, namespace)) is None:
                raise _error(404, "NotFound", f'namespaces "{namespace}" not found')
            obj = stamp_new(request.data, namespace=namespace, kind=info.kind or "",
                            api_version=self._api_version(request.resource),
                            revision=self._revision + 1)
            name = obj["metadata"].get("name")
            if not name:
                raise _error(422, "Invalid", "metadata.name: Required value")
            key = (request.resource, namespace, name)
            if self._current(key) is not None:
                raise _error(409, "AlreadyExists", f'{info.kind} "{name}" already exists')
            obj = self._admitted(request, self._initial_status(request.resource, info, obj))
            await self._store(key, "ADDED", obj)
            if request.resource == CRDS:
                self._register(obj)
        return kmock.Response(status=201, payload=obj)

    async def _serve_update(self, request: kmock.Request) -> Any:
        content_type = next((value for header, value in request.headers.items()
                             if header.lower() == "content-type"), "")
        async with self._lock:
            key = self._key(request)
            old = self._current(key) or self._not_found(request)
            try:
                new = apply_patch(old, request.data, content_type.split(";")[0].strip())
            except PatchRejected as problem:
                raise _error(422, "Invalid", f"the patch cannot be applied: {problem}") from None
            return await self._update(request, key, old, new)

    async def _serve_replace(self, request: kmock.Request) -> Any:
        if request.name is None or not isinstance(request.data, dict):
            raise _error(405, "MethodNotAllowed", "PUT replaces one named object")
        async with self._lock:
            key = self._key(request)
            old = self._current(key) or self._not_found(request)
            return await self._update(request, key, old, request.data)

    async def _serve_subresource(self, request: kmock.Request) -> Any:
        """`pods/NAME/binding`: what a scheduler does to give a pod a node."""
        if request.resource != PODS or request.subresource != "binding":
            raise _error(405, "MethodNotAllowed", f"POST {request.url.path}")
        async with self._lock:
            key = self._key(request)
            old = self._current(key) or self._not_found(request)
            node = (request.data or {}).get("target", {}).get("name")
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["nodeName"] = node
            await self._update(request, key, old, new)
        return kmock.Response(status=201, payload={"kind": "Status", "apiVersion": "v1",
                                                   "status": "Success", "code": 201})

    async def _serve_delete(self, request: kmock.Request) -> Any:
        options = request.data if isinstance(request.data, dict) else {}
        grace = request.params.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        uid = (options.get("preconditions") or {}).get("uid")
        async with self._lock:
            key = self._key(request)
            current = self._current(key) or self._not_found(request)
            if uid and uid != current["metadata"]["uid"]:
                raise _error(409, "Conflict", f"precondition failed: UID in precondition: "
                             f"{uid}, UID in object meta: {current['metadata']['uid']}")
            return await self._delete(key, None if grace is None else int(grace))

    async def _update(self, request: kmock.Request, key: Key, old: dict[str, Any],
                      new: dict[str, Any]) -> dict[str, Any]:
        """Store `new` as the next version of `old` (the lock is held)."""
        # A resourceVersion in the body is a precondition (a JSON patch has `test` for that).
        body = request.data if isinstance(request.data, dict) else {}
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified; please apply your "
                         "changes to the latest version and try again")
        info = self._info(request)
        updated = stamp_update(old, new, revision=self._revision + 1,
                               status_subresource="status" in info.subresources,
                               writing_status=request.subresource == "status")
        updated = self._admitted(request, updated)
        if same_content(old, updated):
            return old
        await self._store(key, "MODIFIED", updated, old)
        if deletable_now(updated):
            await self._remove(key, updated)
        return updated

    async def _delete(self, key: Key, grace: int | None) -> dict[str, Any]:
        """Delete now, or mark for deletion while finalizers or a kubelet have work to do."""
        obj = copy.deepcopy(self._current(key))
        metadata = obj["metadata"]
        bound_pod = key[0] == PODS and bool(obj.get("spec", {}).get("nodeName"))
        if metadata.get("deletionTimestamp"):
            if grace == 0 and not metadata.get("finalizers"):
                await self._remove(key, obj)
            return obj
        if bound_pod and grace is None:
            grace = obj["spec"].get("terminationGracePeriodSeconds",
                                    DEFAULT_POD_GRACE_SECONDS)
        if metadata.get("finalizers") or (bound_pod and grace):
            metadata["deletionTimestamp"] = now()
            if bound_pod and grace:
                metadata["deletionGracePeriodSeconds"] = grace
            previous = self._current(key)
            await self._store(key, "MODIFIED", obj, previous)
            return obj
        await self._remove(key, obj)
        return obj

    async def _remove(self, key: Key, obj: dict[str, Any]) -> None:
        """Remove the object and, in the background as Kubernetes does, what it owns."""
        await self._store(key, "DELETED", obj)
        uid = obj["metadata"].get("uid")
        dependents = [other for other, child in self._live() if uid in owner_uids(child)]
        for dependent in dependents:
            if self._current(dependent) is not None:
                await self._delete(dependent, None)

    async def _store(self, key: Key, kind: str, obj: dict[str, Any],
                     previous: dict[str, Any] | None = None) -> None:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        snapshot = copy.deepcopy(obj)
        if kind == "DELETED":
            self.objects[key].delete()
        elif key in self.objects:
            self.objects[key].history.append(snapshot)
        else:
            self.objects[key] = snapshot
        self._changes.append(Change(self._revision, key[0], kind, snapshot,
                                    copy.deepcopy(previous)))
        async with self._changed:
            self._changed.notify_all()

    # --- admission: status at creation, custom resource schemas -------------------------------

    def _initial_status(self, resource: kmock.resource, info: kmock.ResourceInfo,
                        obj: dict[str, Any]) -> dict[str, Any]:
        if "status" in info.subresources:
            obj.pop("status", None)  # a status is written through the subresource
        if resource == PODS:
            obj["status"] = {"phase": "Pending"}
        elif resource == NAMESPACES:
            obj["status"] = {"phase": "Active"}
        elif resource == CRDS:
            obj["status"] = {"conditions": [
                {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": now()}
                for kind in ("NamesAccepted", "Established")]}
        return obj

    def _register(self, crd: dict[str, Any]) -> None:
        for group, version, plural, info, schema in custom_resources(crd):
            resource = kmock.resource(group, version, plural)
            self.resources[resource] = kmock.ResourceInfo(**info)
            if schema is not None:
                self._schemas[resource] = (schema, jsonschema.Draft4Validator(json_schema(schema)))

    def _admitted(self, request: kmock.Request, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as stored: a Secret's stringData encoded; a custom resource checked
        against its CRD's schema, with unknown fields pruned (or, with
        `fieldValidation=Strict` as `kubectl apply` asks, rejected)."""
        if request.resource == SECRETS:
            return secret_with_data(obj)
        if request.resource not in self._schemas:
            return obj
        schema, validator = self._schemas[request.resource]
        body = {key: value for key, value in obj.items()
                if key not in ("apiVersion", "kind", "metadata")}
        kept, unknown = prune(body, schema)
        if unknown and request.params.get("fieldValidation") == "Strict":
            raise _error(422, "Invalid", "; ".join(f'unknown field "{path}"'
                                                   for path in unknown))
        admitted = {**obj, **kept}
        for key in set(body) - set(kept):
            admitted.pop(key)
        problems = sorted(validator.iter_errors({**admitted, "metadata": {}}),
                          key=lambda error: list(error.path))
        if problems:
            name = obj["metadata"].get("name")
            details = "; ".join(f"{'.'.join(map(str, error.path))}: Invalid value: "
                                f"{error.message}" for error in problems)
            raise _error(422, "Invalid", f'{obj.get("kind")} "{name}" is invalid: {details}')
        return admitted

    # --- lookups ------------------------------------------------------------------------------

    def _count(self, request: kmock.Request) -> None:
        plural = request.resource.plural if request.resource else ""
        self.reads[(plural or "", request.subresource or "", request.name or "")] += 1

    def _info(self, request: kmock.Request) -> kmock.ResourceInfo:
        if request.resource is None or request.resource not in self.resources:
            raise _error(404, "NotFound", f"the server could not find the requested resource "
                         f"({request.url.path})")
        return self.resources[request.resource]

    def _key(self, request: kmock.Request) -> Key:
        info = self._info(request)
        return (request.resource, request.namespace if info.namespaced else None,
                request.name or "")

    def _current(self, key: Key) -> dict[str, Any] | None:
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw

    def _live(self, resource: kmock.resource | None = None) -> list[tuple[Key, dict[str, Any]]]:
        return [(key, obj.raw) for key, obj in self.objects.items()
                if not obj.deleted and resource in (None, key[0])]

    def _not_found(self, request: kmock.Request) -> Any:
        kind = self._info(request).kind or ""
        raise _error(404, "NotFound", f'{kind.lower()}s "{request.name}" not found')

    def _api_version(self, resource: kmock.resource) -> str:
        return resource.version if resource.group == "" else \
            f"{resource.group}/{resource.version}"

    async def end_watches(self) -> None:
        """End every watch stream (a server shutting down waits for open requests)."""
        self._closing = True
        async with self._changed:
            self._changed.notify_all()

    def history(self, resource: kmock.resource, namespace: str | None,
                name: str) -> list[dict[str, Any] | None]:
        """Every version the object had (None where it was deleted), oldest first."""
        key = (resource, namespace, name)
        if key not in self.objects:
            return []
        return [None if version is None else copy.deepcopy(version.raw)
                for version in self.objects[key].history]


class ApiServer:
    """A `KubeEmulator` serving HTTP on 127.0.0.1, on its own event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kube-api",
                                        daemon=True)
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        self.emulator: KubeEmulator = self.call(self._start())
        self.url = str(self.emulator.url).rstrip("/")

    async def _start(self) -> KubeEmulator:
        emulator = await self._stack.enter_async_context(KubeEmulator())
        await self._stack.enter_async_context(kmock.Server(emulator))
        return emulator

    def call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the server's loop (where its state may be touched)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(
            START_TIMEOUT_SECONDS)

    def history(self, resource: kmock.resource, namespace: str | None,
                name: str) -> list[dict[str, Any] | None]:
        async def read() -> list[dict[str, Any] | None]:
            return self.emulator.history(resource, namespace, name)

        return self.call(read())

    def fail_logs(self, status: int | None) -> None:
        """Answer pods/log with this error status from now on (None: serve logs again); the
        log streams in progress end."""
        async def set_fault() -> None:
            self.emulator.log_fault = status

        self.call(set_fault())

    def publish_log(self, namespace: str, pod: str, log: Path) -> None:
        """Serve this file as the pod's log (what a kubelet does for its containers)."""
        async def register() -> None:
            self.emulator.log_sources[(namespace, pod)] = lambda: log.read_text(
                errors="replace")

        self.call(register())

    def reads(self, resource: kmock.resource, name: str, subresource: str = "") -> int:
        """How many GETs of the object (or of its `subresource`, such as `log`) were
        answered, successfully or not."""
        async def count() -> int:
            return self.emulator.reads[(resource.plural or "", subresource, name)]

        return self.call(count())

    def stop(self) -> None:
        self.call(self.emulator.end_watches())
        self.call(self._stack.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(START_TIMEOUT_SECONDS)
