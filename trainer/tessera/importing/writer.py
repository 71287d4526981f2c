"""Publishing what an import produces (entity files, bucket files), all or nothing.

Every file is published atomically by the storage layer; `Publication` remembers each one, so
that an import that fails half way deletes what it had already published instead of leaving
new buckets next to old entity counts. `BucketWriters` keeps one open `BucketWriter` per
bucket of an edge directory and publishes them all, or none, when its `with` block ends.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Sequence
from types import TracebackType

from ..storage.edges import BucketWriter, bucket_file, open_bucket_writer
from ..storage.fs import Directory
from .bucketing import BucketSlice

PUBLISHING_THREADS = 8  # bucket files closed and published at once


class Publication:
    """The files this import has published so far."""

    def __init__(self) -> None:
        self.files: list[tuple[Directory, str]] = []

    def published(self, directory: Directory, name: str) -> None:
        self.files.append((directory, name))

    def undo(self) -> None:
        """Delete every published file (best effort: the original error matters more)."""
        for directory, name in reversed(self.files):
            with contextlib.suppress(Exception):
                directory.delete(name)
        self.files.clear()


class BucketWriters:
    """Writers for some buckets of one edge directory, published together on a clean exit."""

    def __init__(self, directory: Directory, buckets: Sequence[tuple[int, int]],
                 publication: Publication) -> None:
        self.directory = directory
        self.buckets = list(buckets)
        self.publication = publication
        self._writers: dict[tuple[int, int], BucketWriter] = {}

    def __enter__(self) -> BucketWriters:
        try:
            for lhs_part, rhs_part in self.buckets:
                writer = open_bucket_writer(self.directory, lhs_part, rhs_part)
                writer.__enter__()
                self._writers[lhs_part, rhs_part] = writer
        except BaseException as error:
            self._abort(list(self._writers.values()), error)
            raise
        return self

    def append(self, edges: BucketSlice) -> None:
        self._writers[edges.lhs_part, edges.rhs_part].append(edges.rel, edges.lhs, edges.rhs)

    @property
    def num_edges(self) -> int:
        return sum(writer.num_edges for writer in self._writers.values())

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        writers = list(self._writers.items())
        self._writers.clear()
        if exc is not None:
            self._abort([writer for _, writer in writers], exc)
            return
        # Publishing a bucket ends in waits for the disk (fsync) or the network (upload), not
        # for the CPU: several at once. A bucket that fails leaves nothing; those published
        # are recorded, so the import's undo deletes them too.
        with concurrent.futures.ThreadPoolExecutor(PUBLISHING_THREADS) as pool:
            closing = [(key, pool.submit(writer.__exit__, None, None, None))
                       for key, writer in writers]
        failures = []
        for (lhs_part, rhs_part), future in closing:
            if future.exception() is None:
                self.publication.published(self.directory, bucket_file(lhs_part, rhs_part))
            else:
                failures.append(future.exception())
        if failures:
            raise failures[0]

    @staticmethod
    def _abort(writers: Sequence[BucketWriter], error: BaseException) -> None:
        """Close writers without publishing them."""
        for writer in writers:
            with contextlib.suppress(Exception):
                writer.__exit__(type(error), error, error.__traceback__)
