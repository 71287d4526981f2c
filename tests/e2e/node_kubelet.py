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
certificate of the cluster's CA.

Log faults, for tests: `answer_logs_with(status)` makes the endpoint answer with an error
status (kube-apiserver passes 403 and 503 on), `stop_log_endpoint()` closes it (kube-apiserver
cannot connect and answers 500), `start_log_endpoint()` opens it again on the same port.
"""

from __future__ import annotations

import asyncio
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
        """Answer log requests with this error status from now on (None: the log)."""
        async def set_fault() -> None:
            self._log_fault = status

        self._on_loop(set_fault())

    def stop_log_endpoint(self) -> None:
        async def close() -> None:
            if self._site is not None:
                await self._site.stop()
                self._site = None

        self._on_loop(close())

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

    async def _open_endpoint(self) -> None:
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(self._runner, NODE_ADDRESS, self.port,
                                     ssl_context=self._server_ssl)
            await self._site.start()

    async def _serve_log(self, request: web.Request) -> web.Response:
        self.log_requests += 1
        if self._log_fault is not None:
            return web.Response(status=self._log_fault, text="log fault injected by the test")
        if request.match_info["namespace"] != self.namespace:
            raise web.HTTPNotFound(text="no such pod on this node")
        logs = self.logs(request.match_info["pod"])
        if not logs:
            raise web.HTTPNotFound(text="container has not started")
        text = logs[-1]
        tail = request.query.get("tailLines")
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-int(tail):] if int(tail) else [])
        data = text.encode()
        limit = request.query.get("limitBytes")
        if limit is not None:
            data = data[:int(limit)]
        return web.Response(body=data, content_type="text/plain")

    async def _shutdown(self) -> None:
        await super()._shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
