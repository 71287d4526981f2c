"""What the end-to-end tests ask of the API server, answered for a real one: the versions an
object had and how often it was read (from kube-apiserver's audit log), and log faults (from
the node's kubelet endpoint, which is where kube-apiserver gets pod logs).

The emulator (`kube_api.ApiServer`) answers the same three questions from its own state; a
`Cluster` works with either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import kmock
from e2e.node_kubelet import NodeKubelet
from e2e.real_cluster import ControlPlane

ENDPOINT_DOWN = 500  # what kube-apiserver answers when it cannot connect to the kubelet


@dataclass
class RealApi:
    plane: ControlPlane
    kubelet: NodeKubelet

    @property
    def url(self) -> str:
        return self.plane.url

    def _events(self) -> list[dict[str, Any]]:
        path = self.plane.audit_log
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.strip()]

    def history(self, resource: kmock.resource, namespace: str | None,
                name: str) -> list[dict[str, Any] | None]:
        """Every version the object was written as, oldest first (in resourceVersion order:
        the order etcd committed them in)."""
        versions: dict[int, dict[str, Any]] = {}
        for event in self._events():
            ref, answer = event.get("objectRef") or {}, event.get("responseObject") or {}
            if (ref.get("resource"), ref.get("namespace"), ref.get("name")) == (
                    resource.plural, namespace, name) and \
                    answer.get("kind") not in (None, "Status") and \
                    event["responseStatus"]["code"] < 300:
                versions[int(answer["metadata"]["resourceVersion"])] = answer
        return [versions[version] for version in sorted(versions)]

    def reads(self, resource: kmock.resource, name: str, subresource: str = "") -> int:
        """How many GETs of the object (or of its `subresource`, such as `log`) it answered,
        successfully or not."""
        return sum(1 for event in self._events()
                   if event["verb"] == "get" and event["stage"] == "ResponseComplete"
                   and (event["objectRef"].get("resource"), event["objectRef"].get("name"),
                        event["objectRef"].get("subresource", "")) == (
                            resource.plural, name, subresource))

    def creations(self, resource: kmock.resource, namespace: str) -> list[str]:
        """The names of the objects created (answered 201), in order."""
        return [event["objectRef"]["name"] if event["objectRef"].get("name")
                else event["responseObject"]["metadata"]["name"]
                for event in self._events()
                if event["verb"] == "create" and event["stage"] == "ResponseComplete"
                and event["responseStatus"]["code"] == 201
                and event["objectRef"].get("resource") == resource.plural
                and not event["objectRef"].get("subresource")
                and event["objectRef"].get("namespace") == namespace]

    def fail_logs(self, status: int | None) -> None:
        """pods/log answers with this status from now on (None: the log again): 500 by closing
        the kubelet's endpoint, others by the endpoint answering them; either way the log
        streams in progress end."""
        if status == ENDPOINT_DOWN:
            self.kubelet.stop_log_endpoint()
        else:
            self.kubelet.start_log_endpoint()
            self.kubelet.answer_logs_with(status)
