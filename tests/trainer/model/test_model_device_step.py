"""The device path's training step, run here on `torch.device("cpu")`: for every operator,
comparator, loss and negative mode, one step updates the tables and the model as the CPU
path's step does (compiled kernels and all), and repeated steps learn a planted graph.

The device path is what a GPU runs: the model copied to the device (`DeviceModel`), the
partitions copied there (`PartitionCopier`), the torch code of the model and optimizers
(kernels off), row coalescing without host reads, scalars left on the device.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from tessera import kernels
from tessera.edgelist import EdgeList, EntityList
from tessera.model import COMPARATORS, LOSSES, OPERATORS, EmbeddingModel
from tessera.model.gradients import batch_gradients
from tessera.training.device_copies import PartitionCopier
from tessera.training.device_model import DeviceModel
from tessera.training.device_trainer import train_batch
from tessera.training.optimizers import (
    RowAdagrad,
    coalesce_rows,
    coalesce_rows_without_syncs,
    make_model_optimizer,
)
from tessera.training.partitions import Partition
from tessera.training.worker import ModelState

CPU = torch.device("cpu")
BIPARTITE = {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}}


@dataclass
class Setup:
    """A model, its two tables (lhs, rhs) and the planted edges: user i -> item i."""

    state: ModelState
    tables: dict[str, Partition]
    edges: EdgeList


def planted(make_config: Any, operator: str = "translation", comparator: str = "dot",
            loss: str = "softmax", mode: str = "batch and uniform") -> Setup:
    settings: dict[str, Any] = {"num_batch_negs": 8, "num_uniform_negs": 2}
    relation: dict[str, Any] = {"name": "bought", "lhs": "user", "rhs": "item",
                                "operator": operator}
    entities: dict[str, Any] = BIPARTITE
    num_relations, rel = 1, torch.zeros(8, dtype=torch.long)
    lhs = EntityList.from_ids(torch.arange(8))
    rhs_ids = torch.arange(8)
    lhs_rows = 8
    if mode == "batch only":
        settings["num_uniform_negs"] = 0
    elif mode == "uniform only":
        settings.update(num_batch_negs=0, num_uniform_negs=4)
    elif mode == "all entities":
        relation["all_negs"] = True
    elif mode == "left side disabled":
        # Logistic: with only the right side corrupted, softmax and ranking see every
        # candidate shifted alike by the translation and the global embedding, whose gradients
        # are then exactly zero in exact arithmetic, and Adagrad's first step turns each
        # path's rounding residue (1e-8) into a step of about lr.
        settings["disable_lhs_negs"] = True
        loss = "logistic"
    elif mode == "regularized":
        settings["regularization_coef"] = 1e-3
    elif mode == "dynamic relations":
        settings.update(dynamic_relations=True, num_batch_negs=24, num_uniform_negs=0)
        num_relations, rel = 3, torch.arange(3).repeat_interleave(8)
        lhs, rhs_ids = EntityList.from_ids(torch.arange(8).repeat(3)), \
            (torch.arange(8).repeat(3) + 3 * rel) % 8
    elif mode == "featurized":
        entities = {"user": {"num_partitions": 1, "featurized": True},
                    "item": {"num_partitions": 1}}
        # User i has its own feature i and a feature (8 or 9) shared with half the others.
        data = torch.stack([torch.arange(8), 8 + torch.arange(8) % 2], dim=1).flatten()
        lhs, lhs_rows = EntityList.from_features(torch.arange(0, 17, 2), data), 10
    config = make_config(entities=entities, relations=[relation], dimension=8, lr=0.1,
                         comparator=comparator, loss_fn=loss, **settings)
    model = EmbeddingModel(config, num_relations)
    generator = torch.Generator().manual_seed(0)
    tables = {side: Partition(0.1 * torch.randn(rows, 8, generator=generator),
                              torch.zeros(rows))
              for side, rows in (("lhs", lhs_rows), ("rhs", 8))}
    edges = EdgeList(rel=rel, lhs=lhs, rhs=EntityList.from_ids(rhs_ids))
    return Setup(ModelState(model, make_model_optimizer(model, config)), tables, edges)


def cpu_step(setup: Setup, generator: torch.Generator) -> float:
    """The CPU path's step (as a Hogwild worker takes it, kernels where built)."""
    state, config = setup.state, setup.state.model.config
    if state.optimizer is not None:
        state.optimizer.zero_grad()
    gradients = batch_gradients(state.model, setup.edges, setup.tables["lhs"].embeddings,
                                setup.tables["rhs"].embeddings,
                                num_batch_negs=config.num_batch_negs,
                                num_uniform_negs=config.num_uniform_negs, generator=generator)
    optimizers = {id(p.embeddings): RowAdagrad(p.embeddings, config.lr, p.adagrad_sum)
                  for p in setup.tables.values()}
    for rows in gradients.rows:
        optimizers[id(rows.table)].step(rows.rows, rows.grads)
    if state.optimizer is not None:
        state.optimizer.step()
    return float(gradients.loss)


def device_steps(setup: Setup, generator: torch.Generator, steps: int) -> list[float]:
    """`steps` steps of the device path on the CPU; the host's copies are updated after."""
    config = setup.state.model.config
    with kernels.torch_only():
        device_model = DeviceModel(setup.state, config, CPU)
        tables = PartitionCopier(CPU, torch.float32).to_device(setup.tables).ready()
        optimizers = {id(p.embeddings): RowAdagrad(p.embeddings, config.lr, p.adagrad_sum,
                                                   without_syncs=True)
                      for p in tables.values()}
        state = device_model.pull()
        losses = [float(train_batch(state, setup.edges, tables["lhs"].embeddings,
                                    tables["rhs"].embeddings, optimizers, generator)[0])
                  for _ in range(steps)]
        device_model.push()
        PartitionCopier.to_host(tables, setup.tables)
    return losses


COMBINATIONS = list(itertools.product(sorted(OPERATORS), sorted(COMPARATORS), sorted(LOSSES)))
NEGATIVE_MODES = ["batch and uniform", "batch only", "uniform only", "all entities",
                  "left side disabled", "regularized", "dynamic relations", "featurized"]


def check_one_step_agrees(make_config: Any, **choices: str) -> None:
    on_cpu = planted(make_config, **choices)
    on_device = copy.deepcopy(on_cpu)
    cpu_loss = cpu_step(on_cpu, torch.Generator().manual_seed(1))
    [device_loss] = device_steps(on_device, torch.Generator().manual_seed(1), steps=1)
    assert device_loss == pytest.approx(cpu_loss, rel=1e-5, abs=1e-6)
    for side in ("lhs", "rhs"):
        torch.testing.assert_close(on_device.tables[side].embeddings,
                                   on_cpu.tables[side].embeddings, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(on_device.tables[side].adagrad_sum,
                                   on_cpu.tables[side].adagrad_sum, rtol=1e-5, atol=1e-7)
    for device_param, cpu_param in zip(on_device.state.model.parameters(),
                                       on_cpu.state.model.parameters()):
        torch.testing.assert_close(device_param, cpu_param, rtol=1e-5, atol=1e-6)


def check_learns(make_config: Any, steps: int, **choices: str) -> None:
    setup = planted(make_config, **choices)
    losses = device_steps(setup, torch.Generator().manual_seed(0), steps)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(("operator", "comparator", "loss"), COMBINATIONS)
def test_device_step_agrees_with_the_cpu_step_and_learns(make_config: Any, operator: str,
                                                          comparator: str, loss: str) -> None:
    choices = {"operator": operator, "comparator": comparator, "loss": loss}
    check_one_step_agrees(make_config, **choices)
    check_learns(make_config, 20, **choices)


@pytest.mark.parametrize("mode", NEGATIVE_MODES)
def test_every_negative_mode_agrees_and_learns(make_config: Any, mode: str) -> None:
    check_one_step_agrees(make_config, mode=mode)
    check_learns(make_config, 30, mode=mode)


def test_coalescing_without_host_reads_sums_each_rows_gradients() -> None:
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 20, (50,), generator=generator)
    grads = torch.randn(50, 3, generator=generator)
    expected_rows, expected = coalesce_rows(rows, grads.clone())
    slot_rows, summed = coalesce_rows_without_syncs(rows, grads.clone())
    distinct = len(expected_rows)
    assert slot_rows.shape == rows.shape  # sized without reading the count on the host
    torch.testing.assert_close(slot_rows[:distinct], expected_rows)
    torch.testing.assert_close(summed[:distinct], expected)
    assert bool((summed[distinct:] == 0).all())
    # The spare slots name the batch's rows as sorted, not one row for all (a GPU would
    # serialise the atomic adds of a row named by every spare slot).
    torch.testing.assert_close(slot_rows[distinct:], torch.sort(rows).values[distinct:])


def test_spare_slots_leave_their_rows_as_they_were() -> None:
    """A step through slots with zero gradients changes only the rows that had gradients."""
    generator = torch.Generator().manual_seed(1)
    table = torch.randn(20, 4, generator=generator)
    rows = torch.tensor([3, 3, 3, 7, 7, 12])
    grads = torch.randn(6, 4, generator=generator)
    expected = table.clone()
    RowAdagrad(expected, 0.1).step(*coalesce_rows(rows, grads.clone()))
    with kernels.torch_only():
        RowAdagrad(table, 0.1, without_syncs=True).step(rows, grads.clone())
    torch.testing.assert_close(table, expected)


def test_pushing_the_device_model_keeps_host_updates_made_meanwhile(make_config: Any) -> None:
    """The distributed parameter sync may change the host's copy while a bucket trains."""
    setup = planted(make_config)
    host = setup.state
    translation = host.model.rhs_operators[0].translation
    device_model = DeviceModel(host, host.model.config, CPU)
    device_state = device_model.pull()
    device_state.model.rhs_operators[0].translation.data += 1.0  # the bucket's change
    translation.data += 10.0  # the parameter server's, meanwhile
    device_model.push()
    torch.testing.assert_close(translation.data, torch.full((8,), 11.0))


@pytest.mark.parametrize("operator", ["translation", "complex_diagonal", "rotate"])
def test_half_precision_tables_learn_as_well_as_single_precision(make_config: Any,
                                                                 operator: str) -> None:
    """Embeddings stored as float16 on the device, scored and stepped in float32."""
    final_losses = {}
    for dtype in (torch.float32, torch.float16):
        setup = planted(make_config, operator=operator, comparator="dot", loss="softmax")
        config = setup.state.model.config
        generator = torch.Generator().manual_seed(0)
        with kernels.torch_only():
            state = DeviceModel(setup.state, config, CPU).pull()
            tables = PartitionCopier(CPU, dtype).to_device(setup.tables).ready()
            assert tables["lhs"].embeddings.dtype == dtype
            assert tables["lhs"].adagrad_sum.dtype == torch.float32
            optimizers = {id(p.embeddings): RowAdagrad(p.embeddings, config.lr, p.adagrad_sum,
                                                       without_syncs=True)
                          for p in tables.values()}
            losses = [float(train_batch(state, setup.edges, tables["lhs"].embeddings,
                                        tables["rhs"].embeddings, optimizers, generator)[0])
                      for _ in range(30)]
        final_losses[dtype] = losses[-1]
        assert losses[-1] < 0.5 * losses[0]
    assert final_losses[torch.float16] == pytest.approx(final_losses[torch.float32], rel=0.05)
