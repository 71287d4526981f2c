"""Calls to the lock server, one method per question a peer asks it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..vocabulary import Bucket, ChunkPosition, PartitionKey
from .rendezvous import World

LOCKS_SERVICE = "locks"
T = TypeVar("T")


class LockClient:
    """The lock server as seen by trainer `trainer` (its rank among trainers; None for the
    other roles, which only report failures and departures)."""

    def __init__(self, world: World, trainer: int | None = None) -> None:
        self.world = world
        self.trainer = trainer

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        return self.world.peers.call(self.world.lock_server, LOCKS_SERVICE, method, *args,
                                     timeout=timeout)

    # Every role.

    def heartbeat(self) -> dict[str, Any]:
        """{"abort": (message, exit code) or None, "finished": bool}"""
        return self._call("heartbeat", self.world.rank, timeout=self.world.settings.peer_timeout)

    def fail(self, message: str, exit_code: int) -> None:
        self._call("fail", self.world.rank, message, exit_code,
                   timeout=self.world.settings.peer_timeout)

    def leaving(self, timeout: float | None = None) -> None:
        self._call("leaving", self.world.rank, timeout=timeout)

    # Trainers.

    def hello(self) -> dict[str, Any]:
        return self._call("hello", self.trainer)

    def acquire(self, position: ChunkPosition) -> tuple[str, Bucket | None]:
        return self._call("acquire", self.trainer, position)

    def trained(self, bucket: Bucket, record: dict[str, Any]) -> dict[str, Any]:
        return self._call("trained", self.trainer, bucket, record)

    def progress(self) -> dict[str, Any]:
        return self._call("progress")

    def release(self, keys: list[PartitionKey], written: bool = False) -> None:
        self._call("release", self.trainer, keys, written)

    def written_keys(self) -> set[PartitionKey]:
        return {tuple(key) for key in self._call("written_keys")}

    def arrive(self, position: ChunkPosition) -> None:
        self._call("arrive", self.trainer, position)

    def all_arrived(self, position: ChunkPosition) -> bool:
        return self._call("all_arrived", position)

    def position_records(self, position: ChunkPosition) -> list[dict[str, Any]]:
        return self._call("position_records", position)

    def committed(self, position: ChunkPosition, version: int) -> bool:
        return self._call("committed", position, version)

    def checkpoint_state(self, position: ChunkPosition) -> tuple[int, bool] | None:
        return self._call("checkpoint_state", position)

    def wait_for(self, answer: Callable[[], T | None]) -> T:
        """Ask `answer` again, backing off a little, until it gives something."""
        delay = self.world.settings.poll_interval
        while True:
            value = answer()
            if value is not None and value is not False:
                return value
            time.sleep(delay)
            delay = min(delay * 1.5, 0.2)
