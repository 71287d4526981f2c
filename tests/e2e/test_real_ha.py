"""Two operator replicas on a real API server: one acts, and when it is killed the other takes
over, with no duplicate or orphaned children.

Each case installs the chart's ServiceAccount, RBAC and peering object (cluster-wide: a
ClusterKopfPeering; namespaced: a KopfPeering in the job namespace) and starts two `python -m
tessera_operator --peering NAME` processes as that account, as the chart's two replicas run.
There is no kubelet: pods stay Pending, which is enough to see who creates them. The active
replica is killed with SIGKILL, so it cannot leave the peering object: the standby must notice
that its keep-alive has expired.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.cluster import REPO, OperatorProcess
from e2e.kube_client import KubeClient, eventually
from e2e.real_cluster import ControlPlane, write_kubeconfig
from e2e.test_real_login import Case, chart_objects, install, user_name

from tessera_operator.labels import LABEL_JOB

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

WAIT_SECONDS = 60.0
TAKEOVER_SECONDS = 30.0
JOB_API, JOB_KIND = "tessera.dev/v1alpha1", "EmbeddingJob"
RESUMING = "Resuming operations"  # what kopf logs when a replica starts (or goes back) to work
PAUSING = "Pausing operations"  # and when it sees an older live replica


def peering_object(case: Case) -> dict[str, Any]:
    (peering,) = [o for o in chart_objects(case) if o["apiVersion"] == "kopf.dev/v1"]
    return peering


def replica(plane: ControlPlane, case: Case, folder: Path, name: str) -> OperatorProcess:
    """One replica of the chart's Deployment: its account, its peering, its pod name."""
    pair = plane.pki.client(user_name(case))
    kubeconfig = write_kubeconfig(
        folder / f"{name}.kubeconfig",
        {"server": plane.url, "certificate-authority-data": plane.pki.ca.certificate_data()},
        {"client-certificate-data": pair.certificate_data(), "client-key-data": pair.key_data()},
        case.namespace)
    scope = ("--all-namespaces",) if case.cluster_wide else ("--namespace", case.namespace)
    return OperatorProcess(kubeconfig, folder / f"{name}.log", scope,
                           launch=lambda command, env: (command, {**env, "POD_ID": name}),
                           peering=(f"--peering={peering_object(case)['metadata']['name']}",))


def peers(kube: KubeClient, case: Case) -> dict[str, dict[str, Any]]:
    """Live replicas in the peering object: name -> priority, lifetime, last seen."""
    peering = peering_object(case)
    found = kube.get(peering["apiVersion"], peering["kind"], peering["metadata"]["name"])
    return {name: peer for name, peer in ((found or {}).get("status") or {}).items()
            if peer and peer.get("lifetime")}


def apply_job(kube: KubeClient, name: str) -> str:
    job = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    job["metadata"]["name"] = name
    return kube.apply(job)["metadata"]["uid"]


def wait_for_children(kube: KubeClient, name: str, uid: str, timeout: float) -> None:
    for kind, child in (("ConfigMap", f"{name}-config"), ("Pod", f"{name}-trainer-0")):
        found = eventually(lambda k=kind, c=child: kube.get("v1", k, c),
                           f"{kind} {child} to be created", timeout)
        assert [owner["uid"] for owner in found["metadata"]["ownerReferences"]] == [uid]
    eventually(lambda: (kube.get(JOB_API, JOB_KIND, name) or {}).get("status"),
               f"the status of {name}", timeout)


def acting(replica: OperatorProcess) -> bool:
    """Whether kopf's last word on the replica's peering is that it works."""
    said = [line for line in replica.output().splitlines() if RESUMING in line or PAUSING in line]
    return bool(said) and RESUMING in said[-1]


def mentions(replica: OperatorProcess, job: str, case: Case) -> bool:
    """Whether the replica logged anything about the job (kopf prefixes `[ns/name]`)."""
    return f"[{case.namespace}/{job}]" in replica.output()


@pytest.fixture(params=[Case("ha-cluster-wide", True), Case("ha-namespaced", False)],
                ids=lambda case: case.credentials)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


@pytest.fixture
def replicas(control_plane: ControlPlane, case: Case,
             tmp_path: Path) -> Iterator[list[OperatorProcess]]:
    install(control_plane, case)
    started = [replica(control_plane, case, tmp_path, name)
               for name in ("replica-a", "replica-b", "replica-a-restarted")]
    try:
        yield started
    finally:
        for process in started:
            process.stop()
        for process in started:  # shown on failure
            print(f"--- {process.log.name} ---\n{process.output()[-15000:]}")


def test_one_replica_acts_and_the_other_takes_over_when_it_is_killed(
        control_plane: ControlPlane, case: Case, replicas: list[OperatorProcess]) -> None:
    kube = control_plane.client(case.namespace)
    first, second, restarted = replicas
    first.start()
    second.start()
    listed = eventually(lambda: (lambda p: p if len(p) == 2 else None)(peers(kube, case)),
                        "both replicas in the peering object", WAIT_SECONDS)
    assert {peer["lifetime"] for peer in listed.values()} == {15}
    # The older replica (the first to reach kopf) has the higher priority: it acts, the
    # younger one waits.
    assert listed["replica-a"]["priority"] != listed["replica-b"]["priority"]
    active, standby = sorted((first, second), reverse=True,
                             key=lambda r: listed[r.log.stem]["priority"])
    eventually(lambda: RESUMING in active.output(), "the older replica to start work",
               WAIT_SECONDS)

    uid = apply_job(kube, "before")
    wait_for_children(kube, "before", uid, WAIT_SECONDS)
    eventually(lambda: mentions(active, "before", case), "the active replica's log of the job",
               WAIT_SECONDS)
    # (Started in the same second, the younger replica may act for a moment before the older
    # one's first keep-alive reaches it: kopf then pauses it.)
    assert not mentions(standby, "before", case) and not acting(standby) and acting(active)

    assert active.process is not None
    active.process.send_signal(signal.SIGKILL)
    active.process.wait(10)
    killed_at = time.monotonic()
    after_uid = apply_job(kube, "after")
    wait_for_children(kube, "after", after_uid, TAKEOVER_SECONDS)
    takeover = time.monotonic() - killed_at
    print(f"takeover: children of a job created {takeover:.1f} s after the active replica's "
          "SIGKILL")
    assert takeover < TAKEOVER_SECONDS
    assert acting(standby) and mentions(standby, "after", case)
    eventually(lambda: mentions(standby, "before", case),
               "the new active replica to reconcile the earlier job too", WAIT_SECONDS)

    # The killed replica comes back (as its Deployment restarts it): younger now, it waits.
    restarted.start()
    eventually(lambda: "replica-a-restarted" in peers(kube, case),
               "the restarted replica in the peering object", WAIT_SECONDS)
    last_uid = apply_job(kube, "restarted")
    wait_for_children(kube, "restarted", last_uid, WAIT_SECONDS)
    assert mentions(standby, "restarted", case) and not mentions(restarted, "restarted", case)
    assert RESUMING not in restarted.output()

    # One trainer pod and one ConfigMap per job, each owned by its job: nothing made twice,
    # nothing left without an owner.
    owners = {"before": uid, "after": after_uid, "restarted": last_uid}
    for kind, suffix in (("Pod", "trainer-0"), ("ConfigMap", "config")):
        children = kube.list("v1", kind, LABEL_JOB)
        assert sorted(child["metadata"]["name"] for child in children) == sorted(
            f"{job}-{suffix}" for job in owners)
        for child in children:
            job = child["metadata"]["labels"][LABEL_JOB]
            assert [(o["kind"], o["uid"], o.get("controller")) for o in
                    child["metadata"]["ownerReferences"]] == [(JOB_KIND, owners[job], True)]
