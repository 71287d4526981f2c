"""Operator at fleet scale: a thousand EmbeddingJobs on a real kube-apiserver.

    python bench/bench_operator_scale.py                       # 1,000 jobs: 900 idle, 100 active
    python bench/bench_operator_scale.py --idle 150 --active 14 --window 30

A real control plane (etcd, kube-apiserver, kube-controller-manager: tests/e2e/real_cluster.py,
binaries from tests/e2e/k8s_binaries.sh) and the operator as its own process, logged in as the
chart's service account. The idle jobs are created first: half suspended, half with an invalid
spec (failed at once: finished jobs, as far as the operator's work goes). Then the active jobs
are applied one after another, 5 a second; no node runs their pods, so they stay Pending, as in
a busy cluster, and their jobs stay active. The table gives:

- apply -> pods: from each active job's creation to its trainer pod existing (p50, p95);
- with every job in place, over `--window` seconds: the operator's resident memory (peak),
  its CPU, reconciles a second and their p95 time, and the requests its reconciles made (from
  its own metrics; kopf's watches aside);
- the same window once the active jobs are suspended too: every job idle.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the harness lives with the end-to-end tests

from e2e.chart import chart_objects, operator_user  # noqa: E402
from e2e.cluster import NAMESPACE, OperatorProcess  # noqa: E402
from e2e.conftest import install_crd  # noqa: E402
from e2e.kube_client import KubeClient, eventually  # noqa: E402
from e2e.pki import Pki  # noqa: E402
from e2e.real_cluster import ControlPlane  # noqa: E402

JOB_API = "tessera.dev/v1alpha1"
RELEASE = "tessera"
SETTLE_SECONDS = 20.0
TICKS = 100  # Linux clock ticks a second (/proc/PID/stat)
RECONCILE_COUNT = "tessera_operator_reconcile_duration_seconds_count"
RECONCILE_BUCKET = re.compile(
    r'^tessera_operator_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', re.M)


def job(name: str, *, suspend: bool = False, invalid: bool = False) -> dict[str, Any]:
    manifest = yaml.safe_load((REPO / "crds" / "examples" / "minimal.yaml").read_text())
    manifest["metadata"] = {"name": name, "namespace": NAMESPACE}
    if suspend:
        manifest["spec"]["runPolicy"] = {"suspend": True}
    if invalid:  # valid for the CRD, refused by the operator: fails at once, no pods
        manifest["spec"]["config"]["relations"][0]["lhs"] = "nobody"
    return manifest


def rss_and_cpu(pid: int) -> tuple[int, float]:
    """Resident bytes and CPU seconds so far of process `pid`."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / TICKS


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def reconcile_counts(text: str) -> tuple[float, dict[float, float]]:
    count = float(re.search(rf"^{RECONCILE_COUNT} (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    buckets = {float(le): float(value) for le, value in RECONCILE_BUCKET.findall(text)}
    return count, buckets


def p95_of(before: dict[float, float], after: dict[float, float]) -> float:
    """The upper bound of the histogram bucket holding the 95th percentile of the window."""
    delta = {le: after[le] - before.get(le, 0.0) for le in after}
    total = delta.get(float("inf"), 0.0)
    if total == 0:
        return float("nan")
    return next(le for le in sorted(delta) if delta[le] >= 0.95 * total)


def requests_made(text: str) -> float:
    return sum(float(value) for value in re.findall(
        r"^tessera_operator_api_requests_total\{[^}]*\} (\S+)$", text, re.M))


def window(operator: OperatorProcess, seconds: float) -> dict[str, float]:
    """What the operator used over `seconds` from now."""
    assert operator.process is not None
    pid = operator.process.pid
    started, (_, cpu0) = time.time(), rss_and_cpu(pid)
    text = scrape(operator.metrics_url)
    (count0, buckets0), requests0 = reconcile_counts(text), requests_made(text)
    peak = 0
    while time.time() - started < seconds:
        peak = max(peak, rss_and_cpu(pid)[0])
        time.sleep(1.0)
    elapsed = time.time() - started
    rss, cpu1 = rss_and_cpu(pid)
    text = scrape(operator.metrics_url)
    (count1, buckets1), requests1 = reconcile_counts(text), requests_made(text)
    return {"rss_mb": max(peak, rss) / 2**20, "cpu_percent": 100 * (cpu1 - cpu0) / elapsed,
            "reconciles_per_s": (count1 - count0) / elapsed,
            "p95_reconcile_s": p95_of(buckets0, buckets1),
            "requests_per_s": (requests1 - requests0) / elapsed}


@contextmanager
def control_plane(folder: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(folder, Pki(folder / "pki"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


def create_all(kube: KubeClient, manifests: list[dict[str, Any]], threads: int = 8) -> None:
    """Create `manifests` from a few threads at once (a thousand one by one takes minutes)."""
    chunks = [manifests[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=lambda chunk=chunk: [kube.apply(m) for m in chunk])
               for chunk in chunks]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def apply_active(kube: KubeClient, count: int, rate: float) -> list[float]:
    """Apply `count` active jobs at `rate` a second; each one's seconds to its trainer pod."""
    created: dict[str, float] = {}
    seen: dict[str, float] = {}
    for index in range(count):
        name = f"active-{index:04d}"
        kube.apply(job(name))
        created[name] = time.monotonic()
        _note_pods(kube, created, seen)
        time.sleep(1 / rate)
    eventually(lambda: _note_pods(kube, created, seen) or len(seen) == count,
               "every active job's pods", 300)
    return [seen[name] - created[name] for name in created]


def _note_pods(kube: KubeClient, created: dict[str, float], seen: dict[str, float]) -> None:
    now = time.monotonic()
    for pod in kube.list("v1", "Pod"):
        name = pod["metadata"]["name"].removesuffix("-trainer-0")
        if name in created and name not in seen:
            seen[name] = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=900, help="suspended or failed jobs")
    parser.add_argument("--active", type=int, default=100, help="jobs with pods")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-scale-") as root, \
            control_plane(Path(root) / "plane") as plane:
        admin = plane.client(NAMESPACE)
        install_crd(admin)
        admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        eventually(lambda: admin.get("v1", "ServiceAccount", "default"),
                   "the namespace's default service account", 60)
        for manifest in chart_objects(NAMESPACE, RELEASE, cluster_wide=False):
            admin.apply(manifest)
        user = operator_user(NAMESPACE, RELEASE, False)
        operator = OperatorProcess(
            plane.write_kubeconfig(Path(root) / "kubeconfig", plane.pki.client(user), NAMESPACE),
            Path(root) / "operator.log")
        idle = [job(f"idle-{i:04d}", suspend=i % 2 == 0, invalid=i % 2 == 1)
                for i in range(args.idle)]
        create_all(admin, idle)
        operator.start()
        try:
            eventually(lambda: sum(1 for j in admin.list(JOB_API, "EmbeddingJob")
                                   if (j.get("status") or {}).get("phase")) >= args.idle,
                       "every idle job to get a phase", 600)
            latencies = apply_active(admin, args.active, rate=5.0)
            time.sleep(SETTLE_SECONDS)
            busy = window(operator, args.window)
            for index in range(args.active):
                admin.patch(JOB_API, "EmbeddingJob", f"active-{index:04d}",
                            {"spec": {"runPolicy": {"suspend": True}}})
            time.sleep(SETTLE_SECONDS)
            quiet = window(operator, args.window)
        finally:
            operator.stop()
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    print(f"{args.idle + args.active:,} jobs ({args.idle} idle: half suspended, half failed; "
          f"{args.active} active, pods Pending)")
    print(f"apply -> pods created: p50 {statistics.median(latencies):.2f} s, p95 {p95:.2f} s")
    print(f"{'window':<22} {'RSS MB':>7} {'CPU %':>6} {'reconciles/s':>12} "
          f"{'p95 reconcile s':>15} {'requests/s':>10}")
    for label, row in ((f"{args.active} active", busy), ("all idle", quiet)):
        print(f"{label:<22} {row['rss_mb']:>7.0f} {row['cpu_percent']:>6.1f} "
              f"{row['reconciles_per_s']:>12.2f} {row['p95_reconcile_s']:>15.3g} "
              f"{row['requests_per_s']:>10.2f}")


if __name__ == "__main__":
    main()
