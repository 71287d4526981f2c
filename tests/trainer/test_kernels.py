"""The compiled kernels against the torch code they stand in for, and their input checks.

The closed-form tests (tests/trainer/model) hold the ranking kernel equal to autograd inside
whole training steps; here the row-wise Adagrad and gather kernels meet their torch references
directly.
"""

from __future__ import annotations

import os
import platform
import sys

import pytest
import torch

from tessera import kernels
from tessera.model.losses import RankingLoss
from tessera.model.negatives import mask_negatives
from tessera.training.optimizers import EPSILON, RowAdagrad


def test_the_extension_is_built_where_a_compiler_was_found() -> None:
    # The test environment is installed with a C compiler: the fast path must be there.
    if os.environ.get("TESSERA_KERNELS") == "0":
        pytest.skip("kernels switched off by TESSERA_KERNELS=0")
    assert kernels.AVAILABLE


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                    reason="torch's Linux x86-64 wheels are the ones that ship MKL")
def test_the_chunked_path_finds_torch_blas_where_torch_ships_mkl() -> None:
    # Where this holds, the tests that need `ranking_chunks` run rather than skip.
    if os.environ.get("TESSERA_KERNELS") == "0":
        pytest.skip("kernels switched off by TESSERA_KERNELS=0")
    assert kernels.AVAILABLE and kernels.CHUNKED


@pytest.fixture
def needs_kernels() -> None:
    if not kernels.AVAILABLE:
        pytest.skip("tessera._kernels is not built")


def adagrad_tables(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A table with accumulators already > 0, and a batch naming some rows several times."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(50, 7, generator=generator)
    row_sum = torch.rand(50, generator=generator)
    rows = torch.cat([torch.randint(50, (30,), generator=generator), torch.tensor([3, 3, 3])])
    grads = torch.randn(len(rows), 7, generator=generator)
    return table, row_sum, rows, grads


def test_row_adagrad_kernel_equals_the_torch_step(needs_kernels,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    results = []
    for available in (False, True):
        monkeypatch.setattr(kernels, "AVAILABLE", available)
        table, row_sum, rows, grads = adagrad_tables(0)
        optimizer = RowAdagrad(table, lr=0.3, row_sum=row_sum)
        assert optimizer.use_kernel == available
        optimizer.step(rows, grads.clone())
        optimizer.step(rows.flip(0), grads.clone())  # twice: nothing left over from the first
        results.append((table, row_sum))
    (torch_table, torch_sum), (kernel_table, kernel_sum) = results
    untouched = torch.ones(50, dtype=torch.bool)
    untouched[adagrad_tables(0)[2]] = False
    original_table, original_sum, _, _ = adagrad_tables(0)
    assert torch.equal(kernel_table[untouched], original_table[untouched])
    assert not torch.equal(kernel_table, original_table)
    torch.testing.assert_close(kernel_table, torch_table, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kernel_sum, torch_sum, rtol=1e-5, atol=1e-6)


def test_row_adagrad_kernel_sums_a_repeated_row_before_its_one_update(needs_kernels) -> None:
    table, row_sum = torch.zeros(2, 4), torch.zeros(2)
    grads = torch.tensor([[1.0, 1, 1, 1], [1.0, 1, 1, 1]])
    kernels.row_adagrad(table, row_sum, torch.tensor([1, 1]), grads, 0.5, EPSILON)
    # One update with the summed gradient 2: sum = mean(2^2) = 4, step = 0.5 * 2 / sqrt(4).
    assert row_sum.tolist() == [0.0, 4.0]
    torch.testing.assert_close(table[1], torch.full((4,), -0.5))
    assert table[0].abs().sum() == 0


def test_row_adagrad_kernel_finds_the_repeats_of_a_large_batch_of_a_large_table(
        needs_kernels, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of rows, among 2^20 table rows, many repeated and many equal modulo powers
    of two (which crowd the kernel's table of distinct rows): the torch step's result."""
    generator = torch.Generator().manual_seed(5)
    rows = torch.cat([torch.randint(2**20, (3000,), generator=generator),
                      torch.arange(0, 2**20, 2**12),
                      torch.randint(40, (1000,), generator=generator)])
    rows = rows[torch.randperm(len(rows), generator=generator)]
    grads = torch.randn(len(rows), 3, generator=generator)
    results = []
    for available in (False, True):
        monkeypatch.setattr(kernels, "AVAILABLE", available)
        table, row_sum = torch.ones(2**20, 3), torch.zeros(2**20)
        RowAdagrad(table, lr=0.3, row_sum=row_sum).step(rows, grads.clone())
        results.append((table, row_sum))
    (torch_table, torch_sum), (kernel_table, kernel_sum) = results
    assert int((kernel_sum > 0).sum()) == len(rows.unique())
    torch.testing.assert_close(kernel_table, torch_table, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kernel_sum, torch_sum, rtol=1e-5, atol=1e-6)


def torch_ranking(margin: float, weight: float, num_edges: int, pos_scores: torch.Tensor,
                  pos_keys: torch.Tensor, scores: torch.Tensor, keys: torch.Tensor
                  ) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The loss, positive and negative score gradients by `RankingLoss`'s torch code."""
    chunks, size, width = scores.shape
    masked = mask_negatives(scores, pos_keys, keys).flatten(0, 1)[:num_edges]
    loss, pos_grad, neg_grad = RankingLoss(margin).value_and_gradients(
        pos_scores.flatten()[:num_edges], masked)
    padded = torch.zeros(chunks * size, width)
    padded[:num_edges] = neg_grad * weight
    pos_padded = torch.zeros(chunks * size)
    pos_padded[:num_edges] = pos_grad * weight
    return float(loss) * weight, pos_padded.view(chunks, size), padded.view(scores.shape)


@pytest.mark.parametrize("layout", ["negatives", "positives", "neither"])
def test_ranking_loss_kernel_equals_the_torch_loss_in_each_memory_layout(
        needs_kernels, layout: str) -> None:
    # The kernel walks a block along whichever axis is contiguous: along the negatives, along
    # the positives (a transposed block, as the threaded shared setup passes it) or by strides.
    generator = torch.Generator().manual_seed(4)
    chunks, size, widths, num_edges = 3, 7, (5, 4), 19  # the last chunk's last 2 are padding
    pos_scores = torch.randn(chunks, size, generator=generator)
    pos_keys = torch.randint(8, (chunks, size), generator=generator)
    keys = torch.randint(-1, 8, (chunks, sum(widths)), generator=generator)  # -1: padding
    scores = torch.randn(chunks, size, sum(widths), generator=generator)
    blocks = []
    for block_scores, block_keys in zip(scores.split(widths, dim=2), keys.split(widths, dim=1)):
        if layout == "positives":
            block_scores = block_scores.transpose(1, 2).contiguous().transpose(1, 2)
        elif layout == "neither":
            block_scores = torch.zeros(chunks, size, 2 * block_scores.shape[2])[:, :, ::2]
            block_scores.copy_(scores.split(widths, dim=2)[len(blocks)])
        else:
            block_scores = block_scores.contiguous()
        blocks.append((block_scores, torch.full_like(block_scores, 9.0), block_keys))
    pos_grad = torch.zeros(chunks, size)
    loss = kernels.ranking_loss(0.5, 2.0, num_edges, pos_scores, pos_keys, blocks, pos_grad)
    expected_loss, expected_pos_grad, expected_grad = torch_ranking(
        0.5, 2.0, num_edges, pos_scores, pos_keys, scores, keys)
    assert expected_loss > 0 and loss == pytest.approx(expected_loss, rel=1e-5)
    torch.testing.assert_close(pos_grad, expected_pos_grad)
    torch.testing.assert_close(torch.cat([grads for _, grads, _ in blocks], dim=2),
                               expected_grad)


def test_kernels_refuse_tensors_they_cannot_read(needs_kernels) -> None:
    table, row_sum = torch.zeros(5, 3), torch.zeros(5)
    for bad in (5, -1):  # checked before anything is written
        with pytest.raises(IndexError, match=f"row id {bad} outside the table's 5 rows"):
            kernels.row_adagrad(table, row_sum, torch.tensor([0, bad]), torch.ones(2, 3), 0.1,
                                EPSILON)
        assert table.abs().sum() == 0 and row_sum.abs().sum() == 0
    with pytest.raises(ValueError, match="grads: expected a 2-D torch.float32"):
        kernels.row_adagrad(table, row_sum, torch.tensor([1]), torch.ones(1, 3).double(), 0.1,
                            EPSILON)
    scores = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="negative block"):
        kernels.ranking_loss(0.1, 1.0, 6, torch.zeros(2, 3), torch.zeros(2, 3).long(),
                             [(scores, scores, torch.zeros(2, 5).long())], torch.zeros(2, 3))


def test_the_extension_refuses_a_structure_of_another_size(needs_kernels) -> None:
    # What a Python mirror out of step with _kernels.c would pass: refused before any read.
    compiled = kernels._kernels
    with pytest.raises(TypeError, match="block: expected a structure of 96 bytes, got 32"):
        compiled.ranking_loss(0.1, 1.0, kernels.Positives(), kernels.Batch())
    with pytest.raises(TypeError, match="one or two blocks"):
        compiled.ranking_loss(0.1, 1.0, kernels.Positives())


def test_ranking_chunks_refuses_sides_that_do_not_make_the_batch(needs_kernels) -> None:
    if not kernels.CHUNKED:
        pytest.skip("torch's CPU library exports no BLAS sgemm_ here")
    lhs, rhs = torch.zeros(2, 5, 4), torch.zeros(2, 5, 4)  # 2 chunks of 3 edges + 2 extras
    keys, sums = torch.arange(10).view(2, 5), torch.full((2, 4), 7.0)

    def ranking(num_edges: int, rhs: torch.Tensor = rhs, lhs_keys: torch.Tensor = keys,
                weight: float = 1.0) -> float:
        return kernels.ranking_chunks(0.1, weight, num_edges, lhs, rhs, lhs.clone(),
                                      rhs.clone(), lhs_keys, keys, 3, sums)

    with pytest.raises(ValueError, match="do not make 7 edges in chunks of 3"):
        ranking(7)
    with pytest.raises(ValueError, match="do not make 6 edges"):  # one side's dimension
        ranking(6, rhs=torch.zeros(2, 5, 3))
    with pytest.raises(ValueError, match="contiguous"):
        ranking(6, lhs_keys=keys.t().contiguous().t())
    with pytest.raises(ValueError, match="entity key 4294967296 does not fit in 32 bits"):
        ranking(6, lhs_keys=keys + 2**32)
    assert bool((sums == 7.0).all())  # nothing written before the checks pass
    # All scores 0: every unmasked negative violates the margin by 0.1 (its own key masked).
    assert ranking(6, weight=2.0) == pytest.approx(2.0 * 0.1 * 6 * (4 + 4))
    assert bool((sums == 0).all())  # zero embeddings: zero gradients


def test_gather_copies_the_rows_named_in_order_repeats_included(needs_kernels) -> None:
    table = torch.randn(1000, 37)  # rows of 37 floats: not a whole number of cache lines
    rows = torch.cat([torch.randint(1000, (500,)), torch.tensor([7, 7, 999, 0])])
    assert torch.equal(kernels.gather(table, rows), table.index_select(0, rows))
    assert kernels.gather(table, rows[:0]).shape == (0, 37)
    with pytest.raises(IndexError, match="row id 1000 outside the table's 1000 rows"):
        kernels.gather(table, torch.tensor([1, 1000]))
    with pytest.raises(ValueError, match="rows: expected a 1-D torch.int64"):
        kernels.gather(table, torch.tensor([1, 2], dtype=torch.int32))
