"""Helpers of the tests that kill `tessera train` mid-run: when to strike, and waiting for it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def writing_a_file(checkpoints: Path, prefixes: tuple[str, ...] = (".",)) -> bool:
    """Whether a file is being written: its temporary file (`.NAME.XXXX.tmp`, see
    Directory.writing) exists; `prefixes` narrows it to some files."""
    return checkpoints.exists() and any(name.endswith(".tmp") and name.startswith(prefixes)
                                        for name in os.listdir(checkpoints))


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[str],
             timeout: float) -> bool:
    """Poll until `condition` holds (True) or the process exits first (False); fail the test
    if neither happens within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the training run made no progress in time"
        time.sleep(0.002)
    return True


def first_commit(log: str) -> tuple[int, tuple[int, int]] | None:
    """(version, (epoch, chunk)) of the first checkpoint a run's JSON log says it committed."""
    for line in log.splitlines():
        if line.startswith("{") and '"checkpoint committed"' in line:
            event = json.loads(line)
            return event["checkpoint_version"], (event["epoch"] - 1, event["edge_chunk"])
    return None
