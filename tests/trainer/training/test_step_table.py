"""The table of step implementations (`training.steps`): each row, wherever it applies,
trains what the reference trains (autograd over the model, the torch code of the
optimizers, no compiled kernels), and a run names the row it chose in its summary."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from support.planted import write_planted_graph

from tessera import kernels
from tessera.config import ConfigSchema, parse_config
from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.progress import Reporter
from tessera.training.coordinator import summary_rows, train
from tessera.training.device_trainer import DeviceBucketTrainer
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import Partition
from tessera.training.steps import STEPS, StepImplementation, choose_step
from tessera.training.worker import BatchSettings, ModelState, WorkerTask, train_part

ROWS, EDGES, BATCH = 40, 120, 30
SETUPS: dict[str, dict[str, Any]] = {
    "default": {},
    "complex_diagonal, softmax": {"operator": "complex_diagonal", "loss_fn": "softmax"},
    "knowledge graph": {"operator": "complex_diagonal", "loss_fn": "softmax",
                        "dynamic_relations": True, "global_emb": False},
    "cos, logistic": {"comparator": "cos", "loss_fn": "logistic"},
    # Without global embeddings: under l2 one added to both sides cancels, its gradient is
    # rounding residue, and Adagrad's first step turns each path's residue into a step of lr.
    "l2, logistic": {"comparator": "l2", "loss_fn": "logistic", "global_emb": False},
    "N3": {"operator": "diagonal", "regularization_coef": 1e-2},
}
# The row each setup takes on the CPU (with the compiled kernels built) and on a device.
CHOSEN = {"default": ("compiled loop", "device, closed form"),
          "complex_diagonal, softmax": ("closed form", "device, closed form"),
          "knowledge graph": ("autograd", "device, autograd"),
          "cos, logistic": ("closed form", "device, closed form"),
          "l2, logistic": ("autograd", "device, autograd"),
          "N3": ("autograd", "device, autograd")}
CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")  # the compiled loop's condition


def config_of(setup: str) -> ConfigSchema:
    settings = dict(SETUPS[setup])
    operator = settings.pop("operator", "translation")
    return parse_config({
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": operator}],
        "dimension": 8, "comparator": "dot", "loss_fn": "ranking", "margin": 0.3,
        "lr": 0.05, "batch_size": BATCH, "num_batch_negs": 10,
        "num_uniform_negs": 7, "entity_path": "e", "edge_paths": ["p"],
        "checkpoint_path": "c", **settings})


def start(config: ConfigSchema) -> tuple[ModelState, Partition, EdgeList]:
    """A model away from its initial values, its table and random edges (rows repeat)."""
    relations = 3 if config.dynamic_relations else 1
    model = EmbeddingModel(config, relations)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    table = Partition(torch.randn(ROWS, 8, generator=generator),
                      torch.rand(ROWS, generator=generator))
    edges = EdgeList.from_ids(torch.randint(relations, (EDGES,), generator=generator),
                              torch.randint(ROWS, (EDGES,), generator=generator),
                              torch.randint(ROWS, (EDGES,), generator=generator))
    if not config.dynamic_relations:
        edges = EdgeList.from_ids(torch.zeros(EDGES, dtype=torch.long), edges.lhs.ids,
                                  edges.rhs.ids)
    return ModelState(model, make_model_optimizer(model, config)), table, edges


def worker_task(config: ConfigSchema, table: Partition, edges: EdgeList,
                step: StepImplementation | None) -> WorkerTask:
    settings = BatchSettings(batch_size=BATCH, num_batch_negs=config.num_batch_negs,
                             num_uniform_negs=config.num_uniform_negs,
                             dynamic_relations=config.dynamic_relations, lr=config.lr,
                             whole_loop=step.whole_loop if step else False,
                             closed_form=step.closed_form if step else False)
    key = ("node", 0)
    return WorkerTask(edges=edges, partitions={key: table}, lhs_keys=[key], rhs_keys=[key],
                      settings=settings, seed=11)


def train_with(step: StepImplementation | None, config: ConfigSchema
               ) -> tuple[float, Partition, list[torch.Tensor]]:
    """The loss, table and parameters after the edges trained by `step` (None: the
    reference, built and trained with the kernels off)."""
    with kernels.torch_only() if step is None else contextlib.nullcontext():
        state, table, edges = start(config)
        if step is not None and step.on_device:
            trainer = DeviceBucketTrainer(config, None, state, 1, CPU,  # type: ignore[arg-type]
                                          closed_form=step.closed_form)
            tables = {("node", 0): table}
            device_state = trainer.model.pull()
            loss, _ = trainer.train_edges(device_state, trainer.staged(edges), tables,
                                          [("node", 0)], [("node", 0)], seed=11)
            trainer.model.push()
        else:
            loss = train_part(state, worker_task(config, table, edges, step)).loss
    return loss, table, [p.detach().clone() for p in state.model.parameters()]


CASES = [(step, setup) for step in STEPS for setup in SETUPS
         if step.applies(config_of(setup))]


@pytest.mark.parametrize(("step", "setup"), CASES,
                         ids=[f"{step.name}-{setup}" for step, setup in CASES])
def test_every_implementation_trains_what_the_reference_trains(step: StepImplementation,
                                                               setup: str) -> None:
    config = config_of(setup)
    expected_loss, expected_table, expected_parameters = train_with(None, config)
    loss, table, parameters = train_with(step, config)
    assert loss == pytest.approx(expected_loss, rel=1e-4)
    torch.testing.assert_close(table.embeddings, expected_table.embeddings,
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(table.adagrad_sum, expected_table.adagrad_sum,
                               rtol=1e-4, atol=1e-6)
    for mine, reference in zip(parameters, expected_parameters):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-5)


def test_every_implementation_is_tested_on_some_setup() -> None:
    assert {step.name for step, _ in CASES} == {step.name for step in STEPS}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_one_function_chooses_the_first_row_that_applies(setup: str) -> None:
    if not (kernels.AVAILABLE and kernels.CHUNKED) and setup == "default":
        pytest.skip("tessera._kernels is not built: the compiled loop does not apply")
    on_cpu, on_device = CHOSEN[setup]
    assert choose_step(config_of(setup), on_device=False).name == on_cpu
    assert choose_step(config_of(setup), on_device=True).name == on_device


def test_a_run_names_its_step_implementation_in_its_summary(tmp_path) -> None:
    graph = write_planted_graph(tmp_path, 1, num_edges=500)
    config = parse_config(graph.config(num_epochs=1, comparator="l2"))
    summary = train(config, Reporter("quiet"))
    assert summary.step == "autograd"
    assert summary_rows(summary)["step"] == "autograd"
    device_summary = train(parse_config({**graph.config(num_epochs=1, comparator="l2"),
                                         "checkpoint_path": str(tmp_path / "device")}),
                           Reporter("quiet"), devices=[CPU])
    assert device_summary.step == "device, autograd"
