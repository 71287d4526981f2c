"""A small file rewritten while it is read (a lease renewed, a version committed) reads as
one whole version or the other: never refused because it changed between two requests."""

from __future__ import annotations

import threading

import pytest

from tessera.storage.fs import Directory


def test_a_file_rewritten_during_reads_reads_whole(directory: Directory) -> None:
    if directory.fs.protocol in ("memory", ("memory",)):
        # fsspec's memory store publishes a file when it is opened for writing, empty, and
        # fills it in place: no backend a user stores on, and no atomic rewrite to test.
        pytest.skip("fsspec's memory filesystem rewrites files in place")
    versions = [f'{{"heartbeat": {n}, "pad": "{"x" * 200}"}}\n' for n in range(2)]
    directory.write_text("lease.json", versions[0])
    stop = threading.Event()

    def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            directory.write_text("lease.json", versions[n % 2])

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        seen = {directory.read_text("lease.json") for _ in range(150)}
    finally:
        stop.set()
        writer.join()
    assert seen <= set(versions)


def test_text_reads_translate_line_endings(directory: Directory) -> None:
    """As a text-mode open would: a file written with Windows line endings reads with \\n."""
    with directory.writing("counts.txt") as local_path, open(local_path, "wb") as file:
        file.write(b"12\r\n34\r\n")
    assert directory.read_text("counts.txt") == "12\n34\n"
