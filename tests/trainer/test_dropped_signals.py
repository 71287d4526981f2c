"""A stop signal whose exception Python dropped is raised again where the loop checks.

Python runs a handler between two bytecodes of the main thread: inside a `__del__` or a
weakref callback its exception is printed and dropped. CI saw it: a SIGTERM'd `tessera train`
went on to finish, or reported its killed worker instead of the signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SIGNALLED_WHILE_COLLECTED = textwrap.dedent("""
    import os, signal, sys
    from tessera.stop_signals import Terminated, install_stop_handlers, raise_if_stopped

    install_stop_handlers()

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.{name})
            for _ in range(1000):  # the handler runs here, in the finalizer
                pass

    SignalledWhileCollected()
    print("went on", flush=True)
    try:
        raise_if_stopped()
    except {raised}:
        sys.exit(3)
""")


@pytest.mark.parametrize(("name", "raised"), [
    ("SIGTERM", "Terminated"), ("SIGINT", "KeyboardInterrupt")])
def test_a_signal_dropped_in_a_finalizer_is_raised_again(name: str, raised: str) -> None:
    script = SIGNALLED_WHILE_COLLECTED.format(name=name, raised=raised)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert "Exception ignored" in done.stderr  # the handler's own raise was dropped
    assert done.stdout == "went on\n"
    assert done.returncode == 3, done.stderr


def test_no_signal_nothing_raised() -> None:
    from tessera.stop_signals import raise_if_stopped

    raise_if_stopped()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the library installs none
