"""A `directory` fixture that runs a storage test on each backend: local disk, memory, S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tessera.storage.fs import Directory

BACKEND_FIXTURES = {"local": "local_dir", "memory": "memory_dir", "s3": "s3_directory"}


@pytest.fixture
def local_dir(tmp_path) -> Directory:
    return Directory(str(tmp_path / "store"))


@pytest.fixture
def memory_dir() -> Iterator[Directory]:
    # The memory filesystem is one process-wide store: give each test its own root.
    directory = Directory(f"memory://tessera-test-{uuid.uuid4().hex}")
    yield directory
    if directory.fs.exists(directory.root):
        directory.fs.rm(directory.root, recursive=True)


@pytest.fixture
def s3_directory(s3_dir) -> Directory:
    return Directory(s3_dir.url, s3_dir.storage_options)


@pytest.fixture(params=sorted(BACKEND_FIXTURES))
def directory(request) -> Directory:
    """The same test on every kind of backend a user may point Tessera at."""
    return request.getfixturevalue(BACKEND_FIXTURES[request.param])
