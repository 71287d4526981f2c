"""Recorded device steps (`recorded_steps`): each full batch shape of a long chunk is recorded
once and replayed, remainders and short chunks step plainly, and a chunk trained through
recordings trains as one trained step by step. On the CPU a replay steps again through the
same buffers and sums; where a CUDA device exists the same checks record CUDA graphs, for
every setup PBG's examples use."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from tessera.config import parse_config
from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.training.device_copies import PartitionCopier
from tessera.training.device_trainer import DeviceBucketTrainer
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import Partition
from tessera.training.recorded_steps import MIN_BATCHES_TO_RECORD
from tessera.training.worker import ModelState

ROWS, BATCH = 64, 10
SETUPS: dict[str, dict[str, Any]] = {
    "default": {},
    "knowledge graph": {"operator": "complex_diagonal", "dynamic_relations": True,
                        "loss_fn": "softmax", "global_emb": False},
    "logistic, cos": {"loss_fn": "logistic", "comparator": "cos"},
    "l2, linear": {"comparator": "l2", "operator": "linear"},
    "all negatives": {"all_negs": True},
    "degree negatives": {"num_degree_negs": 4},
    "N3, relation weight": {"operator": "complex_diagonal", "regularization_coef": 1e-3,
                            "weight": 0.5},
    "reciprocal": {"reciprocal_relations": True, "operator": "diagonal"},
    "uniform only": {"num_batch_negs": 0, "num_uniform_negs": 8},
}
RELATION_KEYS = ("operator", "all_negs", "weight")

devices = [torch.device("cpu")]
if torch.cuda.is_available():
    devices.append(torch.device("cuda"))


def trainer_for(setup: str, device: torch.device, record: bool,
                batch_size: int = BATCH) -> DeviceBucketTrainer:
    settings = dict(SETUPS[setup])
    relation = {"name": "r", "lhs": "node", "rhs": "node",
                **{key: settings.pop(key) for key in RELATION_KEYS if key in settings}}
    settings.setdefault("num_batch_negs", 5)
    settings.setdefault("num_uniform_negs", 5)
    config = parse_config({"entities": {"node": {"num_partitions": 1}},
                           "relations": [relation], "dimension": 8, "lr": 0.1,
                           "batch_size": batch_size, "entity_path": "unused",
                           "edge_paths": ["unused"], "checkpoint_path": "unused", **settings})
    model = EmbeddingModel(config, 3 if config.dynamic_relations else 1)
    torch.manual_seed(0)
    for parameter in model.parameters():  # not the initial values, which some have as 0
        parameter.data.add_(0.1 * torch.randn_like(parameter))
    state = ModelState(model, make_model_optimizer(model, config))
    return DeviceBucketTrainer(config, None, state, 1, device,  # type: ignore[arg-type]
                               record_steps=record)


def random_edges(count: int, relations: int) -> EdgeList:
    generator = torch.Generator().manual_seed(3)
    return EdgeList.from_ids(torch.randint(0, relations, (count,), generator=generator),
                             torch.randint(0, ROWS, (count,), generator=generator),
                             torch.randint(0, ROWS, (count,), generator=generator))


def train_chunk(trainer: DeviceBucketTrainer, edges: EdgeList
                ) -> tuple[tuple[float, float], Partition, list[torch.Tensor]]:
    """One chunk through `train_edges`; its sums, the table and the model's parameters."""
    generator = torch.Generator().manual_seed(1)
    table = Partition(0.1 * torch.randn(ROWS, 8, generator=generator), torch.zeros(ROWS))
    tables = PartitionCopier(trainer.device, torch.float32).to_device({0: table}).ready()
    state = trainer.model.pull()
    sums = trainer.train_edges(state, trainer.staged(edges), tables, [0], [0], seed=7)
    trainer.model.push()
    PartitionCopier.to_host(tables, {0: table})
    return sums, table, [p.detach().cpu() for p in trainer.state.model.parameters()]


@pytest.mark.parametrize("device", devices, ids=str)
@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_a_chunk_trained_through_recordings_trains_as_step_by_step(
        setup: str, device: torch.device) -> None:
    recording = trainer_for(setup, device, record=True)
    relations = 3 if recording.config.dynamic_relations else 1
    edges = random_edges(MIN_BATCHES_TO_RECORD * BATCH + 7, relations)  # and a remainder
    plain = trainer_for(setup, device, record=False)
    (loss, regularization), table, parameters = train_chunk(recording, copy.deepcopy(edges))
    (plain_loss, plain_regularization), plain_table, plain_parameters = \
        train_chunk(plain, edges)
    assert recording.recorded_shapes == 1  # the full batches' shape; not the remainder's
    assert plain.recorded_shapes == 0
    # On a GPU the order of atomic adds varies from run to run; on the CPU nothing does.
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if device.type == "cuda" else {"rtol": 0, "atol": 0}
    assert loss == pytest.approx(plain_loss, rel=tolerance["rtol"] or 1e-12)
    assert regularization == pytest.approx(plain_regularization, rel=tolerance["rtol"] or 1e-12)
    assert loss > 0
    torch.testing.assert_close(table.embeddings, plain_table.embeddings, **tolerance)
    torch.testing.assert_close(table.adagrad_sum, plain_table.adagrad_sum, **tolerance)
    for mine, theirs in zip(parameters, plain_parameters):
        torch.testing.assert_close(mine, theirs, **tolerance)


@pytest.mark.parametrize("device", devices, ids=str)
def test_recorded_steps_learn(device: torch.device) -> None:
    """Replayed steps keep training: the loss of later chunks falls."""
    trainer = trainer_for("default", device, record=True)
    generator = torch.Generator().manual_seed(0)
    lhs = torch.randint(0, ROWS, (400,), generator=generator)
    edges = EdgeList.from_ids(torch.zeros(400, dtype=torch.long), lhs, (lhs + 1) % ROWS)
    table = Partition(0.1 * torch.randn(ROWS, 8, generator=generator), torch.zeros(ROWS))
    tables = PartitionCopier(device, torch.float32).to_device({0: table}).ready()
    state = trainer.model.pull()
    losses = [trainer.train_edges(state, trainer.staged(edges), tables, [0], [0], seed)[0]
              for seed in range(8)]
    assert trainer.recorded_shapes == 8  # one shape a chunk: recordings live with the chunk
    assert losses[-1] < 0.5 * losses[0]


def test_short_chunks_and_single_batches_are_not_recorded() -> None:
    trainer = trainer_for("default", torch.device("cpu"), record=True)
    train_chunk(trainer, random_edges((MIN_BATCHES_TO_RECORD - 1) * BATCH, 1))
    assert trainer.recorded_shapes == 0
    # Every shape of a long chunk comes once: none repeats, none is recorded.
    single = trainer_for("default", torch.device("cpu"), record=True,
                         batch_size=MIN_BATCHES_TO_RECORD * BATCH)
    train_chunk(single, random_edges(MIN_BATCHES_TO_RECORD * BATCH, 1))
    assert single.recorded_shapes == 0
