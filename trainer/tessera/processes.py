"""Whether a process on this host is alive: how a lease, a staging folder or a temporary file
left by a run is known to be a dead run's, and so safe to take over or remove."""

from __future__ import annotations

import os


def process_is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
