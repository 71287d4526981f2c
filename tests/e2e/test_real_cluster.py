"""The real control plane of `real_cluster` does what the tests rely on: RBAC refuses an
unknown identity, and kube-controller-manager collects the dependents of a deleted owner."""

from __future__ import annotations

import pytest
from e2e.kube_client import ApiError, KubeClient, eventually
from e2e.real_cluster import ControlPlane

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

GC_SECONDS = 60.0


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
