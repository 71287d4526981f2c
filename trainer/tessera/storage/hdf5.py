"""HDF5 files in a `Directory`: opening one to read, writing one atomically, its format version.

Edge buckets and checkpoint files are HDF5 files whose root group carries the attribute
`format_version` = 1. They are read by path from a local disk and through a seekable remote
file (which fetches only the byte ranges HDF5 asks for) from object stores, and written into a
local temporary file that is published whole. Every way a file can fail to open becomes an
error that names the file.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from ..errors import BadInputError, FormatError, TesseraError
from ..os_errors import classify_local
from .failures import one_line
from .fs import Directory

logger = logging.getLogger(__name__)

FORMAT_VERSION_ATTR = "format_version"
FORMAT_VERSION = 1
# The CRC-32 of a dataset's bytes as written (a partition's embeddings row after row, a model
# parameter, an optimizer state, an edge column), an attribute of the dataset: a whole read
# checks it, so a bit flipped at rest is found before it is trained on or exported. PBG
# ignores it; datasets without it are read unchecked.
CRC32_ATTR = "crc32"


_gc_pause_lock = threading.Lock()
_gc_pause_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector off while HDF5 reads through a remote file object.

    h5py holds its global lock while it waits for fsspec's IO thread to fetch bytes; if a
    collection runs on that thread and frees an h5py object, which needs the same lock, the
    process deadlocks (h5py issue #2019). Pauses nest across threads: the last one out
    restores the collector.
    """
    global _gc_pause_depth, _gc_was_enabled
    with _gc_pause_lock:
        if _gc_pause_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pause_depth += 1
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pause_depth -= 1
            if _gc_pause_depth == 0 and _gc_was_enabled:
                gc.enable()


# HDF5's own file locks are off. Tessera's writers never share a file (each writes its own
# temporary file, published by a rename, under the checkpoint's lease), so the locks guard
# nothing here; where they are not supported (NFS, Lustre: ENOLCK, ENOSYS) or another program
# holds one (h5py in a notebook, a file opened for writing), they refused a sound file, which
# a reader took for a corrupt one.
HDF5_LOCKING = False


@contextlib.contextmanager
def reading_hdf5(directory: Directory, name: str, missing_hint: str = "") -> Iterator[h5py.File]:
    """Open `name` for reading; a missing file is a BadInputError, a corrupt one a FormatError
    (also when the corruption shows only as the block reads it), a local disk error the
    error of its kind (`os_errors`)."""
    url = directory.url_of(name)
    with contextlib.ExitStack() as stack:
        local_path = None
        try:
            local_path = stack.enter_context(directory.local_read_path(name))
            if local_path is None:
                stack.enter_context(_cyclic_gc_paused())
            source = local_path or stack.enter_context(directory.open_read(name))
            # No chunk cache: readers take whole row ranges, which HDF5 then reads straight
            # into their arrays; a cache (1 MiB per dataset) would only add to a bucket's
            # memory.
            file = stack.enter_context(h5py.File(source, "r", rdcc_nbytes=0,
                                                 locking=HDF5_LOCKING))
        except FileNotFoundError as error:
            raise BadInputError(f"{url}: file not found{missing_hint}") from error
        except OSError as error:  # h5py's way of saying "truncated" or "not HDF5 at all"
            raise classify_local(error, url) or FormatError(
                url, f"not a readable HDF5 file ({one_line(error)}); restore it from a copy, "
                     "or write it again") from error
        try:
            yield file
        except (OSError, RuntimeError, KeyError) as error:
            unreadable = _unreadable(error, url, local_path)
            if unreadable is None:
                raise
            raise unreadable from error


def _unreadable(error: BaseException, url: str, local_path: str | None) -> TesseraError | None:
    """The error for a failure while reading an open file: a local disk error (naming the file
    it is about), else, if HDF5 raised it, a corrupt file; None for the block's own errors."""
    if isinstance(error, OSError) and error.filename not in (None, local_path):
        return classify_local(error)  # about another file than this one
    classified = classify_local(error, url)
    if classified is None and raised_by_h5py(error):  # "Object visitation failed"...
        return _corrupt(url, error)
    return classified


def _corrupt(url: str, error: BaseException) -> FormatError:
    return FormatError(url, f"corrupt: HDF5 cannot read it ({one_line(error)}); replace it "
                            "(import again for an edge bucket, train again for a checkpoint)")


def raised_by_h5py(error: BaseException) -> bool:
    """Whether the innermost frame of the error's traceback is h5py's."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "h5py" in frames[-1].filename.replace("\\", "/").split("/")


@contextlib.contextmanager
def writing_hdf5(directory: Directory, name: str) -> Iterator[h5py.File]:
    """Create `name` with its format version; it becomes visible only if the block succeeds."""
    # No chunk cache: writers hand HDF5 whole chunks, and a cache per open file would make
    # memory grow with the number of buckets being written at once.
    with directory.writing(name) as temp_path, new_hdf5_file(temp_path, rdcc_nbytes=0) as file:
        file.attrs[FORMAT_VERSION_ATTR] = FORMAT_VERSION
        yield file


@contextlib.contextmanager
def new_hdf5_file(path: str, **options: Any) -> Iterator[h5py.File]:
    """Create the HDF5 file `path` and close it however the block ends: a write that failed
    (a full disk) leaves a file that HDF5 may not let go of at the first close, and a file
    left open crashes the process at exit. A failure of the last writes, at close, is the
    OSError of its errno."""
    file = h5py.File(path, "w", locking=HDF5_LOCKING, **options)
    try:
        yield file
    except BaseException:
        _close_after_failure(file)
        raise
    try:
        file.close()
    except RuntimeError as error:
        _close_after_failure(file)
        raise _os_error_of(error, path) from error


# A failed write leaves an HDF5 file that may take more than one close to let go; a file left
# open crashes the process as the library shuts down (a segmentation fault at exit).
_CLOSE_ATTEMPTS = 3
_DEALLOC = "h5py._objects.ObjectID.__dealloc__"


def _is_failed_release(error: BaseException | None, where: object = None) -> bool:
    """Whether `error` is HDF5 failing to release an object of a file whose write failed:
    each repeats the write's error (a full disk), which the command reports once."""
    if not isinstance(error, (RuntimeError, OSError)):
        return False
    if str(where) == _DEALLOC:
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and frames[-1].name.endswith("_dealloc") \
        and "h5py" in frames[-1].filename


def _hide_failed_releases(unraisable: Any, passed_on: Any = sys.unraisablehook) -> None:
    """Python's hook for errors nobody can catch, without HDF5's failed releases (h5py prints
    each through both hooks, a traceback each)."""
    if _is_failed_release(unraisable.exc_value, unraisable.object):
        logger.debug("HDF5 failed to release an object: %s", unraisable.exc_value)
        return
    passed_on(unraisable)


def _print_uncaught(kind: type[BaseException], error: BaseException, trace: Any,
                    passed_on: Any = sys.excepthook) -> None:
    if _is_failed_release(error):
        logger.debug("HDF5 failed to release an object: %s", error)
        return
    passed_on(kind, error, trace)


sys.unraisablehook = _hide_failed_releases
sys.excepthook = _print_uncaught


def _close_after_failure(file: h5py.File) -> None:
    for _ in range(_CLOSE_ATTEMPTS):
        try:
            file.close()
            return
        except Exception:  # noqa: BLE001 - the error being raised already says what went wrong
            continue


def _os_error_of(error: RuntimeError, path: str) -> Exception:
    """HDF5 reports a failed write at close as a RuntimeError whose text holds the errno: as
    an OSError of that errno, `os_errors` names it; other errors stay as they are."""
    found = re.search(r"errno = (\d+)", str(error))
    if found is None:
        return error
    number = int(found.group(1))
    return OSError(number, os.strerror(number), path)


class DatasetFile(io.RawIOBase):
    """A 1-D dataset of bytes as a seekable binary file, read and written in place.

    torch.save writes into a file piece by piece and torch.load reads each tensor into its
    own memory (`readinto`): through this file a saved optimizer state moves between the
    dataset and the tensors without a copy of the whole state in memory beside them.
    """

    def __init__(self, dataset: h5py.Dataset) -> None:
        super().__init__()
        if dataset.ndim != 1 or dataset.dtype.itemsize != 1:
            raise ValueError(f"expected a 1-D dataset of bytes, got shape {dataset.shape} "
                             f"of {dataset.dtype}")
        self.dataset = dataset
        self.size = len(dataset)
        self.position = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return bool(self.dataset.file.mode == "r+")

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        if start + offset < 0:
            raise ValueError(f"negative seek position {start + offset}")
        self.position = start + offset
        return self.position

    def readinto(self, buffer: Any) -> int:
        target = np.frombuffer(buffer, dtype=self.dataset.dtype)
        count = max(0, min(len(target), self.size - self.position))
        if count:  # HDF5 rejects empty selections
            self.dataset.read_direct(target, source_sel=np.s_[self.position:self.position + count],
                                     dest_sel=np.s_[:count])
        self.position += count
        return count

    def readall(self) -> bytes:
        rest = bytearray(max(0, self.size - self.position))
        self.readinto(rest)
        return bytes(rest)

    def write(self, buffer: Any) -> int:
        data = np.frombuffer(buffer, dtype=self.dataset.dtype)
        end = self.position + len(data)
        if end > self.size:
            raise OSError(f"writing {len(data)} bytes at {self.position} would pass the "
                          f"end of a dataset of {self.size}")
        if len(data):
            self.dataset.write_direct(data, dest_sel=np.s_[self.position:end])
        self.position = end
        return len(data)


def check_format_version(file: h5py.File, url: str) -> None:
    """Refuse files of another format version: their datasets may mean something else."""
    if FORMAT_VERSION_ATTR not in file.attrs:
        raise FormatError(url, f"root attribute '{FORMAT_VERSION_ATTR}' is missing "
                               f"(expected {FORMAT_VERSION})")
    version = file.attrs[FORMAT_VERSION_ATTR]
    if isinstance(version, np.generic):  # show 2, not np.int64(2)
        version = version.item()
    if not _is_integer(version) or int(version) != FORMAT_VERSION:
        raise FormatError(url, f"{FORMAT_VERSION_ATTR} is {version!r}, expected {FORMAT_VERSION}")


def check_crc32(dataset: h5py.Dataset, url: str, crc: int, what: str, remedy: str) -> None:
    """Refuse a dataset whose bytes read (their CRC-32 `crc`) are not those written, when the
    dataset says what those were; `remedy` says how to get them back."""
    written = dataset.attrs.get(CRC32_ATTR)
    if written is not None and int(written) != crc:
        raise FormatError(url, f"corrupt: {what} read do not match the CRC-32 written with "
                               f"them ({crc:08x}, not {int(written):08x}), so bytes changed "
                               f"after they were written; {remedy}; if you changed them on "
                               f"purpose, delete the dataset's {CRC32_ATTR} attribute")


def _is_integer(value: object) -> bool:
    try:
        return int(value) == value  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False
