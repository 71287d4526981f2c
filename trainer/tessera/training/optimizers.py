"""Optimizers: row-wise Adagrad for embedding tables, plain Adagrad for the model parameters.

Embedding tables get one Adagrad accumulator per row instead of per coordinate (PyTorch-
BigGraph's RowAdagrad): a quarter of the memory of the table itself would otherwise be spent
on optimizer state, and only the rows a batch touched are read and written. Both optimizers
are Hogwild-friendly: their state can live in shared memory and is updated without locks.

State dicts follow torch's Optimizer layout, which is what PBG stores (pickled) as the
`optimizer/state_dict` dataset of its checkpoint files and loads into its own optimizers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import kernels
from ..config import ConfigSchema
from ..errors import BadInputError

EPSILON = 1e-10


def coalesce_rows(rows: torch.Tensor,
                  grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct rows (sorted) with the sum of their gradients, in a new tensor: the Adagrad
    update is not linear, so a row named twice must be updated once with its total gradient.
    """
    unique_rows, inverse = torch.unique(rows, return_inverse=True)
    # Most rows of a batch are named once. Copying one gradient of each row (whichever
    # occurrence the scatter keeps) and adding the few others moves far less memory than
    # adding every gradient into zeros (index_add_ reads a full-size index on CPU).
    positions = torch.arange(len(rows), device=rows.device)
    kept = torch.empty_like(unique_rows).scatter_(0, inverse, positions)
    summed = grads.index_select(0, kept)
    others = (kept.index_select(0, inverse) != positions).nonzero().squeeze(1)
    if len(others):
        summed.index_add_(0, inverse.index_select(0, others), grads.index_select(0, others))
    return unique_rows, summed


def coalesce_rows_without_syncs(rows: torch.Tensor,
                                    grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What `coalesce_rows` gives, in as many slots as `rows` has: the distinct rows first,
    then slots with a zero gradient (which the Adagrad step leaves unchanged), each naming
    the row `rows` sorted has at its position.

    The number of distinct rows is never read on the host, so on a GPU nothing waits for
    the device (`torch.unique` and `nonzero` do); a sort and two scatters instead. The
    spare slots name rows spread over the batch's rows: had they all named one row, the
    GPU's atomic adds into it would queue up (6.5x slower table adds on an H200).
    """
    sorted_rows, order = torch.sort(rows)
    starts = torch.ones_like(sorted_rows, dtype=torch.bool)
    starts[1:] = sorted_rows[1:] != sorted_rows[:-1]
    slots = torch.cumsum(starts, 0).sub_(1)
    summed = torch.zeros_like(grads).index_add_(0, slots, grads.index_select(0, order))
    slot_rows = sorted_rows.clone().scatter_(0, slots, sorted_rows)
    return slot_rows, summed


def row_adagrad_state(row_sum: torch.Tensor, lr: float) -> dict[str, Any]:
    """PBG's RowAdagrad state dict: one parameter, whose state is the per-row sum."""
    return {"state": {0: {"sum": row_sum}},
            "param_groups": [{"lr": lr, "lr_decay": 0, "weight_decay": 0, "params": [0]}]}


class RowAdagrad:
    """Adagrad over the rows of one embedding table, with one float32 accumulator per row."""

    def __init__(self, table: torch.Tensor, lr: float,
                 row_sum: torch.Tensor | None = None, *, without_syncs: bool = False) -> None:
        """`without_syncs`: coalesce without reading sizes on the host (device training)."""
        if table.dim() != 2:
            raise ValueError(f"RowAdagrad needs a 2-D table, got shape {tuple(table.shape)}")
        if row_sum is None:
            row_sum = torch.zeros(len(table), dtype=torch.float32, device=table.device)
        if row_sum.shape != (len(table),):
            raise ValueError(f"accumulator of shape {tuple(row_sum.shape)} for a table of "
                             f"{len(table)} rows")
        self.table = table
        self.lr = lr
        self.row_sum = row_sum
        self.coalesce = coalesce_rows_without_syncs if without_syncs else coalesce_rows
        self.use_kernel = (kernels.active() and not without_syncs
                           and table.dtype == torch.float32 and table.is_contiguous()
                           and row_sum.is_contiguous())

    def step(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        """Update `table[rows]` given one gradient per row named, [len(rows), dim]
        (`grads` may be overwritten)."""
        if self.use_kernel:
            kernels.row_adagrad(self.table, self.row_sum, rows.contiguous(),
                                grads.contiguous(), self.lr, EPSILON)
            return
        rows, grads = self.coalesce(rows, grads)
        # The mean square of each row, without materialising the squares.
        delta = torch.linalg.vector_norm(grads, dim=1).square_().div_(grads.shape[1])
        # Another worker may add to the shared accumulator at the same time; reading it
        # before adding our own delta guarantees the step never divides by less than our
        # own squared gradient.
        local_sum = self.row_sum.index_select(0, rows).add_(delta)
        self.row_sum.index_add_(0, rows, delta)
        step_size = local_sum.sqrt_().add_(EPSILON).reciprocal_().mul_(-self.lr)
        # Scaling the (private, coalesced) gradients first: index_add_ is about twice as fast
        # without its `alpha`.
        update = grads.mul_(step_size.unsqueeze(1))
        # A half-precision table takes the update computed in float32 (the rows' state too).
        self.table.index_add_(0, rows, update if update.dtype == self.table.dtype
                              else update.to(self.table.dtype))

    def share_memory_(self) -> RowAdagrad:
        self.row_sum.share_memory_()
        return self

    def state_dict(self) -> dict[str, Any]:
        return row_adagrad_state(self.row_sum, self.lr)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load accumulators saved by `state_dict` (Tessera's or PBG's), in place."""
        try:
            row_sum = state_dict["state"][0]["sum"]
        except (KeyError, TypeError) as error:
            raise BadInputError(f"row optimizer state has no accumulator ({error!r}); expected "
                                "{'state': {0: {'sum': tensor}}, ...}") from error
        if not isinstance(row_sum, torch.Tensor) or row_sum.shape != self.row_sum.shape:
            shape = tuple(row_sum.shape) if isinstance(row_sum, torch.Tensor) else type(row_sum)
            raise BadInputError(f"row optimizer state has accumulators of shape {shape}, but "
                                f"the table has {len(self.row_sum)} rows")
        self.row_sum.copy_(row_sum)


class DenseAdagrad:
    """Adagrad for the model parameters (operators, global embeddings), Hogwild-shareable.

    Same update and state-dict layout as torch.optim.Adagrad (which PBG uses and whose
    checkpoints it reads), but constructing it does not import torch's compiler stack, which
    costs seconds in every Hogwild worker process.
    """

    def __init__(self, params: list[nn.Parameter], lr: float) -> None:
        self.params = params
        self.lr = lr
        self.sums = [torch.zeros_like(p, memory_format=torch.contiguous_format) for p in params]
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in params]
        # Whether `step` makes the compiled call (float32 parameters only).
        self.compiled = kernels.active() and all(p.dtype == torch.float32 for p in params)

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        # The parameters are small and this runs after every batch, so per-operation overhead
        # is the cost: one compiled call per parameter, else one multi-tensor operation per
        # stage.
        if self.compiled:
            for param, row_sum, steps in zip(self.params, self.sums, self.steps):
                if param.grad is not None:
                    kernels.dense_adagrad(param, param.grad.contiguous(), row_sum, steps,
                                          self.lr, EPSILON)
            return
        live, grads = [], []
        for i, param in enumerate(self.params):
            if param.grad is not None:
                live.append(i)
                grads.append(param.grad)
        if not live:
            return
        sums = [self.sums[i] for i in live]
        torch._foreach_add_([self.steps[i] for i in live], 1)
        torch._foreach_addcmul_(sums, grads, grads)
        denominators = torch._foreach_sqrt(sums)
        torch._foreach_add_(denominators, EPSILON)
        torch._foreach_addcdiv_([self.params[i].data for i in live], grads, denominators,
                                value=-self.lr)

    def share_memory(self) -> DenseAdagrad:
        for tensor in (*self.sums, *self.steps):
            tensor.share_memory_()
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"state": {i: {"step": steps, "sum": row_sum}
                          for i, (row_sum, steps) in enumerate(zip(self.sums, self.steps))},
                "param_groups": [{"lr": self.lr, "lr_decay": 0, "weight_decay": 0,
                                  "initial_accumulator_value": 0, "eps": EPSILON,
                                  "foreach": None, "maximize": False, "differentiable": False,
                                  "fused": None, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load accumulators saved by `state_dict` (Tessera's, or torch's Adagrad in PBG's)."""
        state = state_dict.get("state", {})
        for i, (row_sum, steps) in enumerate(zip(self.sums, self.steps)):
            saved = state.get(i, {})
            saved_sum = saved.get("sum")
            if not isinstance(saved_sum, torch.Tensor) or saved_sum.shape != row_sum.shape:
                raise BadInputError(f"model optimizer state for parameter {i} does not match "
                                    f"its shape {tuple(row_sum.shape)}")
            row_sum.copy_(saved_sum)
            steps.fill_(float(saved.get("step", 0)))


def make_model_optimizer(model: nn.Module, config: ConfigSchema) -> DenseAdagrad | None:
    """Adagrad over the operators and global embeddings at `relation_lr` (default `lr`);
    None when the model has no parameters (no global embeddings, `none` operators)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        return None
    return DenseAdagrad(parameters, lr=config.effective_relation_lr())
