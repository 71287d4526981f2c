"""Free TCP ports on 127.0.0.1 for the test servers, below the kernel's ephemeral range.

A server the kernel could also hand out as a client's source port is unsafe to stop in a
fault test: a client dialling it while it is down may be given that very port and connect
to itself (TCP simultaneous open), reading its own request back as the answer.
"""

from __future__ import annotations

import random
import socket

LOWEST_PORT = 1_024
_rng = random.Random()


def ephemeral_ports_start() -> int:
    """The first port the kernel hands out to outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as file:
            return int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(below: int | None = None) -> int:
    """A port that is free now, below `below` (default: the ephemeral range)."""
    limit = ephemeral_ports_start() if below is None else below
    while True:
        port = _rng.randrange(LOWEST_PORT, limit)
        if port_is_free(port):
            return port
