"""Which of several operator replicas acts: kopf peering, the oldest replica first.

Replicas started with `--peering NAME` write keep-alives into the peering object NAME (a
ClusterKopfPeering with `--all-namespaces`, a KopfPeering in each namespace otherwise); each
pauses while a live peer has a higher priority, and kopf refuses to let peers of equal
priority act at all. So each replica's priority is derived from its start time, older being
higher: one replica is active, and a replica restarted after a failover joins as a standby
instead of taking the work back. A killed replica counts as gone once `LIFETIME` seconds pass
without its keep-alive, which bounds the takeover time.
"""

from __future__ import annotations

import time

LIFETIME = 15  # seconds a replica's keep-alive holds; kopf renews it 5 to 10 s before the end


def with_priority(args: list[str], now_ns: int | None = None) -> list[str]:
    """`args` plus `--priority=-<start time in microseconds>` when peering is on and no
    priority is given (microseconds: two replicas started together still differ)."""
    peering = any(arg in ("-P", "--peering") or arg.startswith(("--peering=", "-P"))
                  for arg in args)
    given = any(arg in ("-p", "--priority") or arg.startswith(("--priority=", "-p"))
                for arg in args)
    if not peering or given:
        return args
    started_us = (time.time_ns() if now_ns is None else now_ns) // 1000
    return [*args, f"--priority={-started_us}"]
