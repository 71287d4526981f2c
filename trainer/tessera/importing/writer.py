"""Writing the buckets of an import into their edge paths' staging folders.

`BucketWriters` keeps one open `BucketWriter` per bucket of an edge directory and, when its
`with` block ends, closes them all, each file written atomically into the staging folder that
the import's `Publication` names, where it waits for the import's commit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Sequence
from types import TracebackType

from ..storage.edges import BucketWriter, bucket_file, open_bucket_writer
from ..storage.fs import Directory
from .bucketing import BucketSlice
from .publication import Publication

PUBLISHING_THREADS = 8  # bucket files closed at once


class BucketWriters:
    """Writers for some buckets of one edge directory, staged together on a clean exit."""

    def __init__(self, directory: Directory, buckets: Sequence[tuple[int, int]],
                 publication: Publication) -> None:
        self.directory = directory
        self.buckets = list(buckets)
        self.publication = publication
        self._writers: dict[tuple[int, int], BucketWriter] = {}

    def __enter__(self) -> BucketWriters:
        try:
            for lhs_part, rhs_part in self.buckets:
                writer = open_bucket_writer(self.publication.staging_for(self.directory),
                                            lhs_part, rhs_part)
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
        # Closing a bucket ends in waits for the disk (fsync) or the network (upload), not for
        # the CPU: several at once. A bucket that fails leaves nothing; the others wait in the
        # staging folder, which the failed import deletes.
        with concurrent.futures.ThreadPoolExecutor(PUBLISHING_THREADS) as pool:
            closing = [(key, pool.submit(writer.__exit__, None, None, None))
                       for key, writer in writers]
        failures: list[BaseException] = []
        for (lhs_part, rhs_part), future in closing:
            error = future.exception()
            if error is None:
                self.publication.staged(self.directory, bucket_file(lhs_part, rhs_part))
            else:
                failures.append(error)
        if failures:
            raise failures[0]

    @staticmethod
    def _abort(writers: Sequence[BucketWriter], error: BaseException) -> None:
        """Close writers without keeping their files."""
        for writer in writers:
            with contextlib.suppress(Exception):
                writer.__exit__(type(error), error, error.__traceback__)
