"""What one Hogwild worker does with its share of a bucket: batches, loss, sparse updates.

`train_part` runs in a worker process (or inline with one worker). It only reads and writes
shared tensors handed to it, so any number of workers can run it at once.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..data.batching import iter_batches
from ..edgelist import EdgeList
from ..model import EmbeddingModel, batch_gradients
from ..model.negatives import DegreePool, degree_negatives
from ..stop_signals import raise_if_stopped
from ..vocabulary import PartitionKey
from . import compiled_loop
from .optimizers import DenseAdagrad, RowAdagrad
from .partitions import Partition
from .trained_edges import count_trained


@dataclass
class ModelState:
    """What every worker shares for the whole run: the model and its optimizer."""

    model: EmbeddingModel
    optimizer: DenseAdagrad | None

    def replica(self) -> ModelState:
        """A copy for another thread: the same parameter values and optimizer state (shared
        memory, updated Hogwild-style) but its own gradients, which threads must not share.
        """
        memo: dict[int, object] = {}
        for param in self.model.parameters():
            memo[id(param)] = nn.Parameter(param.data, requires_grad=param.requires_grad)
        for buffer in self.model.buffers():
            memo[id(buffer)] = buffer
        if self.optimizer is not None:
            for tensor in (*self.optimizer.sums, *self.optimizer.steps):
                memo[id(tensor)] = tensor
        return copy.deepcopy(self, memo)


@dataclass(frozen=True)
class BatchSettings:
    batch_size: int
    num_batch_negs: int
    num_uniform_negs: int
    dynamic_relations: bool
    lr: float
    num_degree_negs: int = 0
    # The run's step implementation (`steps`): the compiled loop where it handles a task;
    # closed-form gradients (None: where the model's config allows them).
    whole_loop: bool = True
    closed_form: bool | None = None


@dataclass(frozen=True)
class WorkerTask:
    """One worker's share of a bucket and the partitions each relation's sides use."""

    edges: EdgeList
    partitions: dict[PartitionKey, Partition]
    lhs_keys: list[PartitionKey]  # per relation type
    rhs_keys: list[PartitionKey]
    settings: BatchSettings
    seed: int
    delay_seconds: float = 0.0  # Hogwild delay, so that workers do not all start at once
    trained: torch.Tensor | None = None  # the worker's slot of the bucket's `EdgeTally`
    # Each table's degree negatives' pool, of the whole bucket chunk (with num_degree_negs).
    degree_pools: Mapping[PartitionKey, DegreePool] | None = None


@dataclass(frozen=True)
class WorkerStats:
    loss: float  # summed over edges
    regularization: float
    count: int
    seconds: float


def train_part(state: ModelState, task: WorkerTask) -> WorkerStats:
    """Train on `task.edges` in batches, updating the shared tables and model in place; in
    one compiled call where the settings ask for it and `compiled_loop` handles the task."""
    if task.delay_seconds:
        time.sleep(task.delay_seconds)
    started = time.monotonic()
    generator = torch.Generator().manual_seed(task.seed)
    if task.settings.whole_loop and compiled_loop.handles(state, task):
        loss = compiled_loop.train_compiled(state, task, generator)
        return WorkerStats(loss=loss, regularization=0.0, count=len(task.edges),
                           seconds=time.monotonic() - started)
    settings = task.settings
    by_table = {id(p.embeddings): RowAdagrad(p.embeddings, settings.lr, p.adagrad_sum)
                for p in task.partitions.values()}
    loss_sum = regularization = 0.0
    for batch in iter_batches(task.edges, settings.batch_size, settings.dynamic_relations,
                              generator):
        raise_if_stopped()  # a thread worker stops with the run, not at the bucket's end
        relation = 0 if settings.dynamic_relations else int(batch.rel[0])
        if state.optimizer is not None:
            state.optimizer.zero_grad()
        gradients = batch_gradients(
            state.model, batch, task.partitions[task.lhs_keys[relation]].embeddings,
            task.partitions[task.rhs_keys[relation]].embeddings,
            num_batch_negs=settings.num_batch_negs, num_uniform_negs=settings.num_uniform_negs,
            generator=generator, closed_form=settings.closed_form,
            degree=degree_negatives(settings.num_degree_negs, task.degree_pools,
                                    task.lhs_keys[relation], task.rhs_keys[relation]))
        for rows in gradients.rows:
            by_table[id(rows.table)].step(rows.rows, rows.grads)
        if state.optimizer is not None:
            state.optimizer.step()
        loss_sum += float(gradients.loss)  # on the CPU already a float
        regularization += float(gradients.regularization)
        count_trained(task.trained, len(batch))
    return WorkerStats(loss=loss_sum, regularization=regularization, count=len(task.edges),
                       seconds=time.monotonic() - started)
