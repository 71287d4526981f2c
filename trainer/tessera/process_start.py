"""What the command mends or refuses before anything else runs: closed standard streams, a
working directory that was deleted, and a low limit on open files.

A process started with descriptor 0, 1 or 2 closed (`tessera eval ... >&-`, a service
manager's bare environment) has `sys.stdout` (or `stdin`, `stderr`) None: its first print or
flush is an AttributeError traceback, and worker processes inherit the hole. Such a stream is
opened on /dev/null instead, which is what Python's own print does with it: output dropped,
as the person who closed it asked. A deleted working directory makes torch's MKL abort the
process as it loads (exit 2, "oneMKL FATAL ERROR"); it is refused first, with the directory
named.

Hogwild's workers receive each shared table as a file descriptor, and a run with many
partitions and workers may hold more than the soft limit that shells often set (1024) while
the hard limit allows far more; the soft limit is raised to the hard one, as Go's runtime
does for every program, so that such a run does not end in "too many open files".
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys

from .errors import BadInputError

STREAMS = (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w"))


def open_closed_streams() -> None:
    """Open each closed standard descriptor on /dev/null and give Python a stream for it."""
    for name, descriptor, mode in STREAMS:
        try:
            os.fstat(descriptor)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != descriptor:
            os.dup2(null, descriptor)
            os.close(null)
        setattr(sys, name, open(descriptor, mode, encoding="utf-8", closefd=False))


def check_working_directory() -> None:
    """Refuse to start in a directory that no longer exists."""
    try:
        os.getcwd()
    except FileNotFoundError:
        shown = os.environ.get("PWD") or "the current directory"
        raise BadInputError(f"{shown}: the working directory was deleted; change to one that "
                            "exists and run the command again") from None


def raise_open_file_limit() -> None:
    """Raise the soft limit on open files to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        with contextlib.suppress(ValueError, OSError):  # a hard limit the kernel caps lower
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
