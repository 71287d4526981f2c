"""A peer's lifeline to the lock server, and how a role stops when the job is aborted.

A background thread heartbeats the lock server about once a second. The answer says whether
the job was aborted (another peer was lost or failed) and whether it has finished. An abort,
or a lock server that stays silent for the peer time-out, ends this process at once with the
abort's exit code and a message naming the peer that was lost, whatever the main thread is
doing (it may be blocked in a transfer or in a Hogwild worker's bucket): the job is over and
the next start resumes from the last committed checkpoint.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import EXIT_TRANSIENT, TesseraError
from ..vocabulary import Role
from .lock_client import LockClient
from .rendezvous import World, leave_world


def exit_now(world: World, message: str, exit_code: int) -> None:
    """Print the error as the CLI does, stop this process's workers, and exit."""
    role, _ = world.layout.role_of(world.rank)
    command = "train" if role is Role.TRAINER else role.value
    print(f"tessera {command}: error: {message}", file=sys.stderr, flush=True)
    for child in multiprocessing.active_children():
        child.kill()
    sys.stdout.flush()
    os._exit(exit_code)


class Heartbeat:
    """Heartbeats the lock server in the background until stopped."""

    def __init__(self, world: World, lock: LockClient,
                 on_abort: Callable[[str, int], None] | None = None) -> None:
        self.world = world
        self.lock = lock
        self.on_abort = on_abort or (lambda message, code: exit_now(world, message, code))
        self.finished = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()

    def wait_until_finished(self) -> None:
        """Block until the lock server says the job is done (an abort exits instead)."""
        while not self.finished.wait(0.1):
            pass

    def _loop(self) -> None:
        settings = self.world.settings
        last_answer = time.monotonic()
        while not self.stopping.is_set():
            try:
                status = self.lock.heartbeat()
            except TesseraError as error:
                silent = time.monotonic() - last_answer
                if silent > settings.peer_timeout and not self.stopping.is_set():
                    self.on_abort(f"lost the lock server: {error} (no answer for "
                                  f"{silent:.1f} s)", EXIT_TRANSIENT)
                    return
            else:
                last_answer = time.monotonic()
                if status["abort"] is not None and not self.stopping.is_set():
                    self._acknowledge()
                    self.on_abort(*status["abort"])
                    return
                if status["finished"]:
                    self.finished.set()
            self.stopping.wait(settings.heartbeat_interval)

    def _acknowledge(self) -> None:
        """Tell the lock server this process got the abort and is leaving, so that it stays
        up until everyone has heard (best effort: it may be leaving already)."""
        try:
            self.lock.leaving(timeout=self.world.settings.heartbeat_interval)
        except TesseraError:
            pass


@contextmanager
def peer_session(world: World, lock: LockClient) -> Iterator[Heartbeat]:
    """A peer's time in the job: heartbeating throughout; at the end, leaving with the
    others (a graceful RPC shutdown) or, on an error, telling the lock server why this
    process fails (so that every other process stops with that message) and leaving at once."""
    heartbeat = Heartbeat(world, lock).start()
    try:
        yield heartbeat
    except BaseException as error:
        heartbeat.stop()
        code = error.exit_code if isinstance(error, TesseraError) else 1
        try:
            lock.fail(f"{world.peers.describe(world.name)} failed: {error}", code)
        except TesseraError:
            pass  # the lock server is gone too; the others will notice on their own
        leave_world(graceful=False, timeout=world.settings.peer_timeout)
        raise
    lock.leaving()
    heartbeat.stop()
    leave_world(graceful=True, timeout=world.settings.peer_timeout)
