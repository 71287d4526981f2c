"""The lease on a checkpoint path: one job at a time writes its checkpoints.

A job (a single-machine `tessera train`, or a distributed job's lock server, on behalf of all
its trainers) takes the lease before it touches the checkpoint directory, renews it from a
heartbeat thread while it trains, and releases it at the end. The lease is the JSON file
`training_lease.json` in the checkpoint directory: the holder's command, host, pid and a random
token, when it started, its last heartbeat and when it expires without one.

A holder is presumed dead, and its lease taken over at once, when it ran on this host and its
process is gone (its pid is not running, or is this very process's pid under another token:
a restarted container gets the same pid); on another host, once the expiry it wrote has
passed, compared with this host's clock (a minute covers ordinary clock skew).

Object stores have no create-if-absent in every server, so the lease is taken by writing the
whole file (atomically, through `Directory`), waiting `settle` seconds and reading it back:
of runs that write it at about the same time, only the last writer reads its own token. The
guarantee: two runs never both hold the lease when each one's read-then-write takes less
than `settle` seconds (milliseconds on a disk, a few requests on an object store). A holder
that still finds another token in the file later (a contender slower than that, or one that
took over a lease whose heartbeats could not reach the storage until it expired) stops at
its next heartbeat, exit 75, before writing anything more.

`tessera import` holds the same lease, in a file of its own, on its entity_path
(`importing.lease`): one import at a time publishes a dictionary there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..errors import EXIT_TRANSIENT, FormatError, TesseraError, TransientError
from ..processes import process_is_running
from .fs import Directory

logger = logging.getLogger(__name__)

LEASE_FILE = "training_lease.json"
HEARTBEAT_INTERVAL_S = 10.0
EXPIRY_S = 60.0  # six missed heartbeats: a holder on another host is presumed dead
# How long a contender's read-then-write may take (see the module docstring).
SETTLE_LOCAL_S = 0.1
SETTLE_REMOTE_S = 1.0


# Tries to open the lock file while another process may remove its just-made folder.
LOCK_FILE_ATTEMPTS = 5

class LeaseHeldError(TransientError):
    """Another live run holds the lease.

    Transient (exit 75), not bad input: it ends by itself, when the holder finishes or, if it
    died on another host, when its lease expires. The operator restarts a job that exits 75,
    so a restarted job is never failed for good by a predecessor that is still shutting down.
    """


@dataclass(frozen=True)
class LeaseRecord:
    """The content of the lease file."""

    token: str
    command: str
    host: str
    pid: int
    started: datetime
    heartbeat: datetime
    expires: datetime

    def to_json(self) -> str:
        return json.dumps({"token": self.token, "command": self.command, "host": self.host,
                           "pid": self.pid, "started": _stamp(self.started),
                           "heartbeat": _stamp(self.heartbeat),
                           "expires": _stamp(self.expires)}, indent=4) + "\n"

    @classmethod
    def from_json(cls, text: str, url: str, label: str = "checkpoint path") -> LeaseRecord:
        """The record in a lease file at `url`, the lease on a `label` (as messages name it)."""
        try:
            fields = json.loads(text)
            record = cls(str(fields["token"]), str(fields["command"]), str(fields["host"]),
                         int(fields["pid"]), *(datetime.fromisoformat(fields[name])
                                               for name in ("started", "heartbeat", "expires")))
        except (ValueError, KeyError, TypeError) as error:
            raise FormatError(url, f"not a lease ({error!r}); delete it if no run is using "
                                   f"this {label}") from error
        if record.pid <= 0 or any(t.tzinfo is None for t in (record.started, record.heartbeat,
                                                             record.expires)):
            raise FormatError(url, "not a lease (a pid above 0 and times with a time zone "
                                   f"expected); delete it if no run is using this {label}")
        return record

    def describe(self) -> str:
        return (f"{self.command} (pid {self.pid} on host {self.host}) since "
                f"{_stamp(self.started)}, last heartbeat {_stamp(self.heartbeat)}, expires "
                f"{_stamp(self.expires)}")


def stale_reason(lease: LeaseRecord, now: datetime, host: str, pid: int,
                 is_running: Callable[[int], bool] = process_is_running) -> str | None:
    """Why another token's lease is no longer held (None: its holder may be alive)."""
    if now >= lease.expires:
        return f"it expired at {_stamp(lease.expires)}"
    if lease.host != host:
        return None
    if lease.pid == pid:
        return f"pid {pid} on this host is this process (a restarted container)"
    if not is_running(lease.pid):
        return f"its process {lease.pid} on this host is gone"
    return None


def stop_this_process(message: str) -> None:
    """What a holder does when its lease was taken over: stop writing at once (its Hogwild
    workers too), as a crash would; the checkpoint keeps its last committed version."""
    print(message, file=sys.stderr, flush=True)
    for child in multiprocessing.active_children():
        child.kill()
    os._exit(EXIT_TRANSIENT)


class CheckpointLease:
    """This process's lease on one checkpoint directory (a subclass sets another file and
    how its messages name the directory)."""

    FILE = LEASE_FILE
    LABEL = "checkpoint path"  # what the directory is, in messages
    GUARDED = "checkpoint"  # what two runs must never write at once

    def __init__(self, directory: Directory, command: str, *,
                 interval: float = HEARTBEAT_INTERVAL_S, expiry: float = EXPIRY_S,
                 settle: float | None = None) -> None:
        self.directory = directory
        self.command = command
        self.interval = interval
        self.expiry = expiry
        self.settle = settle if settle is not None else (
            SETTLE_LOCAL_S if directory.is_local else SETTLE_REMOTE_S)
        self.url = directory.url_of(self.FILE)
        self.token = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = _now()
        self.taken = False  # by `acquire`: only then is there a lease to release

    def read(self) -> LeaseRecord | None:
        """The lease file's record (None: no lease)."""
        try:
            text = self.directory.read_text(self.FILE)
        except FileNotFoundError:
            return None
        return LeaseRecord.from_json(text, self.url, self.LABEL)

    def acquire(self) -> str | None:
        """Take the lease, or raise LeaseHeldError naming its holder.

        Returns, when the lease of a dead holder was taken over, who that was and why it
        counts as dead (for the log).
        """
        with self._contenders_in_turn():
            replaced = None
            current = self.read()
            if current is not None:
                reason = stale_reason(current, _now(), self.host, self.pid)
                if reason is None:
                    raise self._held_by(current)
                replaced = f"{current.describe()}: {reason}"
            self.started = _now()
            began = time.monotonic()
            self._write()
            # A slow storage is slow for a contender too: wait out twice our own write.
            time.sleep(max(self.settle, 2 * (time.monotonic() - began)))
            confirmed = self.read()
            if confirmed is None or confirmed.token != self.token:
                raise self._held_by(confirmed)
            self.taken = True
            return replaced

    @property
    def lock_file(self) -> str:
        """The file whose flock contenders on a local disk take in turn."""
        return f".{self.FILE}.lock"

    def taken_over_by(self) -> LeaseRecord | None:
        """Another run's record, if the lease file no longer holds this run's token (None:
        still ours, or unreadable now)."""
        try:
            current = self.read()
        except (TesseraError, OSError):
            return None
        return current if current is not None and current.token != self.token else None

    @contextlib.contextmanager
    def _contenders_in_turn(self) -> Iterator[None]:
        """On a local disk, contenders take (and release) the lease one at a time, holding an
        exclusive flock on a lock file beside it, so that none reads before another's write
        lands however slow the disk; object stores have no such lock (the settle time stands
        in for it)."""
        if not self.directory.is_local:
            yield
            return
        path = self.directory.path(self.lock_file)
        while True:
            descriptor = self._open_lock_file(path)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(descriptor).st_ino == os.stat(path).st_ino:
                    break  # not a lock file that a release removed while we waited
            os.close(descriptor)
        try:
            yield
        finally:
            os.close(descriptor)  # releases the lock

    def _open_lock_file(self, path: str) -> int:
        """The lock file, opened (made if missing) in a folder made if missing. Another
        process's probe of the path (`Directory.check_writable`, in a role starting beside
        this one) may remove the folder it made between the two: then both are made again."""
        for _ in range(LOCK_FILE_ATTEMPTS - 1):
            self.directory.makedirs()
            with contextlib.suppress(FileNotFoundError):
                return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self.directory.makedirs()
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)

    def release(self) -> None:
        """Delete the lease file if it is still ours (best effort: a lease left behind is
        taken over once its holder is found dead). A lease never taken (`acquire` failed)
        has only its lock file to remove, quietly: the error that stopped it is reported."""
        try:
            with self._contenders_in_turn():
                current = self.read() if self.taken else None
                if current is not None and current.token == self.token:
                    self.directory.delete(self.FILE)
                if self.directory.is_local:  # under the lock: see _contenders_in_turn
                    os.unlink(self.directory.path(self.lock_file))
        except (TesseraError, OSError) as error:
            if self.taken:
                logger.warning("%s: could not release the lease (%s); it expires by itself",
                               self.url, error)

    @contextlib.contextmanager
    def renewing(self, on_lost: Callable[[str], None] | None = None) -> Iterator[None]:
        """Renew the lease from a background thread while the block runs.

        Enter it after the Hogwild workers are started: they are forked only from a process
        that runs no other thread. `on_lost` is called with the error message if another run
        took the lease over (default: stop this process with exit 75).
        """
        stop = threading.Event()
        thread = threading.Thread(target=self._renew_until, name="checkpoint-lease",
                                  args=(stop, on_lost or self._stop), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _renew_until(self, stop: threading.Event, on_lost: Callable[[str], None]) -> None:
        while True:
            try:
                current = self.read()
                if current is not None and current.token != self.token:
                    on_lost(f"{self.url}: the lease on this {self.LABEL} was taken over by "
                            f"{current.describe()}; stopping, so that two runs never write "
                            f"one {self.GUARDED}")
                    return
                self._write()
            except (TesseraError, OSError) as error:  # storage trouble: the run sees it too
                logger.warning("%s: could not renew the lease (%s); retrying in %.0f s",
                               self.url, error, self.interval)
            if stop.wait(self.interval):
                return

    def _stop(self, message: str) -> None:
        stop_this_process(f"{self.command}: error: {message}")

    def _write(self) -> None:
        now = _now()
        record = LeaseRecord(self.token, self.command, self.host, self.pid, self.started, now,
                             now + timedelta(seconds=self.expiry))
        self.directory.write_text(self.FILE, record.to_json())

    def _held_by(self, holder: LeaseRecord | None) -> LeaseHeldError:
        if holder is None:
            return LeaseHeldError(f"{self.url}: another run took and released the lease on "
                                  f"this {self.LABEL} while this one was taking it; retry")
        return LeaseHeldError(
            f"{self.url}: the {self.LABEL} is in use by {holder.describe()}; wait for that "
            "run to end or stop it (a stopped run's lease is taken over at once on its own "
            "host, elsewhere once it expires)")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")
