"""The lease on a checkpoint path, on every backend: who holds it, when it is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from tessera.errors import EXIT_TRANSIENT, FormatError
from tessera.storage import lease as lease_module
from tessera.storage.fs import Directory
from tessera.storage.lease import (
    LEASE_FILE,
    CheckpointLease,
    LeaseHeldError,
    LeaseRecord,
    stale_reason,
)

HOST = socket.gethostname()
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # for what does not read the clock


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def write_lease(directory, *, host=HOST, pid, heartbeat=None, expiry_s=60.0, token="other"):
    heartbeat = heartbeat or utc_now()
    record = LeaseRecord(token, "tessera train", host, pid, heartbeat - timedelta(hours=1),
                         heartbeat, heartbeat + timedelta(seconds=expiry_s))
    directory.write_text(LEASE_FILE, record.to_json())
    return record


@pytest.fixture
def live_process():
    """A real process of this host that is alive until the test ends (or kills it)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def test_a_lease_names_its_holder_and_is_released(directory):
    lease = CheckpointLease(directory, "tessera train", settle=0.05)
    assert lease.acquire() is None
    record = json.loads(directory.read_text(LEASE_FILE))
    assert (record["command"], record["host"], record["pid"]) == ("tessera train", HOST,
                                                                  lease.pid)
    expires = datetime.fromisoformat(record["expires"])
    assert expires - datetime.fromisoformat(record["heartbeat"]) == timedelta(seconds=60)
    lease.release()
    assert LEASE_FILE not in directory.listdir()


def test_a_live_holder_on_this_host_keeps_the_lease_until_its_process_is_gone(
        directory, live_process):
    holder = write_lease(directory, pid=live_process.pid)
    before = directory.read_text(LEASE_FILE)
    with pytest.raises(LeaseHeldError) as held:
        CheckpointLease(directory, "tessera train", settle=0.05).acquire()
    assert held.value.exit_code == EXIT_TRANSIENT
    since, beat, expires = (t.isoformat() for t in (holder.started, holder.heartbeat,
                                                    holder.expires))
    assert str(held.value) == (
        f"{directory.url}/{LEASE_FILE}: the checkpoint path is in use by tessera train (pid "
        f"{live_process.pid} on host {HOST}) since {since}, last heartbeat {beat}, expires "
        f"{expires}; wait for that run to end or stop it (a stopped run's lease is taken over "
        "at once on its own host, elsewhere once it expires)")
    assert directory.read_text(LEASE_FILE) == before

    live_process.kill()
    live_process.wait()
    lease = CheckpointLease(directory, "tessera train", settle=0.05)
    replaced = lease.acquire()  # at once: no waiting for the expiry
    assert replaced == f"{holder.describe()}: its process {live_process.pid} on this host is gone"
    assert lease.read().token == lease.token


def test_a_lease_of_another_host_is_taken_over_only_once_expired(directory):
    write_lease(directory, host="trainer-0.old-node", pid=1)
    with pytest.raises(LeaseHeldError, match=r"\(pid 1 on host trainer-0\.old-node\)"):
        CheckpointLease(directory, "tessera train", settle=0.05).acquire()

    old = utc_now() - timedelta(hours=1)
    write_lease(directory, host="trainer-0.old-node", pid=1, heartbeat=old)
    lease = CheckpointLease(directory, "tessera train", settle=0.05)
    assert lease.acquire().endswith(f"it expired at {(old + timedelta(seconds=60)).isoformat()}")
    assert lease.read().host == HOST


def test_this_processs_own_pid_under_another_token_is_a_restarted_container(local_dir):
    lease = CheckpointLease(local_dir, "tessera train", settle=0.05)
    write_lease(local_dir, pid=lease.pid)
    assert lease.acquire().endswith(f"pid {lease.pid} on this host is this process "
                                    "(a restarted container)")


@pytest.mark.parametrize("backend", ["local_dir", "s3_directory"])
def test_of_runs_taking_the_lease_at_once_exactly_one_gets_it(backend, request):
    # Not memory://: it is one process's store, whose files are visible (empty) as soon as
    # they are opened for writing, so runs in two processes can never share it.
    directory = request.getfixturevalue(backend)
    contenders = 4
    start = threading.Barrier(contenders)
    outcomes: list[str] = []

    def contend(index: int) -> None:
        lease = CheckpointLease(directory, "tessera train", settle=0.5)
        lease.host = f"contender-{index}"  # threads of one process stand for runs on 4 hosts
        start.wait()
        try:
            lease.acquire()
            outcomes.append("held")
        except LeaseHeldError:
            outcomes.append("refused")

    threads = [threading.Thread(target=contend, args=(index,)) for index in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["held"] + ["refused"] * (contenders - 1)


@pytest.mark.parametrize("backend", ["local_dir", "s3_directory"])
def test_the_heartbeat_renews_the_lease_and_stops_when_it_is_taken_over(backend, request):
    # Not memory://: its file is visible, empty, from the moment a write opens it, so the
    # test's reads and the heartbeat thread's writes raced there (the read found no JSON).
    directory = request.getfixturevalue(backend)
    lease = CheckpointLease(directory, "tessera train", interval=0.05, settle=0.05)
    lease.acquire()
    first = lease.read().heartbeat
    lost = threading.Event()
    messages: list[str] = []

    def on_lost(message: str) -> None:
        messages.append(message)
        lost.set()

    with lease.renewing(on_lost):
        deadline = time.monotonic() + 10
        while lease.read().heartbeat == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease.read().heartbeat > first
        # Without a conditional write, a renewal already past its read when the taker writes
        # puts the holder's record back (and a real taker, reading back, would see it lost):
        # the taker writes until the holder has read its record.
        deadline, heartbeat = time.monotonic() + 10, utc_now()
        while True:
            taker = write_lease(directory, host="trainer-1.new-node", pid=7,
                                heartbeat=heartbeat)
            if lost.wait(1) or time.monotonic() > deadline:
                break
        assert lost.is_set()
    assert messages == [f"{directory.url}/{LEASE_FILE}: the lease on this checkpoint path was "
                        f"taken over by {taker.describe()}; stopping, so that two runs never "
                        "write one checkpoint"]
    lease.release()  # not ours any more: left alone
    assert lease.read() == taker


def test_a_lease_is_taken_though_a_probe_beside_it_removes_the_new_folder(
        tmp_path, monkeypatch):
    """A role starting beside this one probes the checkpoint path by making its missing
    folders and removing them again (`Directory.check_writable`); when that removal lands
    between the lease's making the folder and opening its lock file, both are made again."""
    directory = Directory(str(tmp_path / "checkpoints"))
    opened = os.open
    removed = []

    def open_after_a_probe(path, *args, **kwargs):
        if path.endswith(".lock") and not removed:  # the probe removes the empty folder
            os.rmdir(os.path.dirname(path))
            removed.append(path)
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(lease_module.os, "open", open_after_a_probe)
    lease = CheckpointLease(directory, "tessera train", settle=0.01)
    assert lease.acquire() is None
    assert removed and lease.read() is not None
    lease.release()


def test_stale_reason_follows_the_rules() -> None:
    record = LeaseRecord("t", "tessera train", "host-a", 42, NOW, NOW,
                         NOW + timedelta(seconds=60))
    alive, dead = (lambda pid: True), (lambda pid: False)
    assert stale_reason(record, NOW, "host-a", 7, alive) is None
    assert stale_reason(record, NOW, "host-a", 7, dead) is not None
    assert stale_reason(record, NOW, "host-a", 42, alive) is not None
    assert stale_reason(record, NOW, "host-b", 7, dead) is None  # not this host's pid
    assert stale_reason(record, NOW + timedelta(seconds=60), "host-b", 7, alive) is not None


@pytest.mark.parametrize("text", ["{", "{}", json.dumps({"token": "t", "command": "c",
                                                          "host": "h", "pid": 0,
                                                          "started": NOW.isoformat(),
                                                          "heartbeat": NOW.isoformat(),
                                                          "expires": NOW.isoformat()})])
def test_a_malformed_lease_file_is_bad_input_naming_it(local_dir, text):
    local_dir.write_text(LEASE_FILE, text)
    with pytest.raises(FormatError, match=rf"{LEASE_FILE}: not a lease .*delete it "
                                          "if no run is using this checkpoint path"):
        CheckpointLease(local_dir, "tessera train").acquire()


def test_a_lease_never_taken_releases_quietly_and_leaves_no_lock_file(local_dir, caplog):
    # An import or a training refused at its lease (a malformed lease file, here) reports
    # that error alone: releasing the lease it never took said "could not release".
    local_dir.write_text(LEASE_FILE, "{bad")
    lease = CheckpointLease(local_dir, "tessera train")
    with pytest.raises(FormatError):
        lease.acquire()
    with caplog.at_level("WARNING"):
        lease.release()
    assert not caplog.records
    assert sorted(local_dir.listdir()) == [LEASE_FILE]  # the other run's file, untouched
