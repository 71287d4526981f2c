"""The lease an import holds on its entity_path: one import at a time publishes a dictionary.

Two imports into one entity_path would stage their dictionaries in one folder and each move
its own into place, so one import's buckets would name the other's entities. An import takes
`train`'s kind of lease (`storage.lease`), in a file of its own, before it reads anything in
entity_path, and renews it until its dictionary is published; a second import exits 75,
naming the holder. Imports whose edge paths are one folder share the entity_path lease only
when they share entity_path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..progress import Reporter
from ..storage.fs import Directory
from ..storage.lease import CheckpointLease

LEASE_FILE = "import_lease.json"


class ImportLease(CheckpointLease):
    """An import's lease on its entity_path."""

    FILE = LEASE_FILE
    LABEL = "entity_path"
    GUARDED = "dictionary"


@contextlib.contextmanager
def entity_path_lease(directory: Directory, reporter: Reporter) -> Iterator[None]:
    """Hold the lease on `directory` for the block, renewed by a heartbeat thread.

    The local folders that taking the lease created are removed again if the import leaves
    nothing in them, as an import refused for bad input always left no folder behind.
    """
    created = _missing_folders(directory)
    lease = ImportLease(directory, "tessera import")
    try:
        replaced = lease.acquire()
        if replaced is not None:
            reporter.event("import: took over the entity_path lease of a stopped import",
                           previous=replaced)
        with lease.renewing():
            yield
    finally:
        lease.release()
        for folder in created:  # deepest first; one holding anything stays
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def _missing_folders(directory: Directory) -> list[str]:
    if not directory.is_local:
        return []
    missing = []
    path = os.path.abspath(directory.root)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing
