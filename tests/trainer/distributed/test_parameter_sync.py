"""Asynchronous parameter sharing, with the parameter servers called in-process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from tessera.config import parse_config
from tessera.distributed.parameter_server import ParameterServer, ParameterSync, shared_tensors
from tessera.errors import TesseraError, TransientError
from tessera.model import EmbeddingModel
from tessera.training.optimizers import make_model_optimizer
from tessera.training.worker import ModelState


class Answered:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class InProcessPeers:
    """Stands in for `Peers`: calls the servers' methods directly."""

    def __init__(self, servers: dict[str, ParameterServer],
                 meanwhile: Callable[[], None] = lambda: None) -> None:
        self.servers = servers
        self.meanwhile = meanwhile  # runs while a call is "in flight"
        self.failure: Exception | None = None

    def call_async(self, peer: str, service: str, method: str, *args: Any) -> Answered:
        assert service == ParameterServer.SERVICE
        if self.failure is not None:
            return Answered(self.failure)
        self.meanwhile()
        return Answered(getattr(self.servers[peer], method)(*args))


def sync_of(tensors: dict[str, torch.Tensor], peers: InProcessPeers,
            on_failure: Callable[[TesseraError], None] = lambda error: None,
            interval: float = 3600.0) -> ParameterSync:
    return ParameterSync(tensors, peers, sorted(peers.servers), interval, on_failure)  # type: ignore[arg-type]


def test_deltas_from_every_trainer_add_up_on_the_servers() -> None:
    peers = InProcessPeers({"ps-0": ParameterServer(), "ps-1": ParameterServer()})
    a = {"w": torch.zeros(3), "b": torch.zeros(())}
    b = {"w": torch.full((3,), 7.0), "b": torch.ones(())}
    sync_a, sync_b = sync_of(a, peers), sync_of(b, peers)
    sync_a.start()
    sync_b.start()  # the first trainer's values are adopted by everyone
    assert torch.equal(b["w"], torch.zeros(3)) and float(b["b"]) == 0.0
    assert {len(names) for names in sync_a.shards.values()} == {1}  # one tensor per server
    a["w"] += 1.0
    b["w"] += 2.0
    b["b"] += 5.0
    sync_a.sync()
    sync_b.sync()
    assert torch.equal(b["w"], torch.full((3,), 3.0)) and float(b["b"]) == 5.0
    sync_a.sync()
    assert torch.equal(a["w"], torch.full((3,), 3.0)) and float(a["b"]) == 5.0


def test_changes_made_during_an_exchange_are_kept_and_pushed_next_time() -> None:
    tensors = {"w": torch.zeros(2)}
    server = ParameterServer()
    peers = InProcessPeers({"ps-0": server})
    sync = sync_of(tensors, peers)
    sync.start()
    tensors["w"] += 1.0
    peers.meanwhile = lambda: tensors["w"].add_(10.0)  # a Hogwild worker's update
    sync.sync()
    assert torch.equal(server.values["w"], torch.full((2,), 1.0))
    assert torch.equal(tensors["w"], torch.full((2,), 11.0))
    peers.meanwhile = lambda: None
    sync.sync()
    assert torch.equal(server.values["w"], torch.full((2,), 11.0))


def test_the_background_thread_keeps_syncing_and_reports_a_lost_server() -> None:
    server = ParameterServer()
    peers = InProcessPeers({"ps-0": server})
    failures: list[TesseraError] = []
    reported = threading.Event()

    def on_failure(error: TesseraError) -> None:
        failures.append(error)
        reported.set()

    tensors = {"w": torch.zeros(1)}
    with sync_of(tensors, peers, on_failure, interval=0.01):
        tensors["w"] += 4.0
        deadline = time.monotonic() + 10
        while float(server.values["w"]) != 4.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert float(server.values["w"]) == 4.0
        peers.failure = TransientError("no answer from ps-0")
        assert reported.wait(10)
    assert [str(e) for e in failures] == ["no answer from ps-0"]


def test_trainers_share_the_model_parameters_and_the_optimizer_state() -> None:
    config = parse_config({
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": "diagonal"}],
        "dimension": 4, "global_emb": True, "entity_path": "e", "edge_paths": ["p"],
        "checkpoint_path": "c"})
    model = EmbeddingModel(config, 1)
    state = ModelState(model, make_model_optimizer(model, config))
    tensors = shared_tensors(state)
    parameters = dict(model.named_parameters())
    assert {name.removeprefix("model/") for name in tensors if name.startswith("model/")} \
        == set(parameters)
    assert any(name.endswith("/sum") for name in tensors)
    # The tensors are the live ones: changing them changes the model and the optimizer.
    tensors["model/rhs_operators.0.diagonal"].add_(1.0)
    assert torch.equal(parameters["rhs_operators.0.diagonal"].detach(), torch.full((4,), 2.0))
    sum_name = next(name for name in tensors if name.endswith("/sum"))
    tensors[sum_name].add_(3.0)
    index = int(sum_name.split("/")[1])
    assert float(state.optimizer.state_dict()["state"][index]["sum"].min()) == 3.0
