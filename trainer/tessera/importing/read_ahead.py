"""Producing the items of an iterator in a background thread, one item ahead of their use.

Reading and parsing the next chunk of an input (Arrow releases the GIL) then overlaps with the
NumPy work on the current one; at most one finished item waits, so memory holds two items.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """The same items in the same order; an error in the producer is raised to the consumer."""
    slot: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(slot, ("item", item), stop):
                    return
            _put(slot, ("end", None), stop)
        except BaseException as error:  # handed over: the consumer raises it
            _put(slot, ("error", error), stop)

    producer = threading.Thread(target=produce, name="tessera-read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            kind, value = slot.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:  # also when the consumer stops early: the producer ends after its current item
        stop.set()
        producer.join()


def _put(slot: queue.Queue[tuple[str, Any]], entry: tuple[str, Any],
         stop: threading.Event) -> bool:
    """Put `entry` once there is room; False if the consumer has stopped meanwhile."""
    while not stop.is_set():
        try:
            slot.put(entry, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
