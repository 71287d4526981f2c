"""Shared parameters (relation operators, global embeddings) and their Adagrad state,
synchronised asynchronously between trainers through parameter servers.

Each tensor lives on one parameter server (the shards are spread over the partition servers,
or kept by the lock server when there are none). A trainer keeps a full local copy, which
its Hogwild workers update; a background thread repeatedly sends the server what changed
locally since the last exchange (a delta, so that updates from every trainer add up) and
takes the server's sum back, keeping whatever the workers changed in the meantime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from ..errors import TesseraError
from ..training.worker import ModelState
from .remote import Peers


class ParameterServer:
    """One shard: the current value of each tensor it was given."""

    SERVICE = "parameters"

    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}
        self.lock = threading.Lock()

    def register(self, initial: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The first trainer's values become the shared ones; everyone gets them back."""
        with self.lock:
            for name, value in initial.items():
                self.values.setdefault(name, value.clone())
            return {name: self.values[name].clone() for name in initial}

    def push(self, deltas: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Add a trainer's changes; return the sums."""
        with self.lock:
            for name, delta in deltas.items():
                self.values[name].add_(delta)
            return {name: self.values[name].clone() for name in deltas}


def shared_tensors(state: ModelState) -> dict[str, torch.Tensor]:
    """What trainers share: every model parameter and the optimizer's accumulators."""
    tensors = {f"model/{name}": param.data for name, param in state.model.named_parameters()}
    if state.optimizer is not None:
        # The state dict holds the optimizer's own (shared-memory) tensors, not copies.
        for index, entry in state.optimizer.state_dict()["state"].items():
            tensors.update({f"optimizer/{index}/{key}": value for key, value in entry.items()
                            if isinstance(value, torch.Tensor)})
    return tensors


class ParameterSync:
    """A trainer's side: registers its tensors, then exchanges deltas in the background."""

    def __init__(self, tensors: dict[str, torch.Tensor], peers: Peers, servers: list[str],
                 interval: float, on_failure: Callable[[TesseraError], None]) -> None:
        self.tensors = tensors
        self.peers = peers
        self.interval = interval
        self.on_failure = on_failure
        names = sorted(tensors)
        self.shards = {server: [n for i, n in enumerate(names) if i % len(servers) == k]
                       for k, server in enumerate(servers)}
        self.last_synced: dict[str, torch.Tensor] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="parameter-sync", daemon=True)

    def __enter__(self) -> ParameterSync:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Adopt the shared values (the first trainer's, if nobody registered yet)."""
        replies = self._exchange("register", {n: t.clone() for n, t in self.tensors.items()})
        with torch.no_grad():
            for name, value in replies.items():
                self.tensors[name].copy_(value)
                self.last_synced[name] = value
        if self.tensors:
            self.thread.start()

    def sync(self) -> None:
        """One exchange: push local changes since the last one, take the shared sums."""
        with self.lock:
            snapshot = {name: tensor.clone() for name, tensor in self.tensors.items()}
            deltas = {name: snapshot[name] - self.last_synced[name] for name in snapshot}
            replies = self._exchange("push", deltas)
            with torch.no_grad():
                for name, value in replies.items():
                    # Keep what the workers changed while the exchange was in flight.
                    self.tensors[name].add_(value - snapshot[name])
                    self.last_synced[name] = value

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()

    def _exchange(self, method: str, values: dict[str, torch.Tensor]
                  ) -> dict[str, torch.Tensor]:
        pending = [self.peers.call_async(server, ParameterServer.SERVICE, method,
                                         {n: values[n] for n in names})
                   for server, names in self.shards.items() if names]
        replies: dict[str, torch.Tensor] = {}
        for call in pending:
            replies.update(call.result())
        return replies

    def _loop(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.sync()
            except TesseraError as error:
                self.on_failure(error)
                return
