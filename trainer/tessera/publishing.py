"""Putting a command's output at a place the user named, all or nothing.

`tessera export` writes several files into one directory; they are written into a hidden
staging folder inside it (the same disk or bucket, so that moving a file into place is a
rename, not a copy, on disks: an output directory may be a mount point, whose sibling
would be another disk), and moved into place only once all are complete. A failure at any
moment leaves the output as it was: no half file, no file without its companions, no new
empty directory. `tessera eval --output` writes one file, atomically, creating its folder.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterator, Sequence

from .errors import BadInputError
from .storage.fs import Directory, StorageSettings

# Errors from the operating system that mean the user named an impossible place (a file
# where a folder must be, a folder without write permission), not a passing outage.
_BAD_PLACE = (FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


@contextlib.contextmanager
def staged_directory(output: Directory, names: Sequence[str], *,
                     overwrite: bool) -> Iterator[Directory]:
    """A folder to write `names` into; they appear in `output` together when the block ends.

    Existing files of those names are refused (BadInputError naming the first) unless
    `overwrite`; other files in `output` are left alone.
    """
    _check_output_directory(output, names, overwrite)
    created = output.kind() is None
    staging = output.subdirectory(f".tessera-staging-{uuid.uuid4().hex}.tmp")
    try:
        if staging.is_local:  # object stores have no folders to make
            with _bad_place_is_bad_input(output.url):  # no such folder can be made there
                staging.makedirs()
        yield staging
        _move_all(staging, output, names)
    except BaseException:
        with contextlib.suppress(Exception):  # the original error matters more
            _remove_staging(staging)
            if created:
                _remove_empty_directory(output)
        raise
    _remove_staging(staging)


def _check_output_directory(output: Directory, names: Sequence[str], overwrite: bool) -> None:
    if output.kind() == "file":
        raise BadInputError(f"{output.url}: is a file, and the output is a directory of "
                            "files; name a directory (new or existing)")
    if overwrite:
        return
    existing = [name for name in names if output.exists(name)]
    if existing:
        raise BadInputError(f"{output.url_of(existing[0])}: already exists ({len(existing)} "
                            "of the output files do); pass --overwrite to replace them, or "
                            "name another output directory")


def _move_all(staging: Directory, output: Directory, names: Sequence[str]) -> None:
    """Move the staged files into place (renames on disk); undo the moves if one fails.

    Each move replaces its file atomically; with --overwrite, a file already replaced when a
    later move fails is not brought back (its old content is gone).
    """
    moved: list[str] = []
    try:
        for name in names:
            staging.move(name, output)
            moved.append(name)
    except BaseException:
        for name in moved:
            with contextlib.suppress(Exception):
                output.delete(name)
        raise


def _remove_staging(staging: Directory) -> None:
    # File by file, then the folder: some S3 servers (SeaweedFS) keep the folder of a
    # recursive delete, but drop a folder with its last file.
    for name in staging.listdir():
        staging.delete(name)
    staging.remove()


def _remove_empty_directory(directory: Directory) -> None:
    """Remove a directory this command created, if it is empty; on disks only (an object
    store has no directories, and removing a bucket is never ours to do)."""
    if directory.is_local and not os.listdir(directory.root):
        os.rmdir(directory.root)


def check_output_file(url: str, config: StorageSettings) -> None:
    """Refuse, before any work, an output file that names a directory or lies in a file."""
    folder, name = _split(url)
    directory = Directory.from_config(folder, config)
    with _bad_place_is_bad_input(url):
        if directory.kind() == "file":
            raise BadInputError(f"{folder}: is a file, so {name} cannot be written in it; "
                                "name another output")
        if directory.kind(name) == "directory":
            raise BadInputError(f"{url}: is a directory; name a file such as "
                                f"{posixpath.join(url, 'metrics.json')}")


def write_output_file(url: str, text: str, config: StorageSettings) -> None:
    """Write a small result file atomically, creating its folder if needed."""
    folder, name = _split(url)
    with _bad_place_is_bad_input(url):
        Directory.from_config(folder, config).write_text(name, text)


def _split(url: str) -> tuple[str, str]:
    if "://" not in url:
        url = os.path.abspath(url)
    folder, _, name = url.rstrip("/").rpartition("/")
    return folder or "/", name


@contextlib.contextmanager
def _bad_place_is_bad_input(url: str) -> Iterator[None]:
    try:
        yield
    except _BAD_PLACE as error:
        reason = error.strerror or type(error).__name__
        where = error.filename or url
        raise BadInputError(f"{where}: {reason}; name another output") from None
