"""`tessera train --local-cluster`: every role of a distributed job as a local process.

For users without a cluster, and for tests: the lock server, the partition servers and the
trainers start as `tessera` subprocesses rendezvousing on 127.0.0.1 at a free port, exactly
as pods would run them. Their output is streamed, each line prefixed by the role. When one
of them fails, the others get the peer time-out to notice and stop on their own (with a
message naming the lost peer), then whatever still runs is stopped. The exit code is the
failure's: bad input (65) wins over transient (75); a role killed by a signal counts as a
lost peer, hence transient. With a metrics address, the roles serve their metrics on
consecutive ports from it, in the order of `role_commands`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from ..errors import EXIT_BAD_INPUT, EXIT_TRANSIENT
from ..metrics_address import METRICS_PORT_ENV
from ..progress import Reporter
from ..vocabulary import Role
from .settings import INIT_METHOD_ENV, PEER_TIMEOUT_ENV
from .world import WorldLayout

# After a failure, how long the others may take beyond the peer time-out to stop by
# themselves before they are terminated.
STOP_MARGIN_S = 15.0
TERMINATE_GRACE_S = 5.0


@dataclass
class RoleProcess:
    name: str
    process: subprocess.Popen[bytes]
    streamer: threading.Thread


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def role_commands(config_path: str, overrides: Sequence[str], layout: WorldLayout,
                  role_args: Sequence[str], metrics: tuple[str, int] | None = None
                  ) -> list[tuple[str, list[str]]]:
    """(name, command) of every role; the counts are passed on so that all roles agree.
    With `metrics` (host, first port), each role serves its own on the next port."""
    base = [sys.executable, "-m", "tessera"]
    common = [config_path, *(f"--param={o}" for o in overrides),
              f"--param=num_machines={layout.num_trainers}",
              f"--param=num_partition_servers={layout.num_partition_servers}", *role_args]
    commands = [(Role.LOCK_SERVER.value, [*base, "lock-server", *common])]
    for role, subcommand in ((Role.PARTITION_SERVER, "partition-server"),
                             (Role.TRAINER, "train")):
        commands += [(name, [*base, subcommand, *common, "--rank", str(rank)])
                     for rank, name in enumerate(layout.names(role))]
    if metrics is not None:
        host, port = metrics
        commands = [(name, [*command, "--metrics-port", f"{host}:{port + index}"])
                    for index, (name, command) in enumerate(commands)]
    return commands


def run_local_cluster(config_path: str, overrides: Sequence[str], layout: WorldLayout,
                      peer_timeout: float, role_args: Sequence[str], reporter: Reporter,
                      metrics: tuple[str, int] | None = None) -> int:
    """Run a whole job here; returns the exit code for the `tessera train` process.
    `role_args` are flags every role gets (log format, time-outs)."""
    env = {**os.environ, INIT_METHOD_ENV: f"tcp://127.0.0.1:{free_port()}",
           PEER_TIMEOUT_ENV: f"{peer_timeout:g}"}
    env.pop(METRICS_PORT_ENV, None)  # one port cannot serve every role: see `metrics`
    env.setdefault("TP_SOCKET_IFNAME", "lo")  # TensorPipe listens on the loopback only
    # Every role reports a lost peer itself; TensorPipe's own warnings would only repeat it.
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # The trainers share this machine's cores: intra-op threads beyond a fair share spin
    # against each other.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // layout.num_trainers)))
    roles: list[RoleProcess] = []
    try:
        for name, command in role_commands(config_path, overrides, layout, role_args,
                                           metrics):
            process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            streamer = threading.Thread(target=_stream, args=(name, process.stdout),
                                        daemon=True)
            streamer.start()
            roles.append(RoleProcess(name, process, streamer))
            reporter.event("role started", role=name, pid=process.pid)
        return _wait(roles, peer_timeout + STOP_MARGIN_S, reporter)
    except KeyboardInterrupt:
        _terminate(roles)
        raise
    finally:
        _terminate(roles)
        for role in roles:
            role.streamer.join(timeout=5)


def _stream(name: str, output: IO[bytes] | None) -> None:
    assert output is not None
    for raw in iter(output.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n").split("\r")[-1]
        sys.stderr.write(f"[{name}] {line}\n")
        sys.stderr.flush()


def _wait(roles: list[RoleProcess], stop_grace: float, reporter: Reporter) -> int:
    first_failure: int | None = None
    failed_at = 0.0
    while True:
        codes = {role.name: role.process.poll() for role in roles}
        failures = {name: code for name, code in codes.items() if code not in (None, 0)}
        if failures and first_failure is None:
            name, first_failure = next(iter(failures.items()))
            failed_at = time.monotonic()
            reporter.event("role failed", role=name, exit_code=first_failure)
        running = [name for name, code in codes.items() if code is None]
        if not running:
            break
        if first_failure is not None and time.monotonic() - failed_at > stop_grace:
            reporter.event("stopping roles that did not stop", roles=running)
            break
        time.sleep(0.1)
    return exit_code_of(first_failure, [role.process.poll() for role in roles])


def exit_code_of(first_failure: int | None, codes: Sequence[int | None]) -> int:
    """One code for the whole job: 0 if every role succeeded; else bad input if any role
    saw bad input, else the first failure's code (a role killed by a signal, or still
    running when stopped, counts as a lost peer: transient)."""
    if first_failure is None and all(code == 0 for code in codes):
        return 0
    if EXIT_BAD_INPUT in codes:
        return EXIT_BAD_INPUT
    if first_failure is not None and first_failure > 0:
        return first_failure
    return EXIT_TRANSIENT


def _terminate(roles: list[RoleProcess]) -> None:
    """Stop every role still running, and anything it started (its Hogwild workers)."""
    for role in roles:
        if role.process.poll() is None:
            _signal_group(role.process, signal.SIGTERM)
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for role in roles:
        try:
            role.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal_group(role.process, signal.SIGKILL)
        role.process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
