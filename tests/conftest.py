"""Fixtures shared by every test: a real S3-protocol server on 127.0.0.1 (SeaweedFS).

`s3_server` starts one `weed mini` for the whole session, on free ports, with an access key,
and stops it at the end; `s3_dir` gives each test a fresh, empty prefix in a bucket on it
together with the fsspec `storage_options` that reach it, exactly what a user puts in a config.
`private_s3_server` gives a fault test a server of its own (a `WeedServer`) that it may stop,
freeze and restart on the same ports with the same data.
If a server cannot start, the fixture fails with the server's log: S3 tests never skip.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.s3_server import S3_BUCKET, S3Server, WeedServer


@dataclass(frozen=True)
class S3Location:
    """A fresh S3 prefix (`url`, s3://bucket/prefix) and the options that reach it."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-protocol server on 127.0.0.1 for the whole test session."""
    weed = WeedServer(tmp_path_factory.mktemp("seaweedfs"))
    weed.start()
    try:
        yield weed.server
    finally:
        weed.stop()


@pytest.fixture
def private_s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedServer]:
    """A server of one test's own, which the test may stop, freeze and restart."""
    weed = WeedServer(tmp_path_factory.mktemp("seaweedfs-private"))
    weed.start()
    try:
        yield weed
    finally:
        weed.stop()


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
