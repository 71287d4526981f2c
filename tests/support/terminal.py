"""Run `tessera` under a pseudo-terminal, as from a shell, and keep when each piece of output
arrived: what a person sees, and how often the live line moved."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# One update of the live line: a carriage return and an erase, then the line.
UPDATE_START = b"\r\x1b[2K"
LIVE_UPDATE = re.compile(r"\r\x1b\[2K([^\r\n]*)")


@dataclass(frozen=True)
class TerminalRun:
    """The output of one command (line ends as written) and each update of its live line
    with the time it arrived (seconds since the command started)."""

    text: str
    updates: list[tuple[float, str]]
    returncode: int


def run_on_terminal(*args: str, cwd: Path | None = None, silence_limit: float = 120) -> TerminalRun:
    """`tessera ARGS` with stdout and stderr both on a fresh pseudo-terminal."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "tessera", *args], stdin=follower,
                               stdout=follower, stderr=follower, close_fds=True, cwd=cwd)
    os.close(follower)
    output, times = bytearray(), []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], silence_limit)
            if not ready:
                raise TimeoutError(f"tessera {' '.join(args)}: no output for {silence_limit} s")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: every writer is gone
                break
            if not chunk:
                break
            output += chunk
            # Each new start of an update arrived now.
            times += [time.monotonic() - started] * (output.count(UPDATE_START) - len(times))
    finally:
        os.close(leader)
        code = process.wait(timeout=60)
    text = output.decode(errors="replace")
    updates = list(zip(times, (match.group(1) for match in LIVE_UPDATE.finditer(text))))
    return TerminalRun(text.replace("\r\n", "\n"), updates, code)
