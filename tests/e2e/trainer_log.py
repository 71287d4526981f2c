"""Reading what a trainer pod printed (`tessera train --log-format json`): its JSON records."""

from __future__ import annotations

import json
from typing import Any

COMMITTED = "checkpoint committed"


def records(log: str) -> list[dict[str, Any]]:
    """The JSON records of a log, in order (other lines, such as errors, left out)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def committed_versions(log: str) -> list[int]:
    """The checkpoint versions the run committed, in order."""
    return [record["checkpoint_version"] for record in records(log)
            if record.get("event") == COMMITTED]


def first_loss(log: str) -> float:
    """The loss of the run's first progress record (after its first bucket)."""
    return next(float(record["loss"]) for record in records(log) if "loss" in record)
