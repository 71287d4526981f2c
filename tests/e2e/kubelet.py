"""A kubelet for tests: runs the pods of one namespace as local processes, through the API.

It watches the namespace's pods over HTTP like a node would, and schedules them as the only
node of the cluster: a pod that fits (its nodeSelector matches `NODE_LABELS`, its extended
resources such as `nvidia.com/gpu` are within `NODE_EXTENDED_RESOURCES`) is bound to this node
(`pods/binding`); one that does not gets the PodScheduled=False condition that kube-scheduler
writes (reason Unschedulable, `0/1 nodes are available: ...`) and stays unbound. A bound pod's
container is started in a sandbox (`pod_sandbox`, `pod_setup`) with its own 127.0.0.x address,
and its status is written back: Running with podIP and a ready container, then Succeeded or
Failed with the exit code and, for `FallbackToLogsOnError`, the log tail as termination
message. A pod marked for deletion gets SIGTERM, SIGKILL after its grace period (at most
`MAX_GRACE_SECONDS` here), and is then deleted for good. The container's output is the pod's
log: `publish_log` hands its file to whoever serves it (the emulator's pods/log, or the kubelet
endpoint of `node_kubelet`, which follows it while the container writing it runs). Lost
connections to the API server (a restarted kube-apiserver) are retried: the watch lists again,
and a status write is repeated until the server answers.

Tests may crash a container (`kill`), read every log a pod name had (`logs`), and leave pods
stuck terminating (`hold_deletions`: what a node whose kubelet is hung or cut off does, until
`release_deletions`). All of it runs on an event loop in a thread of its own; the public
methods are safe to call from the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from e2e.kube_objects import now
from e2e.pod_sandbox import sandbox_command
from e2e.pod_setup import ContainerConfigError, prepare

MAX_GRACE_SECONDS = 5.0
RETRY_SECONDS = 1.0
WATCH_SECONDS = 60
CALL_TIMEOUT_SECONDS = 30.0
TERMINATION_MESSAGE_LINES = 80
TERMINATION_MESSAGE_BYTES = 2048
FIRST_ADDRESS = 10  # pods get 127.0.0.10, 127.0.0.11...
# The node's labels (its pool is the one crds/examples/partitioned.yaml selects) and its
# extended resources (one GPU, advertised as the NVIDIA device plugin does; no pod of the tests
# uses it), against which pods are scheduled.
NODE_LABELS = {"kubernetes.io/os": "linux", "node-pool": "training",
               "nvidia.com/gpu.present": "true"}
NODE_EXTENDED_RESOURCES = {"nvidia.com/gpu": 1}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
# Hands the log file of a started container to what serves pods/log: (namespace, pod, file).
LogPublisher = Callable[[str, str, Path], None]


@dataclass
class Container:
    """A started container of a pod incarnation (one uid)."""

    name: str
    uid: str
    process: asyncio.subprocess.Process
    log: Path
    started_at: str
    exited: asyncio.Task[None] | None = None


class Kubelet:
    """Runs the pods of `namespace` (see the module docstring)."""

    def __init__(self, server: str, namespace: str, root: Path, node_env: Mapping[str, str],
                 node_name: str = "node-0", ssl_context: ssl.SSLContext | None = None,
                 publish_log: LogPublisher | None = None) -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context  # the CA and client certificate of an https server
        self.publish_log = publish_log
        self.namespace = namespace
        self.root = root
        self.node_env = dict(node_env)
        self.node_name = node_name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kubelet",
                                        daemon=True)
        self._containers: dict[str, Container] = {}  # by pod uid
        self._handled: set[str] = set()  # uids of pods started (or being started)
        self._terminating: set[str] = set()  # uids of pods being stopped for deletion
        self._unschedulable: set[str] = set()  # uids of pods reported as fitting no node
        self._held: list[dict[str, Any]] | None = None  # pods left terminating, when held
        self._tasks: set[asyncio.Task[None]] = set()
        self._addresses: dict[str, str] = {}
        self._logs: dict[str, list[Path]] = {}
        self._main: asyncio.Task[None] | None = None
        self.http: aiohttp.ClientSession  # opened by _run, on the kubelet's loop

    # --- the test's side ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        listed = threading.Event()
        self.loop.call_soon_threadsafe(self._begin, listed)
        if not listed.wait(CALL_TIMEOUT_SECONDS):
            raise RuntimeError("the kubelet could not list the pods")

    def _begin(self, listed: threading.Event) -> None:
        self._main = self.loop.create_task(self._run(listed))

    def stop(self) -> None:
        """Kill every container (their last status still written), then stop watching."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(
            CALL_TIMEOUT_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CALL_TIMEOUT_SECONDS)

    def kill(self, pod: str, signum: int = signal.SIGKILL) -> bool:
        """Signal the running container of a pod (False: it has none)."""
        async def send() -> bool:
            for container in self._containers.values():
                if container.name == pod and container.process.returncode is None:
                    try:
                        os.killpg(container.process.pid, signum)
                    except ProcessLookupError:  # exited; asyncio has not seen it yet
                        return False
                    return True
            return False

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result(CALL_TIMEOUT_SECONDS)

    def hold_deletions(self) -> None:
        """Leave pods marked for deletion running, as a node that does not answer does."""
        async def hold() -> None:
            self._held = []

        asyncio.run_coroutine_threadsafe(hold(), self.loop).result(CALL_TIMEOUT_SECONDS)

    def release_deletions(self) -> None:
        """Stop the held pods now, and later ones as they come."""
        async def release() -> None:
            held, self._held = self._held or [], None
            for pod in held:
                self._background(self._terminate(pod))

        asyncio.run_coroutine_threadsafe(release(), self.loop).result(CALL_TIMEOUT_SECONDS)

    def logs(self, pod: str) -> list[str]:
        """The log of every container a pod of this name ran, oldest first."""
        return [path.read_text(errors="replace") for path in list(self._logs.get(pod, []))]

    def _writing(self, log: Path) -> bool:
        """Whether a container that writes this log file still runs (on the kubelet's loop):
        a follower of the log (`node_kubelet`) reads on while one does."""
        return any(container.log == log and container.process.returncode is None
                   for container in self._containers.values())

    # --- watching -----------------------------------------------------------------------------

    async def _run(self, listed: threading.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CALL_TIMEOUT_SECONDS)
        connector = aiohttp.TCPConnector(ssl=self.ssl_context or True)
        async with aiohttp.ClientSession(self.server, timeout=timeout,
                                         connector=connector) as self.http:
            await self._register()
            while True:
                try:
                    await self._list_and_watch(listed)
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                    await asyncio.sleep(RETRY_SECONDS)  # the API server restarts: list again

    async def _register(self) -> None:
        """What a node does before it runs pods (nothing here; see `node_kubelet`)."""

    async def _list_and_watch(self, listed: threading.Event) -> None:
        pods = f"/api/v1/namespaces/{self.namespace}/pods"
        async with self.http.get(pods) as response:
            response.raise_for_status()
            found = await response.json()
        for pod in found["items"]:
            await self._on_event("ADDED", pod)
        listed.set()
        version = found["metadata"]["resourceVersion"]
        while True:
            version = await self._watch(pods, version)

    async def _watch(self, pods: str, version: str) -> str:
        params = {"watch": "true", "resourceVersion": version,
                  "timeoutSeconds": str(WATCH_SECONDS)}
        async with self.http.get(pods, params=params) as response:
            response.raise_for_status()
            async for line in response.content:
                if line.strip():
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                        raise aiohttp.ClientPayloadError(str(event["object"]))
                    version = event["object"]["metadata"]["resourceVersion"]
                    await self._on_event(event["type"], event["object"])
        return version

    async def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            await self._stop(uid, 0)
        elif pod["metadata"].get("deletionTimestamp"):
            if uid not in self._terminating:
                self._terminating.add(uid)
                if self._held is not None:
                    self._held.append(pod)
                else:
                    self._background(self._terminate(pod))
        elif not pod["spec"].get("nodeName"):
            await self._schedule(pod)
        elif pod["spec"]["nodeName"] == self.node_name and uid not in self._handled and \
                pod.get("status", {}).get("phase", "Pending") == "Pending":
            self._handled.add(uid)
            try:
                await self._start(pod)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                self._handled.discard(uid)  # the API server went away: start it once back
                raise

    # --- the pod lifecycle --------------------------------------------------------------------

    async def _schedule(self, pod: dict[str, Any]) -> None:
        """Bind the pod here, or say once why it cannot be (kube-scheduler retries such pods
        when the cluster changes; this node never does)."""
        problems = unfit_reasons(pod, node_labels(self.node_name))
        if not problems:
            await self._bind(pod)
        elif pod["metadata"]["uid"] not in self._unschedulable:
            self._unschedulable.add(pod["metadata"]["uid"])
            message = f"0/1 nodes are available: {', '.join(problems)}."
            await self._write_status(pod, {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastTransitionTime": now()}]})

    async def _bind(self, pod: dict[str, Any]) -> None:
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": pod["metadata"]["name"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}}
        await self._call("POST", self._pod_path(pod) + "/binding", json=binding)

    async def _start(self, pod: dict[str, Any]) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        stage = self.root / f"{name}-{uid[:8]}"
        stage.mkdir(parents=True, exist_ok=True)
        ip = self._address(pod)
        try:
            sandbox = await prepare(pod, ip, self._address, self._read, stage, self.node_env)
        except ContainerConfigError as problem:
            await self._write_status(pod, _waiting(pod, "CreateContainerConfigError",
                                                   str(problem)))
            self._handled.discard(uid)
            self._background(self._retry(pod))
            return
        log = stage / "container.log"
        with open(log, "wb") as output:
            process = await asyncio.create_subprocess_exec(
                *sandbox_command(sandbox), stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        self._logs.setdefault(name, []).append(log)
        if self.publish_log is not None:
            self.publish_log(self.namespace, name, log)
        container = Container(name, uid, process, log, now())
        self._containers[uid] = container
        await self._write_status(pod, _running(pod, ip, container.started_at))
        container.exited = asyncio.create_task(self._wait(pod, container))

    async def _retry(self, pod: dict[str, Any]) -> None:
        """Start a pod again once what it lacked may be there (a Secret created later)."""
        await asyncio.sleep(RETRY_SECONDS)
        current = await self._read(self._pod_path(pod))
        if current is not None and current["metadata"]["uid"] == pod["metadata"]["uid"]:
            await self._on_event("MODIFIED", current)

    async def _wait(self, pod: dict[str, Any], container: Container) -> None:
        code = await container.process.wait()
        exit_code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N
        message = ""
        policy = pod["spec"]["containers"][0].get("terminationMessagePolicy")
        if exit_code != 0 and policy == "FallbackToLogsOnError":
            message = _log_tail(container.log.read_text(errors="replace"))
        ip = self._address(pod)
        await self._write_status(pod, _terminated(pod, ip, container.started_at, exit_code,
                                                  message))
        self._containers.pop(container.uid, None)

    async def _terminate(self, pod: dict[str, Any]) -> None:
        """Stop a pod marked for deletion, then delete it for good."""
        grace = min(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0),
                    MAX_GRACE_SECONDS)
        await self._stop(pod["metadata"]["uid"], grace)
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}
        await self._call("DELETE", self._pod_path(pod), json=options)

    async def _stop(self, uid: str, grace: float) -> None:
        container = self._containers.get(uid)
        if container is None or container.exited is None:
            return
        with contextlib.suppress(ProcessLookupError):  # it may have exited already
            os.killpg(container.process.pid, signal.SIGTERM if grace else signal.SIGKILL)
            os.killpg(container.process.pid, signal.SIGCONT)  # a paused one gets it too
        done, _ = await asyncio.wait([container.exited], timeout=grace or None)
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(container.process.pid, signal.SIGKILL)
            await container.exited

    async def _shutdown(self) -> None:
        await self._kill_all()
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main

    async def _kill_all(self) -> None:
        for container in list(self._containers.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(container.process.pid, signal.SIGKILL)
            await container.process.wait()
        await asyncio.gather(*self._tasks, *(container.exited for container in
                                             self._containers.values() if container.exited),
                             return_exceptions=True)

    def _background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- API ----------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, **options: Any) -> int:
        """A write, repeated while the API server cannot be reached or is not ready (5xx);
        its status once it answered (a 404 or 409 is the answer: nothing to redo)."""
        while True:
            try:
                async with self.http.request(method, path, **options) as response:
                    if response.status < 500:
                        return response.status
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(RETRY_SECONDS)

    async def _read(self, path: str) -> dict[str, Any] | None:
        async with self.http.get(path) as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            return await response.json()

    async def _write_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Replace the status of this incarnation of the pod (not of a successor)."""
        patch = [{"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
                 {"op": "add", "path": "/status", "value": status}]
        # 404 or 422: the pod is gone or replaced, and its status with it
        await self._call("PATCH", self._pod_path(pod) + "/status", data=json.dumps(patch),
                         headers=JSON_PATCH)

    def _pod_path(self, pod: dict[str, Any]) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}"

    def _address(self, pod: dict[str, Any]) -> str:
        """The pod's address: fixed per pod name, so a Service name resolves the same for
        pods created later."""
        name = pod["metadata"]["name"]
        if name not in self._addresses:
            self._addresses[name] = f"127.0.0.{FIRST_ADDRESS + len(self._addresses)}"
        return self._addresses[name]


# --- scheduling -------------------------------------------------------------------------------

def node_labels(node_name: str) -> dict[str, str]:
    return {**NODE_LABELS, "kubernetes.io/hostname": node_name}


def unfit_reasons(pod: dict[str, Any], labels: Mapping[str, str]) -> list[str]:
    """Why this node cannot take the pod, in kube-scheduler's words (empty: it fits). Only
    node labels and extended resources are checked: the node is this machine, whose CPU and
    memory every pod shares."""
    reasons = []
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in sorted(wanted.items()):
            if "/" in name and int(quantity) > NODE_EXTENDED_RESOURCES.get(name, 0):
                reasons.append(f"1 Insufficient {name}")
    selector = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        reasons.append("1 node(s) didn't match node selector")
    return reasons


# --- pod status -------------------------------------------------------------------------------

def _conditions(ready: bool, reason: str | None = None) -> list[dict[str, Any]]:
    moment = now()
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": moment},
                  {"type": "Initialized", "status": "True", "lastTransitionTime": moment}]
    for kind in ("ContainersReady", "Ready"):
        condition = {"type": kind, "status": "True" if ready else "False",
                     "lastTransitionTime": moment}
        if reason:
            condition["reason"] = reason
        conditions.append(condition)
    return conditions


def _container_status(pod: dict[str, Any], state: dict[str, Any], ready: bool) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {"name": container["name"], "image": container.get("image", ""), "imageID": "",
            "ready": ready, "started": ready, "restartCount": 0, "state": state}


def _running(pod: dict[str, Any], ip: str, started_at: str) -> dict[str, Any]:
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
            "startTime": started_at, "conditions": _conditions(True),
            "containerStatuses": [_container_status(
                pod, {"running": {"startedAt": started_at}}, True)]}


def _terminated(pod: dict[str, Any], ip: str, started_at: str, exit_code: int,
                message: str) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                  "startedAt": started_at, "finishedAt": now()}
    if message:
        terminated["message"] = message
    return {**_running(pod, ip, started_at), "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": _conditions(False, "PodCompleted"),
            "containerStatuses": [_container_status(pod, {"terminated": terminated}, False)]}


def _waiting(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    return {"phase": "Pending", "conditions": _conditions(False, "ContainersNotReady"),
            "containerStatuses": [_container_status(
                pod, {"waiting": {"reason": reason, "message": message}}, False)]}


def _log_tail(text: str) -> str:
    """What Kubernetes keeps of a log as termination message: 80 lines, 2 KiB at most."""
    tail = "".join(text.splitlines(keepends=True)[-TERMINATION_MESSAGE_LINES:])
    return tail.encode()[-TERMINATION_MESSAGE_BYTES:].decode(errors="ignore")
