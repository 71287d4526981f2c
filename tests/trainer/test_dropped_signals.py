"""A stop signal whose exception Python dropped is raised again where the loop checks.

Python runs a handler between two bytecodes of the main thread: inside a `__del__` or a
weakref callback its exception is printed and dropped. CI saw it: a SIGTERM'd `tessera train`
went on to finish, or reported its killed worker instead of the signal, or printed the dropped
exception's traceback above its one line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SIGNALLED_WHILE_COLLECTED = textwrap.dedent("""
    import os, signal, sys, weakref
    from tessera.stop_signals import Terminated, install_stop_handlers, raise_if_stopped

    install_stop_handlers()

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.{name})
            for _ in range(1000):  # the handler runs here, in the finalizer
                pass

    class Referent:
        pass

    def signalled_in_callback(reference):
        os.kill(os.getpid(), signal.{name})
        for _ in range(1000):  # the handler runs here, in the weakref callback
            pass

    SignalledWhileCollected()
    referent = Referent()
    reference = weakref.ref(referent, signalled_in_callback)
    del referent
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
    assert done.stdout == "went on\n"  # both raises of the handler were dropped
    assert done.returncode == 3, done.stderr
    assert done.stderr == ""  # and neither printed a traceback


def test_other_dropped_exceptions_are_still_reported() -> None:
    script = textwrap.dedent("""
        import sys
        from tessera.stop_signals import install_stop_handlers

        python_s_own = sys.unraisablehook
        install_stop_handlers()
        install_stop_handlers()  # as each command run in one process does
        assert sys.unraisablehook.report is python_s_own  # wrapped once

        class FailsWhileCollected:
            def __del__(self):
                raise ValueError("a real fault")

        FailsWhileCollected()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert "Exception ignored" in done.stderr and "ValueError: a real fault" in done.stderr


def test_no_signal_nothing_raised() -> None:
    from tessera.stop_signals import raise_if_stopped

    raise_if_stopped()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the library installs none
