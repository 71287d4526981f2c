"""The lock server's view of which peers are alive, and whether the job has been aborted.

Every other process heartbeats the lock server. A peer silent for longer than the peer
time-out is lost, which aborts the job: from then on every heartbeat and every call answers
with the abort's message, so each process stops with an error naming the lost peer. A peer
that fails on its own reports its error, which aborts the job the same way (with its exit
code, so that bad input stays bad input for whoever restarts the job).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import EXIT_BAD_INPUT, BadInputError, TesseraError, TransientError


@dataclass(frozen=True)
class Abort:
    message: str
    exit_code: int

    def error(self) -> TesseraError:
        kind = BadInputError if self.exit_code == EXIT_BAD_INPUT else TransientError
        return kind(self.message)


class Liveness:
    """Last heartbeat of each peer (by rank), who has left, and the abort if any."""

    def __init__(self, ranks: Iterable[int], timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        now = clock()
        self.last_seen = {rank: now for rank in ranks}
        self.departed: set[int] = set()
        self.abort: Abort | None = None
        self.aborted_at = 0.0
        self.lock = threading.Lock()

    def start(self) -> None:
        """Everyone has joined: silence counts from now (not from before the rendezvous,
        which may take minutes while pods start)."""
        now = self.clock()
        with self.lock:
            self.last_seen = {rank: max(seen, now) for rank, seen in self.last_seen.items()}

    def seen(self, rank: int) -> Abort | None:
        """Record a heartbeat; returns the abort, if the job was aborted."""
        with self.lock:
            self.last_seen[rank] = self.clock()
            return self.abort

    def left(self, rank: int) -> None:
        """The peer finished its work and stops heartbeating."""
        with self.lock:
            self.departed.add(rank)

    def lost(self) -> list[tuple[int, float]]:
        """Peers silent for longer than the time-out, with how long they have been silent."""
        now = self.clock()
        with self.lock:
            return [(rank, now - seen) for rank, seen in self.last_seen.items()
                    if rank not in self.departed and now - seen > self.timeout]

    def fail(self, message: str, exit_code: int) -> bool:
        """Abort the job (the first failure wins); True if this call aborted it."""
        with self.lock:
            if self.abort is not None:
                return False
            self.abort = Abort(message, exit_code)
            self.aborted_at = self.clock()
            return True

    def everyone_gone(self) -> bool:
        """After an abort: whether every peer has left (each says so once it has the abort's
        message), or the time-out has passed since the abort (the rest are gone too)."""
        with self.lock:
            return self.departed >= set(self.last_seen) \
                or self.clock() - self.aborted_at > self.timeout

    def everyone_left(self) -> bool:
        with self.lock:
            return self.departed >= set(self.last_seen)
