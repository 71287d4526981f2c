"""The test API server behaves as the Kubernetes API does where kopf, the kubelet and the
operator rely on it (each test is one of the gaps `kube_api` fills in kmock's emulator)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.cluster import JOB_API, JOB_KIND, NAMESPACE, REPO, start_api
from e2e.kube_api import ApiServer
from e2e.kube_client import ApiError, KubeClient
from e2e.kube_objects import labels_match

JSON_PATCH = "application/json-patch+json"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ApiServer, KubeClient]]:
    api, kube = start_api()
    try:
        yield api, kube
    finally:
        api.stop()


@pytest.fixture
def kube(served: tuple[ApiServer, KubeClient]) -> KubeClient:
    return served[1]


def config_map(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}, "data": {"key": "value"}}


def test_created_objects_get_server_metadata_and_duplicates_conflict(kube: KubeClient) -> None:
    created = kube.apply(config_map("stamped"))
    metadata = created["metadata"]
    assert metadata["namespace"] == NAMESPACE and len(metadata["uid"]) == 36
    assert int(metadata["resourceVersion"]) > 0 and metadata["creationTimestamp"]
    with pytest.raises(ApiError) as duplicate:
        kube.apply(config_map("stamped"))
    assert duplicate.value.status == 409


def test_discovery_and_lists_look_like_kubernetes(kube: KubeClient) -> None:
    assert kube.request("GET", "/api/v1")["groupVersion"] == "v1"
    namespaces = kube.request("GET", "/api/v1/namespaces")
    assert namespaces["kind"] == "NamespaceList"
    assert NAMESPACE in [item["metadata"]["name"] for item in namespaces["items"]]
    assert kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}")["kind"] == "Namespace"
    resources = kube.request("GET", "/apis/tessera.dev/v1alpha1")["resources"]
    assert {(r["name"], r["namespaced"]) for r in resources} >= {
        ("embeddingjobs", True), ("embeddingjobs/status", True)}
    with pytest.raises(ApiError) as missing:
        kube.apply({**config_map("orphan"), "metadata": {"name": "orphan",
                                                          "namespace": "absent"}})
    assert missing.value.status == 404


def test_a_failed_json_patch_test_is_422_and_a_passing_one_applies(kube: KubeClient) -> None:
    created = kube.apply(config_map("patched"))
    path = kube.path("v1", "ConfigMap", "patched")
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
             {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]
    with pytest.raises(ApiError) as rejected:
        kube.request("PATCH", path, stale, content_type=JSON_PATCH)
    assert rejected.value.status == 422
    current = [{**stale[0], "value": created["metadata"]["resourceVersion"]}, stale[1]]
    patched = kube.request("PATCH", path, current, content_type=JSON_PATCH)
    assert patched["metadata"]["finalizers"] == ["x"]
    assert int(patched["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"])


def test_the_status_subresource_and_generation(kube: KubeClient) -> None:
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    job["metadata"]["name"] = "generations"
    created = kube.apply(job)
    assert created["metadata"]["generation"] == 1 and "status" not in created
    written = kube.patch(JOB_API, JOB_KIND, "generations", {"status": {"phase": "Running"},
                                                           "spec": {"image": "ignored"}},
                         subresource="status")
    assert written["status"] == {"phase": "Running"}
    assert written["spec"]["image"] == job["spec"]["image"]
    assert written["metadata"]["generation"] == 1
    edited = kube.patch(JOB_API, JOB_KIND, "generations", {"spec": {"image": "new"},
                                                          "status": {"phase": "Failed"}})
    assert edited["metadata"]["generation"] == 2 and edited["status"] == {"phase": "Running"}
    pruned = kube.patch(JOB_API, JOB_KIND, "generations", {"status": {"invented": 1}},
                        subresource="status")
    assert "invented" not in pruned["status"]  # unknown fields are pruned, as Kubernetes does


def test_watches_resume_after_a_resource_version_and_stream_json(
        served: tuple[ApiServer, KubeClient], kube: KubeClient) -> None:
    api, _ = served
    since = kube.apply(config_map("watched-1", app="watched"))["metadata"]["resourceVersion"]
    kube.apply(config_map("watched-2", app="watched"))
    kube.apply(config_map("unwatched", app="other"))
    kube.delete("v1", "ConfigMap", "watched-1")
    url = (f"{api.url}{kube.path('v1', 'ConfigMap')}?watch=true&resourceVersion={since}"
           "&labelSelector=app%3Dwatched&timeoutSeconds=1")
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers.get_content_type() == "application/json"
        events = [json.loads(line) for line in response]
    assert [(event["type"], event["object"]["metadata"]["name"]) for event in events] == [
        ("ADDED", "watched-2"), ("DELETED", "watched-1")]


def owned_by(manifest: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["ownerReferences"] = [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return manifest


def test_deleting_an_owner_collects_its_dependents(kube: KubeClient) -> None:
    owner = kube.apply(config_map("owner"))
    child = kube.apply(owned_by(config_map("owned"), owner))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "owned-secret"},
              "stringData": {"token": "abc"}}
    assert kube.apply(owned_by(secret, child))["data"] == {"token": "YWJj"}  # encoded
    kube.delete("v1", "ConfigMap", "owner")
    assert kube.get("v1", "ConfigMap", "owned") is None
    assert kube.get("v1", "Secret", "owned-secret") is None


def test_a_bound_pod_is_deleted_gracefully_and_a_finalizer_holds_an_object(
        kube: KubeClient) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "graceful"},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    assert kube.apply(pod)["status"] == {"phase": "Pending"}
    binding = {"apiVersion": "v1", "kind": "Binding", "target": {"kind": "Node",
                                                                 "name": "node-0"}}
    kube.request("POST", kube.path("v1", "Pod", "graceful") + "/binding", binding)
    kube.delete("v1", "Pod", "graceful")
    marked = kube.get("v1", "Pod", "graceful")
    assert marked["metadata"]["deletionTimestamp"]  # its kubelet has to stop it first
    with pytest.raises(ApiError):
        kube.delete("v1", "Pod", "graceful", gracePeriodSeconds=0,
                    preconditions={"uid": "someone-else"})
    kube.delete("v1", "Pod", "graceful", gracePeriodSeconds=0)
    assert kube.get("v1", "Pod", "graceful") is None

    held = config_map("held")
    held["metadata"]["finalizers"] = ["example.com/cleanup"]
    kube.apply(held)
    kube.delete("v1", "ConfigMap", "held")
    assert kube.get("v1", "ConfigMap", "held")["metadata"]["deletionTimestamp"]
    kube.patch("v1", "ConfigMap", "held", {"metadata": {"finalizers": None}})
    assert kube.get("v1", "ConfigMap", "held") is None


def test_pod_logs_come_from_the_registered_source(
        served: tuple[ApiServer, KubeClient], kube: KubeClient) -> None:
    api, _ = served
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "logging"},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    path = kube.path("v1", "Pod", "logging") + "/log"
    with pytest.raises(ApiError) as not_started:
        kube.request("GET", path)
    assert not_started.value.status == 400
    api.emulator.log_sources[(NAMESPACE, "logging")] = lambda: "one\ntwo\nthree\n"
    assert kube.request("GET", path, params={"tailLines": "2"}) == "two\nthree\n"
    assert kube.get("v1", "Pod", "logging")["kind"] == "Pod"  # JSON again after text


def test_a_followed_pod_log_streams_new_lines_until_the_pod_finished(
        served: tuple[ApiServer, KubeClient], kube: KubeClient, tmp_path: Path) -> None:
    api, _ = served
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "followed"},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    log = tmp_path / "container.log"
    log.write_text("one\ntwo\n")
    api.publish_log(NAMESPACE, "followed", log)
    url = f"{api.url}{kube.path('v1', 'Pod', 'followed')}/log?follow=true&tailLines=1"
    # The tail comes first, so lines written after it arrived were written after the follow
    # began, whatever the thread timing.
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.readline() == b"two\n"
        with log.open("a") as output:
            output.write("three\n")
        assert response.readline() == b"three\n"
        with log.open("a") as output:
            output.write("four\n")
        kube.patch("v1", "Pod", "followed", {"status": {"phase": "Succeeded"}},
                   subresource="status")
        assert response.read() == b"four\n"  # what is left, then the stream ends

    api.fail_logs(503)  # a fault answers a follow request at once
    try:
        with pytest.raises(ApiError) as refused:
            kube.request("GET", kube.path("v1", "Pod", "followed") + "/log",
                         params={"follow": "true"})
        assert refused.value.status == 503
    finally:
        api.fail_logs(None)


def test_a_watch_sees_changes_made_after_it_started(
        served: tuple[ApiServer, KubeClient], kube: KubeClient) -> None:
    api, _ = served
    url = f"{api.url}{kube.path('v1', 'ConfigMap')}?watch=true&fieldSelector=" \
          "metadata.name%3Dlive&timeoutSeconds=5"
    # The server sends the headers once it has taken its cursor, so changes made after
    # urlopen returns are after the watch started, whatever the thread timing.
    with urllib.request.urlopen(url, timeout=10) as response:
        kube.apply(config_map("live"))
        kube.patch("v1", "ConfigMap", "live", {"data": {"key": "changed"}})
        seen = [json.loads(response.readline())["type"] for _ in range(2)]
    assert seen == ["ADDED", "MODIFIED"]


@pytest.mark.parametrize(("selector", "matches"), [
    ("app=web", True), ("app==web", True), ("app!=web", False), ("tier", True),
    ("!tier", False), ("app in (db, web)", True), ("app notin (db,web)", False),
    ("app=web,tier=front", True), ("app=web,tier=back", False), ("", True),
])
def test_label_selectors(selector: str, matches: bool) -> None:
    assert labels_match({"app": "web", "tier": "front"}, selector) is matches
