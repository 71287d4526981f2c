"""Run `tessera`, and kill it (its whole process group, as SIGKILL) at one exact moment.

    python -m support.crash_at MODULE:Class.method GLOB N before|after -- tessera-args...

The moment is the N-th call (from 1) of that method whose first argument matches GLOB
(fnmatch on its str()), just before the call or just after it returns. A kill at an exact
step of a multi-step publish (a commit, an epoch copy, a dictionary, an export) shows what
every crash between two steps leaves, which a random kill finds only by luck. A run that
never reaches the moment ends normally.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def kill_everything() -> None:
    """What a node failure does: the process and its workers die with no clean-up."""
    sys.stderr.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def arm(target: str, pattern: str, nth: int, when: str) -> None:
    module_name, _, qualified = target.partition(":")
    class_name, _, method_name = qualified.rpartition(".")
    owner: Any = importlib.import_module(module_name)
    for part in filter(None, class_name.split(".")):
        owner = getattr(owner, part)
    original: Callable[..., Any] = getattr(owner, method_name)
    calls = 0

    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        arguments = args[1:] if class_name else args  # skip self
        if arguments and fnmatch.fnmatch(str(arguments[0]), pattern):
            calls += 1
            if calls == nth and when == "before":
                kill_everything()
            result = original(*args, **kwargs)
            if calls == nth and when == "after":
                kill_everything()
            return result
        return original(*args, **kwargs)

    setattr(owner, method_name, watched)


def main() -> None:
    target, pattern, nth, when, separator, *command = sys.argv[1:]
    if separator != "--" or when not in ("before", "after"):
        raise SystemExit(__doc__)
    if os.getpgid(0) != os.getpid():
        os.setsid()  # a group of its own, so that the kill never reaches whoever started it
    arm(target, pattern, int(nth), when)
    from tessera.cli import run

    sys.argv = ["tessera", *command]
    run()


if __name__ == "__main__":
    main()
