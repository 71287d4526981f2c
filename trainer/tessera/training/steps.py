"""The implementations of one training step, in one table, and the one function that picks
the implementation of a run.

A step scores a batch against its negatives, differentiates the loss, and applies row-wise
Adagrad to the rows it read and Adagrad to the model's parameters. The reference is the
plainest way to do that: autograd over `EmbeddingModel`, then the torch code of `RowAdagrad`
and `DenseAdagrad`. Every implementation below computes the same maths faster where its
row applies (`tests/trainer/training/test_step_table.py` holds each to the reference):

- `compiled loop`: a Hogwild worker's whole loop over its batches in one compiled call
  (`compiled_loop`), for the default setup where the kernels are built;
- `closed form`: per batch, the gradients written out as batched matrix products
  (`model.closed_form`), for inner-product comparators without dynamic relations, a
  regularizer or featurized entities; the compiled kernels gather rows and step Adagrad;
- `autograd`: per batch, autograd over the model, with the compiled kernels' fused losses
  and Adagrad where built; every config;
- `device, closed form` and `device, autograd`: the same two on a training device (a GPU;
  the tests' CPU), in torch alone, each batch shape's step recorded once as a CUDA graph
  and replayed (`recorded_steps`).

`choose_step` takes the first row that applies to the config on the run's kind of device,
once per run; the run's summary names it (`step`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import ConfigSchema
from ..model.closed_form import closed_form_covers
from . import compiled_loop


@dataclass(frozen=True)
class StepImplementation:
    name: str
    on_device: bool  # the device path, else Hogwild workers on the CPU
    whole_loop: bool  # a worker's loop in one compiled call
    closed_form: bool  # gradients written out, else by autograd
    applies: Callable[[ConfigSchema], bool]


def every_config(config: ConfigSchema) -> bool:
    return True


STEPS: tuple[StepImplementation, ...] = (
    StepImplementation("compiled loop", on_device=False, whole_loop=True, closed_form=True,
                       applies=compiled_loop.covers),
    StepImplementation("closed form", on_device=False, whole_loop=False, closed_form=True,
                       applies=closed_form_covers),
    StepImplementation("autograd", on_device=False, whole_loop=False, closed_form=False,
                       applies=every_config),
    StepImplementation("device, closed form", on_device=True, whole_loop=False,
                       closed_form=True, applies=closed_form_covers),
    StepImplementation("device, autograd", on_device=True, whole_loop=False,
                       closed_form=False, applies=every_config),
)


def choose_step(config: ConfigSchema, on_device: bool) -> StepImplementation:
    """The fastest implementation that trains `config` on a device (or on the CPU's
    Hogwild workers)."""
    return next(step for step in STEPS
                if step.on_device == on_device and step.applies(config))
