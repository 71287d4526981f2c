"""Ctrl-C and SIGTERM as exceptions in the main thread, raised again where one was lost.

Python runs a signal's handler between two bytecodes of the main thread, wherever it is; an
exception raised there while a weakref callback or a `__del__` runs is dropped, and the run
would go on (or end with a dead worker's error). So the handler also records the signal, and
the training loop calls `raise_if_stopped` where stopping is safe: before each bucket, at each
poll of the worker processes, and in thread workers before each batch, which therefore stop
with the run rather than at the end of their share of the bucket. Python would also print the
dropped exception with its traceback; the stop says its one line when it is raised again.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

_received: int | None = None


class Terminated(Exception):  # noqa: N818 - named as the signal's effect, as KeyboardInterrupt
    """SIGTERM (a pod being deleted, `kill`): raised in the main thread like Ctrl-C's
    KeyboardInterrupt, so that the command stops the same way, releasing its lease."""


def install_stop_handlers() -> None:
    """Handle Ctrl-C and SIGTERM in this process (the command's, not a library user's)."""
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    if not isinstance(sys.unraisablehook, _QuietAboutDroppedStops):  # once per process
        sys.unraisablehook = _QuietAboutDroppedStops(sys.unraisablehook)


def raise_if_stopped() -> None:
    """Raise the stop a handler raised before, in case it was dropped where it was raised."""
    if _received is not None:
        raise _exception(_received)


def _on_stop_signal(signum: int, frame: object) -> None:
    global _received
    _received = signum
    raise _exception(signum)


class _QuietAboutDroppedStops:
    """A `sys.unraisablehook` that passes on every exception Python drops but a stop, which
    `raise_if_stopped` raises again."""

    def __init__(self, report: Callable[[sys.UnraisableHookArgs], object]) -> None:
        self.report = report

    def __call__(self, unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
            self.report(unraisable)


def _exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
