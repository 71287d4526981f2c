"""`tessera train` on a real S3 server that goes away: a short outage is waited out, a long one
ends with exit code 75 and one line, nothing committed is lost and a rerun resumes; refused
credentials and a missing bucket are bad input (65), never showing a secret."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.planted import write_planted_graph
from support.s3_server import S3_BUCKET, WeedServer

from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory

NUM_EPOCHS = 6
NUM_CHUNKS = 2
SHORT_OUTAGE_S = 8
SMALL_BUDGET_S = 3


def s3_training_config(tmp_path: Path, url: str, options: dict[str, Any]) -> Path:
    """A small planted graph uploaded to `url`, and a config that trains on it there."""
    graph = write_planted_graph(tmp_path / "graph", 2, num_edges=4000)
    filesystem = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    for name in ("entities", "train"):
        filesystem.put(str(graph.root / name), f"{url}/{name}", recursive=True)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(graph.config(
        entity_path=f"{url}/entities", edge_paths=[f"{url}/train"],
        checkpoint_path=f"{url}/checkpoints", storage_options=options,
        num_epochs=NUM_EPOCHS, num_edge_chunks=NUM_CHUNKS)))
    return config_path


def start_training(config: Path, log: Path, *params: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tessera", "train", str(config), "--log-format", "json",
               *(arg for param in params for arg in ("-p", param))]
    with open(log, "ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen[bytes], timeout: float = 120) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def wait_for_first_commit(store: CheckpointStore, process: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if (version := store.current_version()) > 0:
            return version
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint was committed (exit code {process.poll()})")


def events(log: Path) -> list[dict[str, Any]]:
    records = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if not line.startswith("{")]


def check_committed_checkpoint(store: CheckpointStore) -> int:
    """The committed version opens (model and every partition, with h5py through the store)."""
    version = store.current_version()
    assert version > 0
    store.read_model(version)
    for part in range(2):
        embeddings, _ = store.read_embeddings("node", part, version)
        assert embeddings.shape == (200, 16)
    return version


@pytest.fixture
def run(private_s3_server: WeedServer, tmp_path: Path) -> tuple[Path, CheckpointStore]:
    url = f"s3://{S3_BUCKET}/run"
    options = private_s3_server.server.storage_options()
    config = s3_training_config(tmp_path, url, options)
    return config, CheckpointStore(Directory(f"{url}/checkpoints", options, retry_timeout=60))


@pytest.mark.slow
def test_an_outage_shorter_than_the_budget_is_waited_out(private_s3_server, run, tmp_path):
    config, store = run
    log = tmp_path / "train.log"
    process = start_training(config, log)
    wait_for_first_commit(store, process)
    private_s3_server.stop()
    time.sleep(SHORT_OUTAGE_S)
    assert process.poll() is None, log.read_text()[-3000:]  # still waiting, not crashed
    private_s3_server.restart()
    assert finish(process) == 0, log.read_text()[-3000:]
    waits = [record for record in events(log) if record.get("event") == "waiting for storage"]
    assert waits and all(record["url"].startswith(f"s3://{S3_BUCKET}/run") for record in waits)
    assert check_committed_checkpoint(store) == NUM_EPOCHS * NUM_CHUNKS


@pytest.mark.slow
def test_an_outage_longer_than_the_budget_exits_75_and_a_rerun_resumes(
        private_s3_server, run, tmp_path):
    config, store = run
    log = tmp_path / "train.log"
    process = start_training(config, log, f"storage_retry_timeout={SMALL_BUDGET_S}")
    wait_for_first_commit(store, process)
    private_s3_server.stop()
    stopped = time.monotonic()
    code = finish(process, timeout=60)
    assert code == 75, log.read_text()[-3000:]
    assert time.monotonic() - stopped < SMALL_BUDGET_S + 20  # the budget, then one attempt
    lines = error_lines(log)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"tessera train: error: s3://{S3_BUCKET}/run/")
    assert "storage unavailable" in lines[0] and "Traceback" not in log.read_text()

    private_s3_server.restart()
    committed = check_committed_checkpoint(store)  # nothing committed was lost
    rerun_log = tmp_path / "rerun.log"
    assert finish(start_training(config, rerun_log)) == 0, rerun_log.read_text()[-3000:]
    versions = [record["checkpoint_version"] for record in events(rerun_log)
                if record.get("event") == "checkpoint committed"]
    assert versions[0] == committed + 1  # resumed after the last committed checkpoint
    assert check_committed_checkpoint(store) == NUM_EPOCHS * NUM_CHUNKS


@pytest.mark.slow
def test_a_server_down_at_start_exits_75_after_the_budget(private_s3_server, run, tmp_path):
    config, _ = run
    private_s3_server.stop()
    log = tmp_path / "train.log"
    started = time.monotonic()
    code = finish(start_training(config, log, f"storage_retry_timeout={SMALL_BUDGET_S}"))
    assert code == 75, log.read_text()[-3000:]
    assert time.monotonic() - started >= SMALL_BUDGET_S
    lines = error_lines(log)
    assert len(lines) == 1 and lines[0].startswith(f"tessera train: error: s3://{S3_BUCKET}/run/")
    waits = [record for record in events(log) if record.get("event") == "waiting for storage"]
    assert waits and waits[-1]["seconds_left"] < SMALL_BUDGET_S


@pytest.mark.parametrize("mistake", ["wrong key", "wrong secret", "wrong env secret",
                                     "missing bucket"])
def test_refused_credentials_and_a_missing_bucket_exit_65_with_one_line(
        s3_dir, tmp_path, monkeypatch, mistake):
    graph = write_planted_graph(tmp_path / "graph", 1, num_edges=100)
    options = dict(s3_dir.storage_options)
    secret = options["secret"]
    url = s3_dir.url
    expected_source = "storage_options key/secret"
    if mistake == "wrong key":
        options["key"] = "nobody"
    elif mistake == "wrong secret":
        options["secret"] = "not-" + secret
    elif mistake == "wrong env secret":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", options.pop("key"))
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + options.pop("secret"))
        expected_source = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables"
    else:
        url = "s3://no-such-bucket/run"
    config = tmp_path / "config.json"
    config.write_text(json.dumps(graph.config(
        entity_path=f"{url}/entities", checkpoint_path=f"{url}/checkpoints",
        storage_options=options)))
    log = tmp_path / "train.log"
    assert finish(start_training(config, log)) == 65, log.read_text()[-3000:]
    lines = error_lines(log)
    assert len(lines) == 1, lines
    bucket = url.split("/")[2]
    assert lines[0].startswith(f"tessera train: error: {url}/") and f"'{bucket}'" in lines[0]
    assert expected_source in lines[0]
    assert secret not in log.read_text()
