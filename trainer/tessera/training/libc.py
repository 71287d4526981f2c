"""The C library's functions that Python does not expose (mallopt, malloc_trim, prctl)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache  # find_library runs `ldconfig -p`: not once per bucket in every process
def libc_function(name: str) -> Any:
    """The C library's function `name`, or None where there is no such library or function
    (not glibc, not Linux)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
