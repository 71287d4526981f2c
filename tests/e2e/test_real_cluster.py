"""The real control plane of `real_cluster` does what the tests rely on: RBAC refuses an
unknown identity, kube-controller-manager collects the dependents of a deleted owner, and
kube-apiserver streams a followed pod log (`kubectl logs -f`) from the kubelet endpoint of
`node_kubelet`."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from e2e.kube_client import ApiError, KubeClient, eventually
from e2e.node_kubelet import NODE_ADDRESS, NodeKubelet
from e2e.real_cluster import ControlPlane

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

GC_SECONDS = 60.0
START_SECONDS = 30.0


def test_rbac_refuses_a_user_without_bindings(control_plane: ControlPlane) -> None:
    stranger = KubeClient(control_plane.url, "default", control_plane.ssl_context(
        control_plane.pki.client("stranger")))
    with pytest.raises(ApiError) as refused:
        stranger.list("v1", "ConfigMap")
    assert refused.value.status == 403


def test_deleting_an_owner_deletes_its_dependents(control_plane: ControlPlane) -> None:
    kube = control_plane.client("default")
    owner = kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"]}]}})
    kube.delete("v1", "ConfigMap", "owner")
    eventually(lambda: kube.get("v1", "ConfigMap", "dependent") is None,
               "the garbage collector to delete the dependent", GC_SECONDS)


def test_a_followed_pod_log_streams_new_lines_until_the_container_exits(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    go = tmp_path / "go"  # the container logs its last line once the test creates this
    kubelet = NodeKubelet(control_plane.url, "default", tmp_path / "node", {},
                          control_plane.ssl_context(control_plane.admin),
                          control_plane.pki.serving("node-0", [NODE_ADDRESS]),
                          control_plane.pki.ca.certificate)
    kubelet.start()
    try:
        kube = control_plane.client("default")
        kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "followed"},
                    "spec": {"automountServiceAccountToken": False, "containers": [{
                        "name": "main", "image": "busybox", "command": [
                            "sh", "-c", f"echo one; echo two; until [ -e {go} ]; do "
                            "sleep 0.05; done; echo three"]}]}})
        eventually(lambda: "two" in "".join(kubelet.logs("followed")),
                   "the container to log", START_SECONDS)
        path = kube.path("v1", "Pod", "followed") + "/log"
        url = f"{control_plane.url}{path}?follow=true&tailLines=1"
        context = control_plane.ssl_context(control_plane.admin)
        with urllib.request.urlopen(url, timeout=10, context=context) as cut:
            assert cut.readline() == b"two\n"
            kubelet.stop_log_endpoint()
            assert cut.read() == b""  # the node went away, and its streams with it
        kubelet.start_log_endpoint()

        # The tail comes first, so the line written after it arrived came while following.
        with urllib.request.urlopen(url, timeout=10, context=context) as followed:
            assert followed.readline() == b"two\n"
            go.touch()
            assert followed.read() == b"three\n"  # and the stream ends: the container exited
        assert kube.request("GET", path, params={"tailLines": "2"}) == "two\nthree\n"

        kubelet.answer_logs_with(503)  # a fault answers a follow request at once
        with pytest.raises(ApiError) as refused:
            kube.request("GET", path, params={"follow": "true"})
        assert refused.value.status == 503
    finally:
        kubelet.stop()
