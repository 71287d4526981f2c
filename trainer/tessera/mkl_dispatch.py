"""Lets torch's MKL choose its code by the CPU's features on every vendor's CPU.

MKL runs its AVX-512 matrix products only where it finds an Intel CPU; elsewhere (AMD's
AVX-512 CPUs, for one) it falls back to code at half their speed. The compiled kernels
(`_kernels.c`) define the one function MKL asks, answering yes; loaded into the global symbol
scope before torch, that answer is the one MKL finds. Results stay float32 products: only the
instructions computing them change. It takes effect only when `tessera` is imported before
torch (as the CLI does); `TESSERA_MKL_ANY_CPU=0` in the environment turns it off.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys


def library() -> str | None:
    """The path of the kernels' library (None where it was not built)."""
    spec = importlib.util.find_spec("tessera._kernels")
    return None if spec is None else spec.origin


def allow_any_cpu() -> bool:
    """Load the kernels' library globally, ahead of torch; whether it was."""
    if os.environ.get("TESSERA_MKL_ANY_CPU", "1") == "0" or "torch" in sys.modules:
        return False
    path = library()
    if path is None:  # built without a C compiler
        return False
    try:
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    except OSError:
        return False
    return True


# Whether MKL was told before torch loaded it.
ENABLED = allow_any_cpu()
