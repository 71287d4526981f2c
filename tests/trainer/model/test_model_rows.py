"""Row gathering: one leaf per distinct table, rows in the order named, max_norm, gradients."""

from __future__ import annotations

import pytest
import torch

from tessera.model.rows import gather_rows, renorm_rows


def table(rows: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, 3, generator=torch.Generator().manual_seed(seed))


def test_positions_point_at_the_requested_rows_of_each_table() -> None:
    lhs, rhs = table(6, 0), table(4, 1)
    lhs_ids, uniform = torch.tensor([4, 1, 4]), torch.tensor([[0, 1], [5, 5]])
    rhs_ids = torch.tensor([3, 3])
    gathered, touched = gather_rows([(lhs, [lhs_ids, uniform]), (rhs, [rhs_ids])])
    assert [t.rows.tolist() for t in touched] == [[4, 1, 4, 0, 1, 5, 5], [3, 3]]
    assert touched[0].table is lhs and touched[1].table is rhs
    (left_ids, left_uniform), (right_ids,) = gathered
    assert torch.equal(left_ids, lhs[lhs_ids])
    assert left_uniform.shape == (2, 2, 3) and torch.equal(left_uniform, lhs[uniform])
    assert torch.equal(right_ids, rhs[rhs_ids])


def test_both_sides_of_one_table_share_one_leaf_with_a_gradient_per_use() -> None:
    shared = table(5, 2)
    gathered, touched = gather_rows([(shared, [torch.tensor([0, 2])]),
                                     (shared, [torch.tensor([2, 3])])])
    assert len(touched) == 1 and touched[0].rows.tolist() == [0, 2, 2, 3]
    leaf = touched[0].embeddings
    (gathered[0][0].sum() + 3 * gathered[1][0].sum()).backward()
    # Row 2 is used by both sides: each use has its own gradient row (the optimizer sums them).
    assert leaf.grad[:, 0].tolist() == [1.0, 1.0, 3.0, 3.0]


def test_leaves_take_gradients_only_when_grad_is_enabled() -> None:
    values = table(3, 3)
    _, touched = gather_rows([(values, [torch.tensor([1])])])
    assert touched[0].embeddings.requires_grad
    with torch.no_grad():
        _, touched = gather_rows([(values, [torch.tensor([1])])])
    assert not touched[0].embeddings.requires_grad


def test_renorm_scales_only_rows_longer_than_max_norm() -> None:
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    renormed = renorm_rows(rows, 1.0)
    assert renormed[0].norm().item() == pytest.approx(1.0, abs=1e-6)
    assert renormed[1].tolist() == pytest.approx([0.3, 0.4])


def test_training_without_grad_still_writes_renormed_rows_back() -> None:
    # The closed-form training path runs under no_grad but is training all the same.
    values = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    with torch.no_grad():
        gathered, touched = gather_rows([(values, [torch.tensor([0, 0])])], max_norm=1.0,
                                        training=True)
    assert not touched[0].embeddings.requires_grad
    assert values[0].tolist() == pytest.approx([0.6, 0.8])
    assert gathered[0][0].flatten().tolist() == pytest.approx([0.6, 0.8, 0.6, 0.8])


def test_max_norm_writes_renormed_rows_back_only_when_training() -> None:
    values = torch.tensor([[3.0, 4.0], [6.0, 8.0], [0.3, 0.4]])
    with torch.no_grad():
        gathered, _ = gather_rows([(values, [torch.tensor([1])])], max_norm=1.0)
    assert gathered[0][0].norm().item() == pytest.approx(1.0, abs=1e-6)
    assert values[1].tolist() == [6.0, 8.0]
    gather_rows([(values, [torch.tensor([1, 2])])], max_norm=1.0)
    assert values[1].norm().item() == pytest.approx(1.0, abs=1e-6)
    assert values[0].tolist() == [3.0, 4.0] and values[2].tolist() == pytest.approx([0.3, 0.4])
