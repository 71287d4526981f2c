"""Calling objects in other processes: one RPC convention for every role.

A process serves objects under a service name (`serve("locks", lock_service)`); a peer calls
their methods with `Peers.call(peer, service, method, *args)`. Calls go through
torch.distributed.rpc, so tensors in arguments and results travel as tensors, not pickles.
Every call has a time-out. A Tessera error raised by the callee comes back as the same kind
of error (bad input stays bad input); a peer that does not answer becomes a TransientError
that names it, with its address.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch.distributed.rpc as rpc

from ..errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, BadInputError, TesseraError, TransientError
from .world import PeerInfo

_served: dict[str, Any] = {}


def serve(service: str, target: object) -> None:
    """Answer calls to `service` with `target`'s methods."""
    _served[service] = target


def stop_serving(service: str) -> None:
    _served.pop(service, None)


@dataclass(frozen=True)
class RemoteFailure:
    """An error raised by the callee, sent back as a value so that its kind survives."""

    exit_code: int
    message: str


def _dispatch(service: str, method: str, args: tuple[Any, ...]) -> Any:
    """Runs in the callee's RPC thread."""
    target = _served.get(service)
    if target is None:
        return RemoteFailure(EXIT_TRANSIENT, f"service {service!r} is not running there")
    try:
        return getattr(target, method)(*args)
    except TesseraError as error:
        return RemoteFailure(error.exit_code, str(error))
    except Exception:  # noqa: BLE001 - a bug on the callee's side, reported to the caller
        return RemoteFailure(1, f"unexpected error in {service}.{method}:\n"
                                f"{traceback.format_exc()}")


class PendingCall:
    """A call in flight; `result()` waits for it and raises what it raised."""

    def __init__(self, peers: Peers, peer: str, what: str, future: Any) -> None:
        self.peers = peers
        self.peer = peer
        self.what = what
        self.future = future

    def result(self) -> Any:
        try:
            value = self.future.wait()
        except Exception as error:  # transport failures: time-outs, closed connections
            raise TransientError(f"no answer from {self.peers.describe(self.peer)} to "
                                 f"{self.what}: {_first_line(error)}") from error
        if isinstance(value, RemoteFailure):
            raise _error_of(value, self.peers.describe(self.peer))
        return value


class Peers:
    """The other processes of the world, by name, and calls to them."""

    def __init__(self, infos: Mapping[str, PeerInfo], call_timeout: float) -> None:
        self.infos = dict(infos)
        self.call_timeout = call_timeout

    def describe(self, peer: str) -> str:
        info = self.infos.get(peer)
        return info.describe() if info is not None else peer

    def call_async(self, peer: str, service: str, method: str, *args: Any,
                   timeout: float | None = None) -> PendingCall:
        what = f"{service}.{method}"
        try:
            future = rpc.rpc_async(peer, _dispatch, args=(service, method, args),
                                   timeout=self.call_timeout if timeout is None else timeout)
        except Exception as error:
            raise TransientError(f"cannot reach {self.describe(peer)} for {what}: "
                                 f"{_first_line(error)}") from error
        return PendingCall(self, peer, what, future)

    def call(self, peer: str, service: str, method: str, *args: Any,
             timeout: float | None = None) -> Any:
        return self.call_async(peer, service, method, *args, timeout=timeout).result()


def _error_of(failure: RemoteFailure, peer: str) -> Exception:
    message = f"{peer} reports: {failure.message}"
    if failure.exit_code == EXIT_BAD_INPUT:
        return BadInputError(message)
    if failure.exit_code == EXIT_TRANSIENT:
        return TransientError(message)
    return RuntimeError(message)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
