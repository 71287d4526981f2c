"""`Directory` itself: what its writes look like on disk."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest

from tessera.storage.fs import Directory
from tessera.storage.hdf5 import writing_hdf5


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077], ids=oct, indirect=True)
def test_written_files_get_the_mode_the_umask_allows(local_dir: Directory, umask: int) -> None:
    local_dir.write_text("checkpoint_version.txt", "1\n")
    with writing_hdf5(local_dir, "model.v1.h5"):
        pass
    for name in ("checkpoint_version.txt", "model.v1.h5"):
        mode = stat.S_IMODE(os.stat(local_dir.path(name)).st_mode)
        assert mode == 0o666 & ~umask, f"{name}: {oct(mode)}"
