"""Putting a command's output at a place the user named, all or nothing.

`tessera export` writes several files into one directory; they are written into a hidden
staging folder inside it (the same disk or bucket, so that moving a file into place is a
rename, not a copy, on disks: an output directory may be a mount point, whose sibling
would be another disk), and moved into place only once all are complete. A failure at any
moment leaves the output as it was: no half file, no file without its companions, no new
empty directory. A kill (no clean-up runs) during the moves is finished by the next export
into that directory: the moves' list (`.tessera-export.json`) is written before them and
deleted after, so the files still staged are moved into place first; a killed export's
staging folder (its name says which process on which host made it) is removed by the next.
`tessera eval --output` writes one file, atomically, creating its folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import socket
import stat
import uuid
from collections.abc import Iterator, Sequence

from .errors import BadInputError, FormatError, TransientError
from .os_errors import local_errors_named
from .processes import process_is_running
from .storage.fs import Directory, StorageSettings

MOVES_FILE = ".tessera-export.json"
_STAGING_PREFIX = ".tessera-staging-"

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
    if not output.url:
        raise BadInputError("the output path is empty; name a directory (new or existing)")
    kind = output.kind()
    created = kind is None
    if kind == "directory":
        _finish_killed_exports(output)
    _check_output_directory(output, names, overwrite)
    staging_name = f"{_STAGING_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}.tmp"
    staging = output.subdirectory(staging_name, shown_as=output.url)
    try:
        if staging.is_local:  # object stores have no folders to make
            with _bad_place_is_bad_input(output.url):  # no such folder can be made there
                staging.makedirs()
        yield staging
        output.write_text(MOVES_FILE, json.dumps({"staging": staging_name,
                                                  "files": list(names)}))
        _move_all(staging, output, names)
    except BaseException:
        with contextlib.suppress(Exception):  # the original error matters more
            _remove_staging(staging)
            output.delete(MOVES_FILE)
            if created:
                _remove_empty_directory(output)
        raise
    _remove_staging(staging)
    output.delete(MOVES_FILE)


def _finish_killed_exports(output: Directory) -> None:
    """Finish the moves of an export killed while it moved its files (all of them in place,
    as it promised), and remove the staging folders of killed exports on this host."""
    try:
        moves = json.loads(output.read_text(MOVES_FILE))
    except FileNotFoundError:
        moves = None
    except json.JSONDecodeError:  # cut short before any file moved: nothing to finish
        moves = {"staging": "", "files": []}
    if moves is not None and not (isinstance(moves, dict) and isinstance(moves.get("staging"), str)
                                  and isinstance(moves.get("files"), list)):
        raise FormatError(output.url_of(MOVES_FILE), "not the record of an export's moves (an "
                                                     "object with 'staging' and 'files'); "
                                                     "delete it")
    if moves is not None:
        staging = output.subdirectory(moves["staging"]) if moves["staging"] else None
        if staging is not None and _made_by_a_live_process(moves["staging"]):
            raise TransientError(f"{output.url}: another export is moving its files here; "
                                 "retry when it has ended")
        if staging is not None and staging.kind() == "directory":
            present = set(staging.listdir())
            for name in moves["files"]:
                if name in present:
                    staging.move(name, output)
        output.delete(MOVES_FILE)
    for name in output.listdir():
        if name.startswith(_STAGING_PREFIX) and not _made_by_a_live_process(name):
            _remove_staging(output.subdirectory(name))


def _made_by_a_live_process(staging_name: str) -> bool:
    """Whether the export that made this staging folder may still be running: it ran on
    another host (who can tell), or its process on this host is alive."""
    parts = staging_name.removeprefix(_STAGING_PREFIX).removesuffix(".tmp").rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or parts[0] != socket.gethostname():
        return True
    pid = int(parts[1])
    return pid != os.getpid() and process_is_running(pid)


def _check_output_directory(output: Directory, names: Sequence[str], overwrite: bool) -> None:
    if output.kind() == "file":
        raise BadInputError(f"{output.url}: is a file, and the output is a directory of "
                            "files; name a directory (new or existing)")
    folders = [name for name in names if output.kind(name) == "directory"]
    if folders:  # a move onto a folder would put the file inside it
        raise BadInputError(f"{output.url_of(folders[0])}: is a folder, where an output file "
                            "is to be written; remove it, or name another output directory")
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
    """Write a small result file atomically, creating its folder if needed.

    A file is replaced by a rename, which would put a file in place of a device, a pipe or
    a socket (as root, `--output /dev/null` would replace /dev/null): those are written into,
    as a shell's `>` would. A link to a file keeps pointing at it: the file is replaced.
    """
    if "://" not in url:
        if _is_special_file(url):
            with local_errors_named(url), open(url, "w", encoding="utf-8") as file:
                file.write(text)
            return
        url = os.path.realpath(url)
    folder, name = _split(url)
    with _bad_place_is_bad_input(url):
        Directory.from_config(folder, config).write_text(name, text)


def _is_special_file(path: str) -> bool:
    """Whether `path` (followed through links) is there, and neither a file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


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
