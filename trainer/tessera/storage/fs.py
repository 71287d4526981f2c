"""A directory at any fsspec URL (local path, file://, s3://, memory://, gs://...).

Everything Tessera reads or writes goes through `Directory`, which hides two differences
between local disks and object stores: how to make a write atomic (rename a temporary file,
or a single PUT), and how HDF5 reaches the bytes (a local path, or a seekable remote file
that fetches only the ranges it reads). Its failures are Tessera's errors, naming the file:
storage outages waited out, then transient (`retry`), local disk errors by errno
(`os_errors`).

It also counts the bytes that pass through it (`metrics.STORAGE_READ_BYTES`,
`STORAGE_WRITTEN_BYTES`): every read of a text file or of a stream, and every file published.
What it does not see is not counted: HDF5 reading a local file by path, and copies that the
backend makes by itself (a snapshot on the same disk or bucket).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import posixpath
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, Protocol, TypeVar, cast

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import BadInputError, FormatError, TesseraError
from ..metrics import STORAGE_READ_BYTES, STORAGE_WRITTEN_BYTES
from ..os_errors import local_errors_named
from ..processes import process_is_running
from .failures import options_to_check
from .retry import call_with_retries

T = TypeVar("T")
# The local copies of uploads, in the temporary folder: tessera-upload-PID-RANDOM-NAME.
UPLOAD_PREFIX = "tessera-upload-"


class StorageSettings(Protocol):
    """The config keys that say how storage is reached (a ConfigSchema has them)."""

    @property
    def storage_options(self) -> Mapping[str, Any]: ...

    @property
    def storage_retry_timeout(self) -> float: ...

# Remote HDF5 reads fetch this much per request: large enough to amortise round trips,
# small enough that reading one chunk of a bucket does not download the whole file.
REMOTE_BLOCK_SIZE = 8 * 2**20


class Directory:
    """A directory, addressed by URL, with atomic writes and streamed reads.

    Every call to the backend waits out transient failures for up to `retry_timeout`
    seconds (see `retry`), then raises TransientError; 0 fails at the first one.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 retry_timeout: float = 0.0, shown_as: str | None = None) -> None:
        self.url = url.rstrip("/") or url
        self.shown_as = shown_as or self.url  # what messages call its files (`url_of`)
        self.storage_options = dict(storage_options or {})
        self.retry_timeout = retry_timeout
        try:
            self.fs, self.root = self._call(self.url, self._open_filesystem)
        except ImportError as error:  # a known scheme whose package is not installed
            raise BadInputError(f"{self.url}: {error}; or name a path of another kind "
                                "(local, s3://)") from None
        except TesseraError:
            raise
        except Exception as error:  # an unknown scheme, or options its backend refuses
            raise BadInputError(f"{self.url}: cannot be opened ({type(error).__name__}: "
                                f"{error}); check its scheme (local paths, s3://, gs://...) "
                                f"and {options_to_check(self.storage_options)}") from None
        self.root = self.root.rstrip("/") if self.root != "/" else self.root
        if _is_s3(self.url):
            self.fs.retries = 1  # s3fs's own loop; see _filesystem_options

    def _open_filesystem(self) -> tuple[Any, str]:
        """fsspec's filesystem and path for the URL. An S3 client is made here rather than
        at the first request, so that options it refuses are found before any work starts
        (making it sends no request); FTP and the like connect on creation, and are retried
        as any call is."""
        fs, root = fsspec.core.url_to_fs(
            self.url, **_filesystem_options(self.url, self.storage_options))
        if _is_s3(self.url):
            fs.connect()
        return fs, root

    @classmethod
    def from_config(cls, url: str, config: StorageSettings) -> Directory:
        """The directory at `url`, reached and retried as the config says."""
        return cls(url, config.storage_options, retry_timeout=config.storage_retry_timeout)

    def __repr__(self) -> str:
        return f"Directory({self.url!r})"

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, name: str) -> str:
        """The backend path of a file in this directory."""
        return posixpath.join(self.root, name)

    def url_of(self, name: str) -> str:
        """The user-facing URL of a file, for messages: where it will be, for a folder
        that stands in for another (`shown_as`: an export's staging folder)."""
        return f"{self.shown_as}/{name}"

    def subdirectory(self, name: str, *, shown_as: str | None = None) -> Directory:
        return Directory(f"{self.url}/{name}", self.storage_options,
                         retry_timeout=self.retry_timeout, shown_as=shown_as)

    def exists(self, name: str) -> bool:
        return self._call(self.url_of(name), lambda: bool(self.fs.exists(self.path(name))))

    def listdir(self) -> list[str]:
        """Names of the files directly in this directory (empty if it does not exist)."""
        def list_names() -> list[str]:
            if not self.fs.exists(self.root):
                return []
            return sorted(posixpath.basename(p.rstrip("/"))
                          for p in self.fs.ls(self.root, detail=False))

        return self._call(self.url, list_names)

    def kind(self, name: str | None = None) -> str | None:
        """'file', 'directory' or None (nothing there): of `name`, or of this directory itself
        when `name` is None (an output path may name either)."""
        path = self.root if name is None else self.path(name)

        def look() -> str | None:
            try:
                found = self.fs.info(path).get("type")
            except FileNotFoundError:
                return None
            return "directory" if found == "directory" else "file"

        return self._call(self.url if name is None else self.url_of(name), look)

    def move(self, name: str, target: Directory) -> None:
        """Move a file to another directory of the same backend: a rename on disks, so an
        existing target file is replaced atomically."""
        def move_if_present() -> None:  # a retry after a lost reply finds it moved already
            if self.fs.exists(self.path(name)):
                self.fs.mv(self.path(name), target.path(name))

        self._call(target.url_of(name), move_if_present)

    def remove(self) -> None:
        """Remove this directory with everything in it (nothing if it does not exist)."""
        def remove_if_present() -> None:
            if self.fs.exists(self.root):
                self.fs.rm(self.root, recursive=True)

        self._call(self.url, remove_if_present)

    def size(self, name: str) -> int:
        return self._call(self.url_of(name), lambda: int(self.fs.size(self.path(name))))

    def read_text(self, name: str) -> str:
        """A whole small text file, in one request: one rewritten meanwhile (a lease renewed,
        a version committed) reads as either version. A file object would ask twice (its size,
        then its bytes if unchanged) and fail when the file changed in between."""
        data = self._call(self.url_of(name), lambda: bytes(self.fs.cat_file(self.path(name))))
        STORAGE_READ_BYTES.inc(len(data))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise FormatError(self.url_of(name), f"not UTF-8 text (byte {error.start} is "
                                                 f"{data[error.start:error.start + 1]!r}); "
                                                 "restore the file, or delete it") from error
        # Decoded as a text-mode open would: universal newlines.
        return io.StringIO(text, newline=None).read()

    def write_text(self, name: str, text: str) -> None:
        """Write a small text file atomically: readers see the old or the new content."""
        with self.writing(name) as local_path, open(local_path, "w", encoding="utf-8") as file:
            file.write(text)

    def delete(self, name: str) -> None:
        def delete_if_present() -> None:  # so that a retry after a lost reply is harmless
            if self.fs.exists(self.path(name)):
                self.fs.rm(self.path(name), recursive=True)

        self._call(self.url_of(name), delete_if_present)

    def copy(self, name: str, target: Directory, target_name: str | None = None) -> None:
        """Copy a file into another directory (server-side when both are on one backend)."""
        target_name = target_name or name
        if target.fs is self.fs or (self.is_local and target.is_local):
            def copy_in_place() -> None:
                target.fs.makedirs(target.root, exist_ok=True)
                self.fs.copy(self.path(name), target.path(target_name))

            self._call(self.url_of(name), copy_in_place)
            return
        with (self.open_read(name) as source, target.writing(target_name) as local_path,
              open(local_path, "wb") as sink):
            shutil.copyfileobj(source, sink)

    def makedirs(self) -> None:
        self._call(self.url, lambda: self.fs.makedirs(self.root, exist_ok=True))

    def check_writable(self) -> None:
        """Refuse now, rather than after hours of work, a local directory where no file can be
        made (read-only, no permission, a symlink loop or a file in its path): by making and
        removing an empty file in it, and the folders it lacks, so that nothing is left
        behind. Object stores are not probed."""
        if not self.is_local:
            return
        missing = []
        folder = self.root
        with local_errors_named(self.url):
            while not _exists(folder) and os.path.dirname(folder) != folder:
                missing.append(folder)
                folder = os.path.dirname(folder)
            made: list[str] = []
            try:
                for folder in reversed(missing):
                    with contextlib.suppress(FileExistsError):  # made meanwhile by another
                        os.mkdir(folder)
                        made.append(folder)
                os.unlink(_create_temp_file(self.root, ".tessera-probe-", ".tmp"))
            except FileNotFoundError as error:  # /proc and the like: no files made there
                raise BadInputError(f"{self.url}: no file can be made there ({error.strerror});"
                                    " name another place") from error
            finally:
                for folder in reversed(made):
                    with contextlib.suppress(OSError):  # another's file appeared in it
                        os.rmdir(folder)

    @contextlib.contextmanager
    def open_read(self, name: str) -> Iterator[IO[bytes]]:
        """A seekable binary file; remote backends fetch only the ranges that are read, and
        each read waits out outages as every other call does."""
        url = self.url_of(name)
        file = self._call(url, lambda: self.fs.open(self.path(name), "rb",
                                                     block_size=REMOTE_BLOCK_SIZE))
        try:
            reader = CountingReader(file, url, _call_once if self.is_local else self._call)
            yield cast(IO[bytes], reader)  # it has what readers of a binary file call
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
        streamed PUT (or a multipart upload, completed in one request), which is atomic there,
        so repeating an upload after an outage publishes the same file once. On failure
        nothing is published and the temporary file is removed, so readers never see a
        half-written file; a local disk error (full, read-only...) raised meanwhile, by the
        block too, becomes the Tessera error of its kind naming `name` (`os_errors`).
        """
        url = self.url_of(name)
        if self.is_local:
            self.makedirs()
            folder = self.root
            with local_errors_named(url):
                temp_path = _create_temp_file(folder, f".{name}.", ".tmp")
        else:  # a local disk error names the local folder: the bucket is not at fault
            folder = tempfile.gettempdir()
            with local_errors_named(f"{folder} (the local copy of {url})"):
                _remove_killed_uploads(folder)
                temp_path = _create_temp_file(folder, f"{UPLOAD_PREFIX}{os.getpid()}-",
                                              f"-{name}", private=True)
        where = url if self.is_local else f"{temp_path} (the local copy of {url})"
        try:
            with local_errors_named(where, stand_in=temp_path):
                yield temp_path
                size = os.path.getsize(temp_path)
                if self.is_local:
                    _fsync(temp_path)
                    os.replace(temp_path, self.path(name))
                    _fsync_directory(self.root)
            if not self.is_local:
                self._call(url, lambda: self.fs.put_file(temp_path, self.path(name)))
            STORAGE_WRITTEN_BYTES.inc(size)
        finally:
            if os.path.exists(temp_path):
                os.unlink(temp_path)

    def _call(self, location: str, operation: Callable[[], T]) -> T:
        return call_with_retries(location, operation, timeout=self.retry_timeout,
                                 storage_options=self.storage_options)


class CountingReader:
    """A file whose reads are counted and, on remote backends (`call` retries), wait out
    outages: a failed read is repeated from the same offset, so HDF5 (which reads through
    it) never sees the outage."""

    def __init__(self, file: IO[bytes], url: str,
                 call: Callable[[str, Callable[[], Any]], Any]) -> None:
        self._file = file
        self._url = url
        self._call = call

    def read(self, size: int = -1) -> bytes:
        data = bytes(self._repeatable(lambda: self._file.read(size)))
        STORAGE_READ_BYTES.inc(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        count = int(self._repeatable(lambda: self._file.readinto(buffer)))  # type: ignore[attr-defined]
        STORAGE_READ_BYTES.inc(count)
        return count

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def _repeatable(self, read: Callable[[], Any]) -> Any:
        offset = self._file.tell()

        def read_from_offset() -> Any:
            self._file.seek(offset)
            return read()

        return self._call(self._url, read_from_offset)


def _call_once(location: str, operation: Callable[[], T]) -> T:
    with local_errors_named(location):
        return operation()


def place_of(url: str) -> str:
    """What `url` names, however spelled: a local path with its links, `..` and trailing
    slash resolved; a URL as written, without a trailing slash."""
    return url.rstrip("/") if "://" in url else os.path.realpath(url)


def _is_s3(url: str) -> bool:
    return url.split("://", 1)[0] in ("s3", "s3a")


def _filesystem_options(url: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """The options fsspec gets for `url`.

    Other processes (Hogwild workers, other trainers) write here too: a cached listing would
    hide their files or report stale sizes, so object stores are asked each time. On S3,
    Tessera's retry loop is the only one (botocore's stays off unless `config_kwargs` sets
    it), so that the wait stays within storage_retry_timeout: botocore would otherwise retry
    a refused connection for up to about 15 s, and s3fs a timed-out read 5 times (75 s),
    before Tessera saw either.
    """
    options = {"use_listings_cache": False, **storage_options}
    if _is_s3(url):
        config_kwargs = dict(options.get("config_kwargs") or {})
        config_kwargs.setdefault("retries", {"total_max_attempts": 1})
        options["config_kwargs"] = config_kwargs
    return options


def _create_temp_file(folder: str, prefix: str, suffix: str, *, private: bool = False) -> str:
    """Create an empty file of a new name with the mode a plain open() gives (0666 & ~umask),
    or 0600 when `private` (the local copy of an upload: only this user reads it).

    Not mkstemp for the others: its files are 0600, so checkpoints renamed into place would
    be unreadable to the other users of a shared disk or volume.
    """
    while True:
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             0o600 if private else 0o666))
        except FileExistsError:
            continue
        return path


@functools.cache
def _remove_killed_uploads(folder: str) -> None:
    """Delete, once per process, the local copies of uploads whose process is gone (a kill
    skips the clean-up of `writing`): a partition's copy is gigabytes."""
    for name in os.listdir(folder):
        pid = name.removeprefix(UPLOAD_PREFIX).partition("-")[0]
        if name.startswith(UPLOAD_PREFIX) and pid.isdigit() and not process_is_running(int(pid)):
            with contextlib.suppress(OSError):  # another process removed it first
                os.unlink(os.path.join(folder, name))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(path: str) -> None:
    with contextlib.suppress(OSError):  # not every platform can fsync a directory
        _fsync(path)


def _exists(path: str) -> bool:
    """Whether something is at `path`; False only when nothing is (a symlink loop, a file in
    the path, a refused permission raise their OSError instead of passing for absent)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    return True
