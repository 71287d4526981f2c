"""A directory at any fsspec URL (local path, file://, s3://, memory://, gs://...).

Everything Tessera reads or writes goes through `Directory`, which hides two differences
between local disks and object stores: how to make a write atomic (rename a temporary file,
or a single PUT), and how HDF5 reaches the bytes (a local path, or a seekable remote file
that fetches only the ranges it reads).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import TransientError

# Remote HDF5 reads fetch this much per request: large enough to amortise round trips,
# small enough that reading one chunk of a bucket does not download the whole file.
REMOTE_BLOCK_SIZE = 8 * 2**20


class Directory:
    """A directory, addressed by URL, with atomic writes and streamed reads."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") or url
        self.storage_options = dict(storage_options or {})
        # Other processes (Hogwild workers, other trainers) write here too: a cached listing
        # would hide their files or report stale sizes, so object stores are asked each time.
        self.fs, self.root = fsspec.core.url_to_fs(
            self.url, **{"use_listings_cache": False, **self.storage_options})
        self.root = self.root.rstrip("/") if self.root != "/" else self.root

    def __repr__(self) -> str:
        return f"Directory({self.url!r})"

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, name: str) -> str:
        """The backend path of a file in this directory."""
        return posixpath.join(self.root, name)

    def url_of(self, name: str) -> str:
        """The user-facing URL of a file, for messages."""
        return f"{self.url}/{name}"

    def subdirectory(self, name: str) -> Directory:
        return Directory(self.url_of(name), self.storage_options)

    def exists(self, name: str) -> bool:
        with translate_errors(self.url_of(name)):
            return bool(self.fs.exists(self.path(name)))

    def listdir(self) -> list[str]:
        """Names of the files directly in this directory (empty if it does not exist)."""
        with translate_errors(self.url):
            if not self.fs.exists(self.root):
                return []
            return sorted(posixpath.basename(p.rstrip("/"))
                          for p in self.fs.ls(self.root, detail=False))

    def size(self, name: str) -> int:
        with translate_errors(self.url_of(name)):
            return int(self.fs.size(self.path(name)))

    def read_text(self, name: str) -> str:
        with (translate_errors(self.url_of(name)),
              self.fs.open(self.path(name), "rt", encoding="utf-8") as file):
            return file.read()

    def write_text(self, name: str, text: str) -> None:
        """Write a small text file atomically: readers see the old or the new content."""
        with self.writing(name) as local_path, open(local_path, "w", encoding="utf-8") as file:
            file.write(text)

    def delete(self, name: str) -> None:
        with translate_errors(self.url_of(name)):
            if self.fs.exists(self.path(name)):
                self.fs.rm(self.path(name), recursive=True)

    def copy(self, name: str, target: Directory, target_name: str | None = None) -> None:
        """Copy a file into another directory (server-side when both are on one backend)."""
        target_name = target_name or name
        if target.fs is self.fs or (self.is_local and target.is_local):
            with translate_errors(self.url_of(name)):
                target.makedirs()
                self.fs.copy(self.path(name), target.path(target_name))
            return
        with (self.open_read(name) as source, target.writing(target_name) as local_path,
              open(local_path, "wb") as sink):
            shutil.copyfileobj(source, sink)

    def makedirs(self) -> None:
        with translate_errors(self.url):
            self.fs.makedirs(self.root, exist_ok=True)

    @contextlib.contextmanager
    def open_read(self, name: str) -> Iterator[IO[bytes]]:
        """A seekable binary file; remote backends fetch only the ranges that are read."""
        with translate_errors(self.url_of(name)):
            file = self.fs.open(self.path(name), "rb", block_size=REMOTE_BLOCK_SIZE)
        try:
            yield file
        finally:
            file.close()

    @contextlib.contextmanager
    def local_read_path(self, name: str) -> Iterator[str | None]:
        """The file's local path when the backend is a local disk, else None."""
        yield self.path(name) if self.is_local else None

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[str]:
        """Yield a local temporary path to write `name` into; publish it atomically on success.

        Locally the file is renamed into place; on object stores it is uploaded with one
        streamed PUT, which is atomic there. On failure nothing is published and the
        temporary file is removed, so readers never see a half-written file.
        """
        if self.is_local:
            self.makedirs()
            temp_path = _create_temp_file(self.root, f".{name}.", ".tmp")
        else:
            temp_path = _create_temp_file(tempfile.gettempdir(), "tessera-", f"-{name}")
        try:
            yield temp_path
            if self.is_local:
                _fsync(temp_path)
                os.replace(temp_path, self.path(name))
                _fsync_directory(self.root)
            else:
                with translate_errors(self.url_of(name)):
                    self.fs.put_file(temp_path, self.path(name))
        finally:
            if os.path.exists(temp_path):
                os.unlink(temp_path)


def _create_temp_file(folder: str, prefix: str, suffix: str) -> str:
    """Create an empty file of a new name with the mode a plain open() gives (0666 & ~umask).

    Not mkstemp: its files are 0600, so checkpoints renamed into place would be unreadable
    to the other users of a shared disk or volume.
    """
    while True:
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return path


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(path: str) -> None:
    with contextlib.suppress(OSError):  # not every platform can fsync a directory
        _fsync(path)


@contextlib.contextmanager
def translate_errors(location: str) -> Iterator[None]:
    """Turn backend failures other than "not found"/"permission" into TransientError.

    A missing file is the user's problem (bad path) and keeps its type; a connection reset or
    a 5xx from an object store is a storage outage worth retrying.
    """
    try:
        yield
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        raise
    except (ConnectionError, TimeoutError) as error:
        raise TransientError(f"{location}: storage unavailable ({error}); retry later") from error
    except OSError as error:
        if error.errno is not None:  # a local disk error such as ENOSPC: report as is
            raise
        raise TransientError(f"{location}: storage error ({error}); retry later") from error
