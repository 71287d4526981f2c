"""The model and its optimizer on a training device, merged back into the host's copy.

The host's `ModelState` stays the one the checkpoint saves and the parameter sync shares
(in the distributed mode another thread may update it while a bucket trains). A device
trainer works on its own copy: `pull` copies the host's values in before a bucket, `push`
adds what the bucket changed (device value now minus value pulled) to the host's after it,
Hogwild-style, so that updates made meanwhile on the host are kept, not overwritten.
"""

from __future__ import annotations

import copy

import torch

from ..config import ConfigSchema
from .optimizers import make_model_optimizer
from .worker import ModelState


def state_tensors(state: ModelState) -> list[torch.Tensor]:
    """Parameters and Adagrad state, in one order for every copy of a model."""
    tensors = [param.data for param in state.model.parameters()]
    if state.optimizer is not None:
        tensors += [*state.optimizer.sums, *state.optimizer.steps]
    return tensors


class DeviceModel:
    """A copy of `host` on `device`, with its own Adagrad (the torch code: no kernels)."""

    def __init__(self, host: ModelState, config: ConfigSchema, device: torch.device) -> None:
        self.host = host
        model = copy.deepcopy(host.model).to(device)
        self.state = ModelState(model, make_model_optimizer(model, config))
        if self.state.optimizer is not None:
            self.state.optimizer.compiled = False  # the kernels read CPU tensors only
        self.pulled: list[torch.Tensor] = []

    def pull(self) -> ModelState:
        """The device copy, holding the host's values now."""
        device_tensors = state_tensors(self.state)
        for target, source in zip(device_tensors, state_tensors(self.host)):
            target.copy_(source)
        self.pulled = [tensor.clone() for tensor in device_tensors]
        return self.state

    def push(self) -> None:
        """Add what training changed on the device since `pull` to the host's values."""
        for host, now, pulled in zip(state_tensors(self.host), state_tensors(self.state),
                                     self.pulled):
            host.add_((now - pulled).to(host.device))
        self.pulled = []
