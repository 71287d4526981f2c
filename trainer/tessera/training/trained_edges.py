"""Edges trained so far in the bucket being trained, counted by the workers as they go.

A bucket of a large graph trains for a minute or more; the live line, moved only when a bucket
ends, would freeze that long and its ETA would jump. Workers add to their own slot (no two
processes write one number, so no update is lost without a lock) after every call of the
compiled loop or every batch, and the trainer reads the sum while it waits for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


class EdgeTally:
    """One counter per worker; in shared memory when workers are processes."""

    def __init__(self, num_slots: int = 1, shared: bool = False) -> None:
        self.slots = torch.zeros(num_slots, dtype=torch.int64)
        if shared:
            self.slots.share_memory_()

    def slot(self, index: int) -> torch.Tensor:
        """Worker `index`'s counter: a view that travels to a worker process with the task."""
        return self.slots[index:index + 1]

    def reset(self) -> None:
        self.slots.zero_()

    def total(self) -> int:
        return int(self.slots.sum())


def count_trained(slot: torch.Tensor | None, edges: int) -> None:
    """Add `edges` to a worker's counter (None: nobody reads it)."""
    if slot is not None:
        slot.add_(edges)


@contextmanager
def reporting_every(interval: float, report: Callable[[], None]) -> Iterator[None]:
    """Call `report` every `interval` seconds from a thread of its own while the block runs
    (the block is the trainer waiting for its workers, or training itself)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            try:
                report()
            except OSError:  # the terminal went away: the work goes on without a live line
                return

    thread = threading.Thread(target=loop, name="tessera-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
