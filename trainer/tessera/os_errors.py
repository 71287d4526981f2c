"""What a local disk's OSError means: a full disk to free, or a path the user must change.

The operating system says why a file could not be read or written in `errno`; this module
maps that number to Tessera's two families, so that a full disk (which another attempt, on
this node or another, may not meet) exits 75 and a read-only disk, a symlink loop, a file in
the middle of a path or a refused permission exit 65, each in one line naming the path.
A missing file keeps its own type: callers ask for files that may not exist yet.
"""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator

from .errors import BadInputError, TesseraError, TransientError

# What each errno means for the user: the reason, then what to do.
TRANSIENT = {
    errno.ENOSPC: "no space left on device; free some space (or name another disk), then retry",
    errno.EDQUOT: "disk quota exceeded; free some space (or name another disk), then retry",
    errno.EIO: "input/output error (a failing disk or mount); retry, or name another disk",
    errno.EMFILE: "too many open files in this process; raise its limit (`ulimit -n`, the "
                  "hard one too) or retry with fewer workers",
    errno.ENFILE: "too many open files on this machine; retry when fewer are open",
}
# Errnos about the process or the machine, not about the file at hand (if any).
PROCESS_LIMITS = frozenset({errno.EMFILE, errno.ENFILE})
BAD_PLACE = {
    errno.EROFS: "read-only file system; name a place that can be written",
    errno.ELOOP: "too many levels of symbolic links (a symlink loop?); fix the link or name "
                 "another path",
    errno.ENOTDIR: "a part of this path is a file, not a folder; name another path",
    # Where Tessera makes a folder that exists as something else (a folder already there is
    # no error; an exclusive create of a file handles this errno itself).
    errno.EEXIST: "already exists and is not a folder, where a folder is needed; remove it "
                  "or name another path",
    errno.EISDIR: "is a folder, where a file is needed; name a file",
    errno.EACCES: "permission denied; grant access to it or name another path",
    errno.EPERM: "operation not permitted; grant access to it or name another path",
    errno.ENAMETOOLONG: "file name too long; name a shorter path",
    errno.EFBIG: "file too large for this file system; name another disk",
}


def classify_local(error: BaseException, location: str | None = None) -> TesseraError | None:
    """The Tessera error for an OSError of a known errno, naming `location` (else the
    error's own file name); None for anything else, which keeps its type."""
    if not isinstance(error, OSError) or error.errno is None:
        return None
    where = location or _filename(error)
    prefix = f"{where}: " if where else ""
    if error.errno in TRANSIENT:
        return TransientError(prefix + TRANSIENT[error.errno])
    if error.errno in BAD_PLACE:
        return BadInputError(prefix + BAD_PLACE[error.errno])
    return None


@contextlib.contextmanager
def local_errors_named(location: str, stand_in: str | None = None) -> Iterator[None]:
    """Turn an OSError of a known errno inside the block into the Tessera error naming
    `location`; other errors pass unchanged.

    With `stand_in` (the temporary file a block writes for `location`, whose name would mean
    nothing to the user), an error about any other file names that file: the block was
    doing something else then.
    """
    try:
        yield
    except OSError as error:
        own = stand_in is None or _filename(error) in (None, stand_in)
        classified = classify_local(error, location if own else None)
        if classified is None:
            raise
        raise classified from error


def _filename(error: OSError) -> str | None:
    name = error.filename
    if isinstance(name, bytes):
        return name.decode(errors="replace")
    return None if name is None else str(name)


# torch's words when a tensor cannot be made in shared memory (`/dev/shm`, where Hogwild
# worker processes share the tables), ending with the errno: "unable to allocate shared
# memory(shm) for file </torch_...>: No space left on device (28)".
_SHARED_MEMORY_FAILURE = re.compile(r"(shared memory|</torch_\d+_\d+).*: ([^:]+) \((\d+)\)$")


def shared_memory_error(error: BaseException) -> TesseraError | None:
    """The Tessera error for torch failing to make a tensor in shared memory (a full or
    small /dev/shm: Docker's default is 64 MB); None for any other error."""
    found = _SHARED_MEMORY_FAILURE.search(str(error).strip()) \
        if isinstance(error, RuntimeError) else None
    if found is None:
        return None
    reason, number = found.group(2), int(found.group(3))
    family = TransientError if number in TRANSIENT else BadInputError
    return family(f"shared memory (/dev/shm), where Hogwild worker processes share the tables: "
                  f"{reason.lower()}; give it more room (docker run --shm-size; on Kubernetes a "
                  "memory-backed emptyDir at /dev/shm, as the operator's pods have) or lower "
                  "dimension, then retry")
