"""Idle OpenMP threads of the `tessera` command sleep soon after a parallel region.

After torch runs an operation on several threads (a bucket's shuffle, evaluation), libgomp's
idle threads spin for 300,000 pauses before they sleep: milliseconds to tens of milliseconds,
by the CPU. Hogwild worker threads that start right then find a core taken, and where a bucket
trains in tens of milliseconds that spin is a tenth of its time. A shorter spin, still long
enough to bridge the gaps between the parallel regions of one operation, gives the core back.
libgomp reads the setting once, when torch loads it; one the user set is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

# Pauses an idle thread spins before sleeping (libgomp's `GOMP_SPINCOUNT`).
SPIN_COUNT = 10_000


def shorten_spinning(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set the spin count unless torch (and so libgomp) is loaded already or the user chose
    one, directly or through `OMP_WAIT_POLICY`; whether it was set."""
    if "torch" in sys.modules or "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return False
    environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return True
