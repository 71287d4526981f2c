"""The compiled worker loop trains exactly what the batch loop trains.

Each case trains one worker's edges twice from the same starting tables, model and seed:
through the batch loop (settings' `whole_loop` off: per batch the closed-form gradients,
whose kernels the closed-form tests hold equal to autograd, and the optimizers) and through
`compiled_loop`. Tables, Adagrad state, model parameters and the loss must agree. And both
stop at the next batch when a stop signal was recorded.
"""

from __future__ import annotations

import copy
import dataclasses
import signal
from typing import Any

import pytest
import torch

from tessera import kernels, stop_signals
from tessera.config import parse_config
from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.model.negatives import degree_pools
from tessera.training import compiled_loop
from tessera.training.optimizers import DenseAdagrad, RowAdagrad, make_model_optimizer
from tessera.training.partitions import Partition
from tessera.training.worker import BatchSettings, ModelState, WorkerTask, train_part

pytestmark = [pytest.mark.skipif(not (kernels.AVAILABLE and kernels.CHUNKED),
                                 reason="tessera._kernels is not built"),
              pytest.mark.usefixtures("one_thread")]


def worker_case(num_edges: int = 230, *, two_types: bool = False, rows: tuple[int, int] =
                (40, 40), batch_size: int = 64, negs: tuple[int, int] = (10, 7),
                operator: str = "translation", **overrides: Any
                ) -> tuple[ModelState, WorkerTask]:
    """A model whose parameters are away from their initial values, its tables, and one
    worker's task over random edges (few rows, so that rows repeat within batches)."""
    types = ("user", "item") if two_types else ("node", "node")
    raw: dict[str, Any] = {
        "entities": {name: {"num_partitions": 1} for name in set(types)},
        "relations": [{"name": "r", "lhs": types[0], "rhs": types[1], "operator": operator,
                       **overrides.pop("relation", {})}],
        "dimension": 8, "comparator": "dot", "loss_fn": "ranking", "margin": 0.3,
        "lr": 0.05, "batch_size": batch_size, "num_batch_negs": negs[0],
        "num_uniform_negs": negs[1], "entity_path": "e", "edge_paths": ["p"],
        "checkpoint_path": "c", **overrides}
    config = parse_config(raw)
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    state = ModelState(model, make_model_optimizer(model, config))
    partitions = {(name, 0): Partition(torch.randn(count, 8, generator=generator),
                                       torch.rand(count, generator=generator))
                  for name, count in zip(types, rows)}
    edges = EdgeList.from_ids(torch.zeros(num_edges, dtype=torch.long),
                              torch.randint(rows[0], (num_edges,), generator=generator),
                              torch.randint(rows[1], (num_edges,), generator=generator))
    settings = BatchSettings(batch_size=batch_size, num_batch_negs=negs[0],
                             num_uniform_negs=negs[1], dynamic_relations=False, lr=config.lr)
    task = WorkerTask(edges=edges, partitions=partitions, lhs_keys=[(types[0], 0)],
                      rhs_keys=[(types[1], 0)], settings=settings, seed=11)
    return state, task


def in_loop(task: WorkerTask, compiled: bool) -> WorkerTask:
    """The task, trained by the compiled loop (where it handles it) or the batch loop."""
    return dataclasses.replace(task, settings=dataclasses.replace(task.settings,
                                                                  whole_loop=compiled))


def train_both_ways(state: ModelState, task: WorkerTask) -> list[tuple[Any, ...]]:
    """(loss, tables, row sums, parameters, parameter accumulators and step counts) after
    the batch loop, then after the compiled loop, each from a copy of the same start."""
    outcomes = []
    for compiled in (False, True):
        mine_state, mine_task = copy.deepcopy((state, task))
        stats = train_part(mine_state, in_loop(mine_task, compiled))
        optimizer = mine_state.optimizer
        outcomes.append((
            stats.loss, stats.count,
            [p.embeddings for p in mine_task.partitions.values()],
            [p.adagrad_sum for p in mine_task.partitions.values()],
            [p.detach() for p in mine_state.model.parameters()],
            [] if optimizer is None else [*optimizer.sums, *optimizer.steps]))
    return outcomes


def loops_agree(state: ModelState, task: WorkerTask) -> tuple[float, list[list[torch.Tensor]]]:
    """Assert that both loops train a copy of `task` alike: the same edges, loss and state;
    the compiled loop's loss and state."""
    (loss, count, *batch_loop), (compiled_loss, compiled_count, *compiled) = \
        train_both_ways(state, task)
    assert count == compiled_count == len(task.edges)
    assert compiled_loss == pytest.approx(loss, rel=1e-6)
    for expected, actual in zip(batch_loop, compiled):
        assert len(expected) == len(actual)
        for want, got in zip(expected, actual):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    return compiled_loss, compiled


CASES: dict[str, dict[str, Any]] = {
    "default setup, one table": {},
    "two entity types": {"two_types": True, "rows": (30, 50)},
    "no global embeddings": {"global_emb": False},
    "no operator": {"operator": "none"},
    "nothing to optimize but rows": {"operator": "none", "global_emb": False},
    "relation weight and relation_lr": {"relation": {"weight": 0.5}, "relation_lr": 0.2},
    "batch smaller than a chunk": {"num_edges": 23, "batch_size": 6},
    "no uniform negatives": {"negs": (10, 0)},
    "edges a chunk divides": {"num_edges": 200, "batch_size": 40},
    "several compiled calls": {"num_edges": 2300, "batch_size": 16, "negs": (5, 3)},
}


@pytest.mark.parametrize("case", CASES)
def test_the_compiled_loop_trains_what_the_batch_loop_trains(case: str) -> None:
    state, task = worker_case(**CASES[case])
    assert compiled_loop.handles(state, task)
    _, compiled = loops_agree(state, task)
    # Training moved everything compared (the comparison is not of untouched state).
    assert not torch.equal(compiled[0][0], task.partitions[task.lhs_keys[0]].embeddings)


def test_a_setup_the_compiled_loop_does_not_cover_takes_the_batch_loop() -> None:
    for overrides in ({"comparator": "cos"}, {"loss_fn": "softmax"},
                      {"operator": "diagonal"}, {"operator": "rotate"}, {"comparator": "l1"},
                      {"max_norm": 1.0}, {"bias": True},
                      {"regularization_coef": 0.1, "regularizer": "N3"}):
        state, task = worker_case(**overrides)
        assert not compiled_loop.handles(state, task), overrides
    state, task = worker_case()
    torch.set_num_threads(2)  # torch splits the products itself: not one worker's thread
    assert not compiled_loop.handles(state, task)


def test_negatives_are_drawn_as_the_batch_loop_draws_them() -> None:
    """Per batch, the left side's [chunks, uniform] then the right side's, from one
    generator; the last batch has fewer chunks."""
    lhs, rhs = compiled_loop.draw_negatives(25, 10, 4, 3, (7, 9),
                                            torch.Generator().manual_seed(2))
    generator = torch.Generator().manual_seed(2)
    expected: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    for chunks in (3, 3, 2):  # batches of 10, 10 and 5 edges in chunks of 4
        for side, rows in zip(expected, (7, 9)):
            side.append(torch.randint(rows, (chunks, 3), generator=generator).flatten())
    assert torch.equal(lhs, torch.cat(expected[0]))
    assert torch.equal(rhs, torch.cat(expected[1]))


def test_a_workers_calls_share_one_set_of_buffers_and_negatives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Allocated anew at each call (32 batches), a worker's buffers and negatives left the
    heap a little more fragmented each time, two threads allocating between them: megabytes
    over a bucket. Now the calls of one task reuse the first call's."""
    calls: list[tuple[object, int, int]] = []
    real = kernels.train_ranking

    def spy(lhs: kernels.RankingSide, rhs: kernels.RankingSide, *args: Any,
            **kwargs: Any) -> float:
        calls.append((kwargs["buffers"], lhs.negatives.data_ptr(), rhs.negatives.data_ptr()))
        return real(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(kernels, "train_ranking", spy)
    state, task = worker_case(**CASES["several compiled calls"])
    compiled_loop.train_compiled(state, task, torch.Generator().manual_seed(0))
    assert len(calls) == 5  # 144 batches of 16, 32 a call
    assert calls[0][0] is not None and len(set(calls)) == 1


def test_buffers_made_for_smaller_batches_are_refused() -> None:
    state, task = worker_case()
    part = task.partitions[task.lhs_keys[0]]
    table = kernels.RankingTable(part.embeddings, part.adagrad_sum)
    ids = task.edges.lhs.ids[:64].contiguous()
    negatives = torch.zeros(7 * 7, dtype=torch.long)  # 64 edges: 7 chunks of 10, 7 each
    side = kernels.RankingSide(ids, negatives, table, [])
    small = kernels.ranking_buffers(64, 32, 10, 7, 8)
    with pytest.raises(ValueError, match="buffers were made for other batches"):
        kernels.train_ranking(side, side, [], batch_size=64, chunk_size=10, uniform=7,
                              margin=0.1, weight=1.0, lr=0.1, shift_lr=0.0, eps=1e-9,
                              buffers=small)


def test_an_id_outside_the_table_is_refused_before_any_update() -> None:
    state, task = worker_case()
    task.edges.rhs.ids[100] = 40  # the table has 40 rows
    before = task.partitions[task.lhs_keys[0]].embeddings.clone()
    with pytest.raises(IndexError, match="row id 40"):
        compiled_loop.train_compiled(state, task, torch.Generator().manual_seed(0))
    assert torch.equal(task.partitions[task.lhs_keys[0]].embeddings, before)


def autograd_step(state: ModelState, task: WorkerTask) -> float:
    """One batch (all of the task's edges) the reference way: `EmbeddingModel.forward` and
    `backward()`, then the optimizers' torch updates (kernels off), with the negatives the
    worker's generator draws."""
    settings = task.settings
    lhs_part = task.partitions[task.lhs_keys[0]]
    rhs_part = task.partitions[task.rhs_keys[0]]
    assert state.optimizer is not None
    with kernels.torch_only():
        model_optimizer = DenseAdagrad(state.optimizer.params, state.optimizer.lr)
        model_optimizer.load_state_dict(state.optimizer.state_dict())
        result = state.model(task.edges, lhs_part.embeddings, rhs_part.embeddings,
                             num_batch_negs=settings.num_batch_negs,
                             num_uniform_negs=settings.num_uniform_negs,
                             generator=torch.Generator().manual_seed(task.seed))
        result.loss.backward()
        for touched in result.touched:
            row_sum = next(p.adagrad_sum for p in task.partitions.values()
                           if p.embeddings is touched.table)
            RowAdagrad(touched.table, settings.lr, row_sum).step(
                touched.rows, touched.embeddings.grad.clone())
        model_optimizer.step()
    return float(result.loss.detach())


@pytest.mark.parametrize("case", ["default setup, one table", "two entity types",
                                  "batch smaller than a chunk"])
def test_one_compiled_batch_equals_autograd_and_the_torch_optimizers(case: str) -> None:
    overrides = {**CASES[case]}
    overrides["num_edges"] = overrides.get("batch_size", 64)  # one batch
    state, task = worker_case(**overrides)
    assert compiled_loop.handles(state, task)
    reference_state, reference_task = copy.deepcopy((state, task))
    expected_loss = autograd_step(reference_state, reference_task)
    stats = train_part(state, task)
    assert stats.loss == pytest.approx(expected_loss, rel=1e-5)
    for key, partition in task.partitions.items():
        reference = reference_task.partitions[key]
        torch.testing.assert_close(partition.embeddings, reference.embeddings,
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(partition.adagrad_sum, reference.adagrad_sum,
                                   rtol=1e-5, atol=1e-7)
    for param, reference_param in zip(state.model.parameters(),
                                      reference_state.model.parameters()):
        torch.testing.assert_close(param.detach(), reference_param.detach(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["default setup, one table", "two entity types",
                                  "no uniform negatives", "several compiled calls"])
def test_degree_negatives_train_in_the_compiled_loop_as_in_the_batch_loop(case: str) -> None:
    """`num_degree_negs`: drawn per chunk after the uniform ones, from the bucket's pools,
    by both loops alike."""
    state, task = worker_case(**CASES[case])
    pools = degree_pools(task.edges, task.lhs_keys, task.rhs_keys,
                         lambda key: task.partitions[key].embeddings)
    task = dataclasses.replace(task, degree_pools=pools, settings=dataclasses.replace(
        task.settings, num_degree_negs=4))
    assert compiled_loop.handles(state, task)
    compiled_loss, _ = loops_agree(state, task)
    # The degree draws changed what trained: not the run without them.
    plain_state, plain_task = worker_case(**CASES[case])
    plain_loss = train_part(plain_state, plain_task).loss
    assert plain_loss != pytest.approx(compiled_loss, rel=1e-6)


def test_reciprocal_relations_take_the_batch_loop() -> None:
    state, task = worker_case(reciprocal_relations=True)
    assert state.model.num_relations == 2
    assert not compiled_loop.covers(state.model.config)
    assert not compiled_loop.handles(state, task)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_recorded_stop_signal_stops_a_worker_before_its_next_batch(
        compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread workers share the process's signal record: Ctrl-C or SIGTERM stops them at
    the next batch (or block of batches), not at the end of their share of the bucket."""
    state, task = worker_case()
    before = [p.embeddings.clone() for p in task.partitions.values()]
    monkeypatch.setattr(stop_signals, "_received", signal.SIGTERM)
    with pytest.raises(stop_signals.Terminated):
        train_part(state, in_loop(task, compiled))
    for table, start in zip((p.embeddings for p in task.partitions.values()), before):
        torch.testing.assert_close(table, start, rtol=0, atol=0)  # not one batch trained
