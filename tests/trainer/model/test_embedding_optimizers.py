"""Row-wise Adagrad for embedding tables and the model parameters' Adagrad."""

from __future__ import annotations

import math

import pytest
import torch

from tessera import kernels
from tessera.errors import BadInputError
from tessera.model import EmbeddingModel
from tessera.training.optimizers import (
    DenseAdagrad,
    RowAdagrad,
    coalesce_rows,
    make_model_optimizer,
)


def test_known_updates_of_one_row() -> None:
    table = torch.tensor([[1.0, 2.0], [5.0, 5.0]])
    optimizer = RowAdagrad(table, lr=0.1)
    grad = torch.tensor([[0.6, 0.8]])  # mean square 0.5
    optimizer.step(torch.tensor([0]), grad)
    step = 0.1 / math.sqrt(0.5)
    assert table[0].tolist() == pytest.approx([1 - 0.6 * step, 2 - 0.8 * step])
    optimizer.step(torch.tensor([0]), grad)  # accumulated 1.0: a plain lr * grad step
    assert table[0].tolist() == pytest.approx([1 - 0.6 * step - 0.06, 2 - 0.8 * step - 0.08])
    assert optimizer.row_sum.tolist() == pytest.approx([1.0, 0.0])
    assert table[1].tolist() == [5.0, 5.0], "untouched rows stay as they were"


def test_equals_coordinate_adagrad_when_a_row_has_one_gradient_value() -> None:
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(4, 3, generator=generator)
    table = start.clone()
    reference = torch.nn.Parameter(start.clone())
    row_adagrad = RowAdagrad(table, lr=0.5)
    adagrad = torch.optim.Adagrad([reference], lr=0.5)
    for _ in range(3):
        per_row = torch.randn(4, 1, generator=generator).expand(4, 3).contiguous()
        row_adagrad.step(torch.arange(4), per_row)
        reference.grad = per_row.clone()
        adagrad.step()
    assert torch.allclose(table, reference.detach(), atol=1e-6)


def test_a_row_named_twice_is_updated_once_with_its_total_gradient() -> None:
    grads = torch.tensor([[1.0, 0.0], [0.5, 2.0], [3.0, 1.0]])
    rows, summed = coalesce_rows(torch.tensor([4, 1, 4]), grads)
    assert rows.tolist() == [1, 4] and summed.tolist() == [[0.5, 2.0], [4.0, 1.0]]
    twice, once = torch.ones(6, 2), torch.ones(6, 2)
    RowAdagrad(twice, lr=0.1).step(torch.tensor([4, 1, 4]), grads)
    RowAdagrad(once, lr=0.1).step(rows, summed)
    assert torch.equal(twice, once)


def test_coalescing_sums_every_occurrence_of_every_row() -> None:
    generator = torch.Generator().manual_seed(1)
    rows = torch.randint(0, 6, (40,), generator=generator)  # many repeats, row 5 maybe none
    grads = torch.randn(40, 3, generator=generator)
    unique_rows, summed = coalesce_rows(rows, grads)
    assert unique_rows.tolist() == sorted(set(rows.tolist()))
    for row, total in zip(unique_rows.tolist(), summed):
        torch.testing.assert_close(total, grads[rows == row].sum(0))


def test_state_dict_has_pbgs_layout_and_round_trips() -> None:
    optimizer = RowAdagrad(torch.zeros(3, 2), lr=0.25)
    optimizer.step(torch.tensor([2]), torch.tensor([[1.0, 3.0]]))
    state = optimizer.state_dict()
    assert state["param_groups"] == [{"lr": 0.25, "lr_decay": 0, "weight_decay": 0,
                                      "params": [0]}]
    assert state["state"][0]["sum"].tolist() == [0.0, 0.0, 5.0]
    restored = RowAdagrad(torch.zeros(3, 2), lr=0.25)
    restored.load_state_dict(state)
    assert torch.equal(restored.row_sum, optimizer.row_sum)


@pytest.mark.parametrize("state", [
    {"state": {0: {"sum": torch.zeros(4)}}, "param_groups": []},
    {"state": {}},
    "not a state dict",
])
def test_a_state_of_another_table_is_refused(state: object) -> None:
    with pytest.raises(BadInputError, match="row optimizer state"):
        RowAdagrad(torch.zeros(3, 2), lr=0.1).load_state_dict(state)  # type: ignore[arg-type]


def test_accumulators_can_be_shared_and_provided() -> None:
    shared = torch.zeros(3).share_memory_()
    optimizer = RowAdagrad(torch.zeros(3, 2), lr=0.1, row_sum=shared)
    optimizer.step(torch.tensor([1]), torch.tensor([[2.0, 2.0]]))
    assert shared.tolist() == pytest.approx([0.0, 4.0, 0.0])
    assert RowAdagrad(torch.zeros(3, 2), lr=0.1).share_memory_().row_sum.is_shared()
    with pytest.raises(ValueError, match="accumulator"):
        RowAdagrad(torch.zeros(3, 2), lr=0.1, row_sum=torch.zeros(2))


def test_model_optimizer_uses_the_relation_learning_rate(make_config) -> None:
    relations = [{"name": "r", "lhs": "node", "rhs": "node", "operator": "diagonal"}]
    model = EmbeddingModel(make_config(relations=relations, lr=0.1, relation_lr=0.02), 1)
    optimizer = make_model_optimizer(model, model.config)
    assert optimizer is not None and optimizer.lr == 0.02
    assert {id(p) for p in optimizer.params} == {id(p) for p in model.parameters()}
    default = EmbeddingModel(make_config(relations=relations, lr=0.1), 1)
    assert make_model_optimizer(default, default.config).lr == 0.1
    bare = EmbeddingModel(make_config(global_emb=False), 1)
    assert make_model_optimizer(bare, bare.config) is None


@pytest.fixture(params=["kernels", "torch"])
def dense_step(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """DenseAdagrad's compiled step, then its torch one."""
    if request.param == "kernels" and not kernels.AVAILABLE:
        pytest.skip("tessera._kernels is not built")
    monkeypatch.setattr(kernels, "AVAILABLE", request.param == "kernels")
    return request.param


@pytest.mark.usefixtures("dense_step")
def test_dense_adagrad_matches_torch_adagrad_and_its_state_dict() -> None:
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    dense = DenseAdagrad(ours, lr=0.3)
    reference = torch.optim.Adagrad(theirs, lr=0.3)
    for _ in range(4):
        grads = [torch.randn_like(p) for p in ours]
        for params, optimizer in ((ours, dense), (theirs, reference)):
            optimizer.zero_grad()
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    assert [int(steps) for steps in dense.steps] == [4, 4]
    # PBG loads the model optimizer's state into torch's Adagrad: ours must fit it...
    reloaded = torch.optim.Adagrad([torch.nn.Parameter(p.detach().clone()) for p in ours],
                                   lr=0.3)
    reloaded.load_state_dict(dense.state_dict())
    torch.testing.assert_close(reloaded.state_dict()["state"][0]["sum"], dense.sums[0])
    # ...and torch's state must load into ours.
    restored = DenseAdagrad([torch.nn.Parameter(p.detach().clone()) for p in ours], lr=0.3)
    restored.load_state_dict(reference.state_dict())
    torch.testing.assert_close(restored.sums[1], reference.state_dict()["state"][1]["sum"])


@pytest.mark.usefixtures("dense_step")
def test_dense_adagrad_leaves_parameters_without_a_gradient_alone() -> None:
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    dense = DenseAdagrad([used, unused], lr=0.5)
    used.grad = torch.full((3,), 2.0)
    dense.step()
    # First Adagrad step: sum = g^2 = 4, update = lr * g / sqrt(sum) = 0.5.
    torch.testing.assert_close(used.detach(), torch.full((3,), 0.5))
    assert unused.detach().tolist() == [1.0, 1.0]
    assert dense.steps[0].item() == 1 and dense.steps[1].item() == 0
    assert dense.sums[1].abs().sum() == 0


def test_the_compiled_dense_step_refuses_a_gradient_of_another_shape() -> None:
    if not kernels.AVAILABLE:
        pytest.skip("tessera._kernels is not built")
    param = torch.nn.Parameter(torch.ones(4))
    with pytest.raises(ValueError, match=r"gradient: expected a contiguous tensor of shape \(4,\)"):
        kernels.dense_adagrad(param, torch.ones(5), torch.zeros(4), torch.zeros(()), 0.1, 1e-10)
    assert param.detach().tolist() == [1.0] * 4
