"""How long this process has run: a run's start-up (imports, CUDA's initialisation, reading
the checkpoint) is reported apart from its training, and starts before any code of ours."""

from __future__ import annotations

import os
import time
from pathlib import Path

IMPORTED_AT = time.monotonic()  # the fallback's origin: this module's import


def process_age() -> float:
    """Seconds since the process started, by the kernel's record of its start (Linux);
    elsewhere, since Tessera was imported."""
    try:
        # Fields after the command name, which may hold spaces: the 20th is the start time in
        # clock ticks since boot.
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - IMPORTED_AT
