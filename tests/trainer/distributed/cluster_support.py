"""Running `tessera train --local-cluster` (and single roles) from tests, and reading what
the roles logged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER_TIMEOUT_S = 240


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config))
    return path


def cluster_command(config_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tessera", "train", str(config_path), "--local-cluster",
            "--log-format", "json", *args]


@dataclass
class RoleLogs:
    """The merged output of a local cluster: `[role] line` for the roles, bare for itself."""

    lines: list[str]

    def of(self, role: str) -> list[str]:
        prefix = f"[{role}] "
        return [line[len(prefix):] for line in self.lines if line.startswith(prefix)]

    def records(self, role: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.of(role) if line.startswith("{")]

    def events(self, role: str, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records(role) if r.get("event") == name]

    def errors(self, role: str) -> list[str]:
        return [line for line in self.of(role) if ": error: " in line]

    def launcher_events(self, name: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.lines if line.startswith("{")]
        return [r for r in records if r.get("event") == name]


def run_cluster(config_path: Path, *args: str) -> tuple[int, RoleLogs]:
    finished = subprocess.run(cluster_command(config_path, *args), capture_output=True,
                              text=True, timeout=CLUSTER_TIMEOUT_S)
    return finished.returncode, RoleLogs(finished.stderr.splitlines())


def check_no_partition_held_twice(logs: RoleLogs, finished: bool = True) -> Counter[str]:
    """Replay the lock server's log; fail if a partition was ever locked by a trainer while
    another held it (and, for a finished job, if any is still held at the end). Returns how
    many buckets each trainer was given."""
    holder: dict[tuple[str, int], int] = {}
    buckets: Counter[str] = Counter()
    for record in logs.records("lock-server"):
        event, trainer = record.get("event"), record.get("trainer")
        keys = [tuple(key) for key in record.get("partitions", [])]
        if event == "partitions locked":
            for key in keys:
                assert holder.get(key, trainer) == trainer, \
                    f"{key} locked by trainer {trainer} while trainer {holder[key]} held it"
                holder[key] = trainer
            buckets[f"trainer-{trainer}"] += 1
        elif event == "partitions released":
            for key in keys:
                assert holder.pop(key) == trainer, f"{key} released by a trainer not holding it"
    assert holder == {} or not finished, f"partitions still held at the end: {holder}"
    return buckets
