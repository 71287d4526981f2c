"""The operator's handlers over HTTP: kopf runs them in-process against the test API server.

The API server is the end-to-end tests' (`e2e.kube_api`, kmock's emulator with the API's
semantics). Here the test plays the user and the kubelet by hand, with no processes: it applies
the minimal example job, moves the trainer pod through its phases by writing its status, serves
a log for it, and watches the job's status, children and Events follow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.cluster import JOB_API, JOB_KIND, JOBS, NAMESPACE, REPO, start_api, write_kubeconfig
from e2e.kube_api import ApiServer
from e2e.kube_client import KubeClient, eventually
from kopf.testing import KopfRunner

from tessera_operator import handlers
from tessera_operator.labels import job_labels

WAIT_SECONDS = 30.0
TRAINER = "livejournal-trainer-0"
PROGRESS = {"time": 1740830400.0, "progress": "train", "done": 50.0, "total": 100,
            "rate": 1234.5, "epoch": "3/10", "loss": 0.25}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ApiServer,
                                                                          KubeClient]]:
    server, kube = start_api()
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(server.url, tmp_path / "config")))
    try:
        yield server, kube
    finally:
        server.stop()


def phase(kube: KubeClient) -> str | None:
    return ((kube.get(JOB_API, JOB_KIND, "livejournal") or {}).get("status") or {}).get("phase")


def set_trainer(kube: KubeClient, status: dict[str, Any]) -> None:
    kube.patch("v1", "Pod", TRAINER, {"status": status}, subresource="status")


def status_with_progress(kube: KubeClient) -> dict[str, Any] | None:
    """The job's status once it shows what the trainer reported (None: not yet)."""
    status = kube.get(JOB_API, JOB_KIND, "livejournal")["status"]
    return status if "updateTime" in (status.get("progress") or {}) else None


def test_operator_runs_a_job_through_its_phases(api: tuple[ApiServer, KubeClient]) -> None:
    server, kube = api
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    operator = KopfRunner(["run", "-m", "tessera_operator.handlers", "--standalone",
                           "--namespace", NAMESPACE], timeout=WAIT_SECONDS)
    with operator:
        uid = kube.apply(job)["metadata"]["uid"]
        owner = {"apiVersion": JOB_API, "kind": JOB_KIND, "name": "livejournal", "uid": uid,
                 "controller": True, "blockOwnerDeletion": True}
        children = [("v1", "ConfigMap", "livejournal-config"),
                    ("networking.k8s.io/v1", "NetworkPolicy", "livejournal-isolation"),
                    ("v1", "Pod", TRAINER)]
        for api_version, kind, name in children:
            child = eventually(lambda a=api_version, k=kind, n=name: kube.get(a, k, n),
                               f"{name} to be created", WAIT_SECONDS)
            assert child["metadata"]["ownerReferences"] == [owner]
            assert child["metadata"]["labels"].items() >= job_labels("livejournal").items()
        eventually(lambda: phase(kube) == "Pending", "phase Pending", WAIT_SECONDS)

        server.emulator.log_sources[(NAMESPACE, TRAINER)] = lambda: json.dumps(PROGRESS) + "\n"
        set_trainer(kube, {"phase": "Running", "containerStatuses": [
            {"name": "trainer", "state": {"running": {}}}]})
        eventually(lambda: phase(kube) == "Running", "phase Running", WAIT_SECONDS)
        # The log is followed from the moment the pod runs: its record may reach the status
        # in the reconcile after the one that wrote Running.
        status = eventually(lambda: status_with_progress(kube), "the trainer's progress",
                            WAIT_SECONDS)
        assert status["readyPods"] == {"trainers": 1}
        assert (status["progress"]["epochs"], status["progress"]["percentComplete"],
                status["progress"]["edgesPerSecond"]) == ("3/10", "50%", 1234.5)

        set_trainer(kube, {"phase": "Succeeded", "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 0}}}]})
        eventually(lambda: phase(kube) == "Succeeded", "phase Succeeded", WAIT_SECONDS)
        eventually(lambda: {event.get("reason") for event in kube.list("v1", "Event")} >= {
            "PodsCreated", "TrainingFinished"}, "the Events of creation and success",
                   WAIT_SECONDS)
        posted = kube.list("v1", "Event")
        assert {(event["reason"], event["action"]) for event in posted} >= {
            ("PodsCreated", "Created"), ("TrainingFinished", "Succeeded")}
        assert {(event["reportingComponent"], event["source"]["component"])
                for event in posted} == {("tessera-operator", "tessera-operator")}
        assert {event["involvedObject"]["uid"] for event in posted} == {uid}
    assert operator.exception is None
    assert operator.exit_code == 0


def test_suspended_and_failed_jobs_cost_nothing_between_events(
        api: tuple[ApiServer, KubeClient]) -> None:
    """No reads while nothing happens to an idle job (each was read every 10 s); an edit
    still wakes it at once."""
    server, kube = api
    suspended = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    suspended["spec"]["runPolicy"] = {"suspend": True}
    failed = json.loads(json.dumps(suspended))
    failed["metadata"]["name"] = "broken"
    failed["spec"]["runPolicy"] = {}
    failed["spec"]["config"]["relations"][0]["lhs"] = "nobody"  # refused by the operator
    operator = KopfRunner(["run", "-m", "tessera_operator.handlers", "--standalone",
                           "--namespace", NAMESPACE], timeout=WAIT_SECONDS)
    with operator:
        kube.apply(suspended)
        kube.apply(failed)
        eventually(lambda: phase(kube) == "Suspended", "phase Suspended", WAIT_SECONDS)
        eventually(lambda: ((kube.get(JOB_API, JOB_KIND, "broken") or {}).get("status") or {})
                   .get("phase") == "Failed", "the broken job to fail", WAIT_SECONDS)
        time.sleep(1.0)  # the reconciles that the status writes woke
        reads = [server.reads(JOBS, name) for name in ("livejournal", "broken")]
        time.sleep(2.5 * handlers.RESYNC_SECONDS)
        assert [server.reads(JOBS, name) for name in ("livejournal", "broken")] == reads

        kube.patch(JOB_API, JOB_KIND, "livejournal", {"spec": {"runPolicy": {"suspend": False}}})
        eventually(lambda: kube.get("v1", "Pod", TRAINER), "the pods of the resumed job", 5.0)
    assert operator.exception is None
