"""The test kubelet as a node of a real API server: it registers its Node and serves the logs of
its containers on a kubelet HTTPS endpoint, so that `pods/log` goes through kube-apiserver as
on a cluster.

The Node carries the labels and advertises the extended resources (a GPU) that the kubelet
schedules pods against. Its status gives 127.0.0.1 as its InternalIP and the endpoint's port as
`daemonEndpoints.kubeletEndpoint.Port`, which is where kube-apiserver connects (with its
`--kubelet-client-certificate`, checking our serving certificate against
`--kubelet-certificate-authority`). The endpoint answers
`GET /containerLogs/{namespace}/{pod}/{container}` with the log of the pod's latest container
(`tailLines` and `limitBytes` as a kubelet reads them) and refuses clients without a
certificate of the cluster's CA. With `follow=true` (what kube-apiserver passes on for
`kubectl logs -f`) it streams: the tail, then what the container writes, read from its log file
every `FOLLOW_POLL_SECONDS`, until the container exited and all of its log was sent (or a newer
container of the pod started, the endpoint was stopped, or the client hung up).

Log faults, for tests: `answer_logs_with(status)` makes the endpoint answer with an error
status (kube-apiserver passes 403 and 503 on), `stop_log_endpoint()` closes it (kube-apiserver
cannot connect and answers 500; the streams it was serving end), `start_log_endpoint()` opens
it again on the same port. Closing the listener leaves kube-apiserver's kept-alive connections
open, so requests that still come over them are answered 500 too, as kube-apiserver would
answer on a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web
from e2e.kube_objects import now
from e2e.kubelet import CALL_TIMEOUT_SECONDS, NODE_EXTENDED_RESOURCES, Kubelet, node_labels
from e2e.pki import KeyPair
from support.ports import free_port

MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
NODE_ADDRESS = "127.0.0.1"
FOLLOW_POLL_SECONDS = 0.1


class NodeKubelet(Kubelet):
    """A `Kubelet` that is a Node of the API server and serves its pods' logs."""

    def __init__(self, server: str, namespace: str, root: Path, node_env: Mapping[str, str],
                 client: ssl.SSLContext, serving: KeyPair, ca: Path,
                 node_name: str = "node-0") -> None:
        super().__init__(server, namespace, root, node_env, node_name, client)
        self.port = free_port()
        self._server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
        self._server_ssl.load_cert_chain(str(serving.certificate), str(serving.key))
        self._server_ssl.verify_mode = ssl.CERT_REQUIRED
        self._log_fault: int | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.log_requests = 0  # answered or refused, as kube-apiserver asked

    # --- the test's side ----------------------------------------------------------------------

    def answer_logs_with(self, status: int | None) -> None:
        """Answer log requests with this error status from now on (None: the log); the
        streams in progress end, as a kubelet that starts refusing drops its connections."""
        async def set_fault() -> None:
            self._log_fault = status

        self._on_loop(set_fault())

    def stop_log_endpoint(self) -> None:
        self._on_loop(self._close_endpoint())

    def start_log_endpoint(self) -> None:
        self._on_loop(self._open_endpoint())

    def _on_loop(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(CALL_TIMEOUT_SECONDS)

    # --- the node -----------------------------------------------------------------------------

    async def _register(self) -> None:
        if self._runner is None:
            app = web.Application()
            app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._serve_log)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await self._open_endpoint()
        await self._call("POST", "/api/v1/nodes", json={
            "apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.node_name,
                "labels": node_labels(self.node_name)}})
        moment = now()
        offered = {name: str(count) for name, count in NODE_EXTENDED_RESOURCES.items()}
        status = {"addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}],
                  "capacity": offered, "allocatable": offered,
                  "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "lastHeartbeatTime": moment,
                                  "lastTransitionTime": moment}]}
        await self._call("PATCH", f"/api/v1/nodes/{self.node_name}/status",
                         json={"status": status}, headers=MERGE_PATCH)

    async def _close_endpoint(self) -> None:
        """New connections are refused; the streams in progress see their site gone and end,
        as they would with a kubelet that went away."""
        site, self._site = self._site, None  # first: the streams in progress see it and end
        if site is not None:
            await site.stop()

    async def _open_endpoint(self) -> None:
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(self._runner, NODE_ADDRESS, self.port,
                                     ssl_context=self._server_ssl)
            await self._site.start()

    async def _serve_log(self, request: web.Request) -> web.StreamResponse:
        self.log_requests += 1
        if self._site is None:  # over a connection kept alive from before the endpoint closed
            return web.Response(status=500, text="log endpoint closed by the test")
        if self._log_fault is not None:
            return web.Response(status=self._log_fault, text="log fault injected by the test")
        if request.match_info["namespace"] != self.namespace:
            raise web.HTTPNotFound(text="no such pod on this node")
        pod = request.match_info["pod"]
        if not self._logs.get(pod):
            raise web.HTTPNotFound(text="container has not started")
        log = self._logs[pod][-1]
        tail = request.query.get("tailLines")
        lines = None if tail is None else int(tail)
        limit = request.query.get("limitBytes")
        left = None if limit is None else int(limit)
        if request.query.get("follow") in ("true", "1"):
            return await self._follow(request, pod, log, lines, left)
        return web.Response(body=_tail(log.read_bytes(), lines)[:left], content_type="text/plain")

    async def _follow(self, request: web.Request, pod: str, log: Path, lines: int | None,
                      left: int | None) -> web.StreamResponse:
        """Stream the container's log as it grows, as a kubelet does for `follow=true`;
        `limitBytes` bounds the whole stream."""
        site = self._site
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        read, first = 0, True
        with contextlib.suppress(ConnectionError):  # the client hung up while we wrote
            while True:
                if site is None or self._site is not site or self._log_fault is not None:
                    break  # refusing now: not one more byte, as a kubelet that went away
                running = self._writing(log)  # before reading: once exited, all is written
                with open(log, "rb") as file:
                    file.seek(read)
                    data = file.read()
                read += len(data)
                if first:
                    data, first = _tail(data, lines), False
                data = data[:left]
                if left is not None:
                    left -= len(data)
                if data:
                    await response.write(data)
                if not running or left == 0 or self._logs[pod][-1] != log or \
                        request.transport is None:
                    break
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
            await response.write_eof()
        return response

    async def _shutdown(self) -> None:
        await self._close_endpoint()  # the log streams end, so that cleanup need not wait
        await super()._shutdown()
        if self._runner is not None:
            await self._runner.cleanup()


def _tail(data: bytes, lines: int | None) -> bytes:
    """The last `lines` lines of a log (all of it for None), as `tailLines` asks."""
    if lines is None:
        return data
    return b"".join(data.splitlines(keepends=True)[-lines:] if lines else [])
