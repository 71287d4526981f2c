"""`tessera train --metrics-port`: a real training process, scraped over HTTP while it trains."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.planted import write_planted_graph
from support.ports import free_port
from support.prometheus import Samples, scrape, value

SCRAPE_SECONDS = 120.0


def start_training(tmp_path: Path, *extra: str, **overrides: object) -> subprocess.Popen[str]:
    """`tessera train` of a planted graph in two partitions; its output goes to log.txt."""
    graph = write_planted_graph(tmp_path / "graph", num_partitions=2)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(**overrides)))
    with open(tmp_path / "log.txt", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "tessera", "train", str(config),
                                 "--log-format", "json", *extra], stdout=log,
                                stderr=subprocess.STDOUT, text=True)


def scrape_until_exit(process: subprocess.Popen[str], url: str) -> list[Samples]:
    """Every answer of the endpoint until the process ends (it is killed after a while)."""
    scrapes: list[Samples] = []
    deadline = time.monotonic() + SCRAPE_SECONDS
    try:
        while process.poll() is None and time.monotonic() < deadline:
            samples = scrape(url, timeout=2.0)
            if samples is not None:
                scrapes.append(samples)
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    return scrapes


def series(scrapes: list[Samples], name: str) -> list[float]:
    return [found for samples in scrapes if (found := value(samples, name)) is not None]


@pytest.mark.slow
def test_a_training_process_serves_metrics_that_follow_its_run(tmp_path: Path) -> None:
    port = free_port()
    process = start_training(tmp_path, "--metrics-port", f"127.0.0.1:{port}",
                             num_epochs=30, eval_fraction=0.1)
    scrapes = scrape_until_exit(process, f"http://127.0.0.1:{port}/metrics")
    assert process.returncode == 0, (tmp_path / "log.txt").read_text()
    epochs = series(scrapes, "tessera_train_epoch")
    versions = series(scrapes, "tessera_checkpoint_version")
    assert len(scrapes) >= 3 and epochs and versions, f"{len(scrapes)} scrapes"
    assert epochs[-1] > epochs[0] and versions[-1] > versions[0]
    assert epochs == sorted(epochs) and versions == sorted(versions)
    last = scrapes[-1]
    assert value(last, "tessera_train_epochs") == 30
    assert value(last, "tessera_train_buckets_scheduled") == 30 * 4  # 2 x 2 buckets an epoch
    assert 0 < value(last, "tessera_train_buckets_done") <= 30 * 4
    assert value(last, "tessera_train_edges_total") > 0
    assert value(last, "tessera_train_edges_per_second") > 0
    assert 0 < value(last, "tessera_train_mrr") <= 1
    assert value(last, "tessera_train_loss") > 0
    assert value(last, "tessera_storage_written_bytes_total") > 0
    assert value(last, "tessera_storage_read_bytes_total") > 0
    commits = value(last, "tessera_checkpoint_commit_seconds_count")
    assert commits == value(last, "tessera_checkpoint_version") > 0  # a fresh run: one each
    assert value(last, "tessera_checkpoint_last_commit_timestamp_seconds") > time.time() - 60


def test_a_bad_metrics_address_is_bad_input(tmp_path: Path) -> None:
    process = start_training(tmp_path, "--metrics-port", "127.0.0.1:http")
    assert process.wait(timeout=60) == 65
    assert (tmp_path / "log.txt").read_text().strip().splitlines()[-1] == (
        "tessera train: error: --metrics-port: '127.0.0.1:http' is not a port or HOST:PORT "
        "(e.g. 9464 or 127.0.0.1:9464)")


def test_a_taken_metrics_port_is_reported_and_training_goes_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = start_training(tmp_path, "--metrics-port", f"127.0.0.1:{port}",
                                 num_epochs=1)
        assert process.wait(timeout=120) == 0
    records = [json.loads(line) for line in (tmp_path / "log.txt").read_text().splitlines()]
    (warning,) = [r for r in records if r.get("event") == "metrics not served"]
    assert warning["address"] == f"127.0.0.1:{port}" and "in use" in warning["error"]
    assert any(r.get("event") == "training finished" for r in records)
