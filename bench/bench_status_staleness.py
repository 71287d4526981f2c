"""How stale a running job's status is: from a trainer's log line to the EmbeddingJob status
showing it, on the end-to-end harness of the tests with a real control plane (etcd,
kube-apiserver and kube-controller-manager; the test kubelet as its node, running pods as local
processes and serving their logs through kube-apiserver; the operator as its own process with
the chart's role; the S3 test server).

The job trains a planted graph; this script polls the job every POLL_S seconds and notes when
the status first shows each committed checkpoint version (or a later one), and each progress
record (its loss). The delay of a line is that moment minus the line's own `time` (one
machine, one clock). Prints median and p95 per kind of line.

    python bench/bench_status_staleness.py [--epochs 60] [--edges 40000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the harness lives with the end-to-end tests

from e2e.cluster import Cluster, TrainingData  # noqa: E402
from e2e.conftest import real_cluster_in  # noqa: E402
from support.planted import write_planted_graph  # noqa: E402
from support.s3_server import S3_BUCKET, WeedServer  # noqa: E402

POLL_S = 0.1
TRAINER = "staleness-trainer-0"


def job_objects(data: TrainingData, server: Any, epochs: int) -> list[dict[str, Any]]:
    secret, job = yaml.safe_load_all((REPO / "crds/examples/s3-secret.yaml").read_text())
    secret["stringData"] = {"AWS_ACCESS_KEY_ID": server.key,
                            "AWS_SECRET_ACCESS_KEY": server.secret}
    job["metadata"]["name"] = "staleness"
    job["spec"]["storage"]["endpoint"] = server.endpoint_url
    job["spec"]["config"] = data.config(num_epochs=epochs)
    return [secret, job]


def watch(cluster: Cluster) -> list[tuple[float, dict[str, Any]]]:
    """(moment, status) at every poll until the job has finished."""
    seen: list[tuple[float, dict[str, Any]]] = []
    while True:
        status = (cluster.job("staleness") or {}).get("status") or {}
        seen.append((time.time(), status))
        if status.get("phase") in ("Succeeded", "Failed"):
            return seen
        time.sleep(POLL_S)


def delays(records: list[dict[str, Any]], seen: list[tuple[float, dict[str, Any]]]
           ) -> dict[str, list[float]]:
    """Per kind of line, the delay from each line to the first status showing it."""
    def first(shows: Any) -> float | None:
        return next((moment for moment, status in seen if shows(status)), None)

    found: dict[str, list[float]] = {"checkpoint committed": [], "progress record": []}
    for record in records:
        if record.get("event") == "checkpoint committed":
            version = record["checkpoint_version"]
            moment = first(lambda s, v=version: ((s.get("checkpoint") or {}).get("version")
                                                 or 0) >= v and s.get("phase") == "Running")
            kind = "checkpoint committed"
        elif record.get("progress") == "train" and "loss" in record:
            moment = first(lambda s, loss=record["loss"]: (s.get("progress") or {}).get(
                "loss") == loss)
            kind = "progress record"
        else:
            continue
        if moment is not None:
            found[kind].append(moment - record["time"])
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--edges", type=int, default=40_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        weed = WeedServer(root / "s3")
        weed.start()
        try:
            with real_cluster_in(root) as cluster:
                graph = write_planted_graph(root / "graph", num_partitions=1,
                                            num_edges=args.edges)
                data = TrainingData(graph, f"s3://{S3_BUCKET}/staleness",
                                    weed.server.storage_options())
                data.upload()
                for manifest in job_objects(data, weed.server, args.epochs):
                    cluster.kube.apply(manifest)
                seen = watch(cluster)
                log = cluster.kubelet.logs(TRAINER)[-1]
        finally:
            weed.stop()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    print(f"job {seen[-1][1].get('phase')}, {args.epochs} epochs, {args.edges} edges; "
          f"status polled every {POLL_S} s\n")
    print("| trainer line | lines shown | median s | p95 s | max s |")
    print("|---|---|---|---|---|")
    for kind, values in delays(records, seen).items():
        if values:
            print(f"| {kind} | {len(values)} | {statistics.median(values):.2f} | "
                  f"{percentile(values, 0.95):.2f} | {max(values):.2f} |")
        else:
            print(f"| {kind} | 0 | - | - | - |")


if __name__ == "__main__":
    main()
