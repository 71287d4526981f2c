"""Ranks, AUC and the running metrics: hand-computed cases, planted ranks, chance level, merging."""

from __future__ import annotations

import math

import pytest
import torch

from tessera.evaluation import RankingMetrics, auc_per_row, ranks

INF = math.inf

# Row 0: one negative above, one tie, one below, one masked.
# Row 1: two ties, one below, one masked.
# Row 2: every negative masked.
POS = torch.tensor([1.0, 0.5, 2.0])
NEG = torch.tensor([[0.0, 2.0, -INF, 1.0],
                    [0.5, 0.5, 0.1, -INF],
                    [-INF, -INF, -INF, -INF]])


def test_ranks_count_ties_against_the_positive_and_ignore_masked_negatives():
    assert ranks(POS, NEG).tolist() == [3, 3, 1]
    assert ranks(POS, NEG).dtype == torch.long


def test_auc_counts_ties_as_half_and_is_nan_without_valid_negatives():
    aucs = auc_per_row(POS, NEG)
    assert aucs.dtype == torch.float64
    assert aucs[:2].tolist() == pytest.approx([1.5 / 3, 2.0 / 3])
    assert math.isnan(aucs[2])


def test_summary_of_the_hand_computed_example():
    metrics = RankingMetrics()
    metrics.add(POS, NEG)
    summary = metrics.summary()
    assert summary["count"] == 3
    assert summary["mrr"] == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)
    assert summary["hits@1"] == pytest.approx(1 / 3)
    assert summary["hits@10"] == 1.0
    assert summary["hits@50"] == 1.0
    assert summary["mean_rank"] == pytest.approx(7 / 3)
    # The fully masked row has no AUC and does not drag the mean towards 0 or 1.
    assert summary["auc"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert "loss" not in summary


def test_perfect_scorer_ranks_every_positive_first():
    generator = torch.Generator().manual_seed(0)
    neg = torch.rand(20, 30, generator=generator)
    metrics = RankingMetrics()
    metrics.add(torch.full((20,), 2.0), neg)
    summary = metrics.summary()
    assert summary["mrr"] == 1.0
    assert summary["hits@1"] == 1.0
    assert summary["mean_rank"] == 1.0
    assert summary["auc"] == 1.0


def test_planted_ranks_give_the_harmonic_mrr():
    # Negatives 0..M-1; positive i sits just below i of them, so its rank is i + 1, and a
    # last positive below all of them ranks M + 1: the scorer covers every rank once.
    num_negatives = 60
    pos = torch.arange(num_negatives, -1, -1, dtype=torch.float32) - 0.5
    neg = torch.arange(num_negatives, dtype=torch.float32).expand(len(pos), -1)
    assert ranks(pos, neg).tolist() == list(range(1, num_negatives + 2))
    metrics = RankingMetrics()
    metrics.add(pos, neg)
    summary = metrics.summary()
    num_rows = num_negatives + 1
    assert summary["mrr"] == pytest.approx(sum(1 / r for r in range(1, num_rows + 1)) / num_rows)
    assert summary["hits@10"] == pytest.approx(10 / num_rows)
    assert summary["hits@50"] == pytest.approx(50 / num_rows)
    assert summary["mean_rank"] == pytest.approx((num_rows + 1) / 2)
    # Positive i beats M - i of the M negatives: on average exactly one half.
    assert summary["auc"] == pytest.approx(0.5)


def test_reversed_scorer_ranks_last_with_zero_auc():
    pos = torch.zeros(5)
    neg = torch.ones(5, 9)
    metrics = RankingMetrics()
    metrics.add(pos, neg)
    assert metrics.summary()["mrr"] == pytest.approx(1 / 10)
    assert metrics.summary()["auc"] == 0.0


def test_constant_scorer_ranks_last_with_auc_one_half():
    metrics = RankingMetrics()
    metrics.add(torch.zeros(4), torch.zeros(4, 7))
    assert metrics.summary()["mean_rank"] == 8.0
    assert metrics.summary()["auc"] == 0.5


def test_random_scores_give_chance_level_auc_and_mrr():
    generator = torch.Generator().manual_seed(1)
    num_rows, num_negatives = 4000, 19
    metrics = RankingMetrics()
    for _ in range(2):  # two batches, as a caller would feed them
        metrics.add(torch.randn(num_rows, generator=generator),
                    torch.randn(num_rows, num_negatives, generator=generator))
    summary = metrics.summary()
    assert summary["count"] == 2 * num_rows
    assert summary["auc"] == pytest.approx(0.5, abs=0.01)
    # A random positive's rank is uniform on 1..M+1.
    harmonic = sum(1 / r for r in range(1, num_negatives + 2)) / (num_negatives + 1)
    assert summary["mrr"] == pytest.approx(harmonic, abs=0.01)
    assert summary["mean_rank"] == pytest.approx((num_negatives + 2) / 2, abs=0.25)


def test_merge_equals_one_accumulator_fed_everything():
    generator = torch.Generator().manual_seed(2)
    pos = torch.randn(100, generator=generator)
    neg = torch.randn(100, 12, generator=generator)
    neg[neg > 1.5] = -INF
    neg[7] = -INF
    whole, first, second = RankingMetrics(), RankingMetrics(), RankingMetrics()
    whole.add(pos, neg)
    whole.add_loss(10.0, 100)
    first.add(pos[:30], neg[:30])
    first.add_loss(4.0, 30)
    second.add(pos[30:], neg[30:])
    second.add_loss(6.0, 70)
    first.merge(second)
    assert first.count == whole.count == 100
    assert first.rank_sum == whole.rank_sum
    assert first.hits == whole.hits
    assert first.auc_count == whole.auc_count == 99
    for key, value in whole.summary(standard_error=True).items():
        assert first.summary(standard_error=True)[key] == pytest.approx(value, rel=1e-12)
    assert whole.summary()["loss"] == pytest.approx(0.1)


def test_the_mrr_standard_error_is_the_sample_sd_of_reciprocal_ranks_over_root_n():
    metrics = RankingMetrics()
    metrics.add(POS, NEG)  # reciprocal ranks 1/3, 1/3, 1
    mean = (1 / 3 + 1 / 3 + 1) / 3
    variance = (2 * (1 / 3 - mean) ** 2 + (1 - mean) ** 2) / 2
    assert metrics.summary(standard_error=True)["mrr_stderr"] == \
        pytest.approx(math.sqrt(variance / 3))
    assert "mrr_stderr" not in metrics.summary()  # training's held-out stats keep their keys
    perfect = RankingMetrics()
    perfect.add(torch.full((5,), 2.0), torch.zeros(5, 4))
    assert perfect.mrr_standard_error() == 0.0  # every row alike: nothing to vary
    one_row = RankingMetrics()
    one_row.add(POS[:1], NEG[:1])
    assert math.isnan(one_row.mrr_standard_error())


def test_both_sides_are_averaged_as_separate_rows():
    together = RankingMetrics()
    lhs_pos, lhs_neg = torch.tensor([1.0]), torch.tensor([[0.0, 0.0]])  # rank 1
    rhs_pos, rhs_neg = torch.tensor([0.0]), torch.tensor([[1.0, 0.5]])  # rank 3
    together.add(lhs_pos, lhs_neg)
    together.add(rhs_pos, rhs_neg)
    assert together.summary()["count"] == 2
    assert together.summary()["mrr"] == pytest.approx((1 + 1 / 3) / 2)


def test_empty_accumulator_reports_nan_averages():
    summary = RankingMetrics().summary()
    assert summary["count"] == 0
    assert math.isnan(summary["mrr"]) and math.isnan(summary["auc"])


def test_mismatched_shapes_are_rejected():
    with pytest.raises(ValueError, match=r"\[N\]"):
        ranks(torch.zeros(3), torch.zeros(4, 2))
    with pytest.raises(ValueError):
        RankingMetrics().add(torch.zeros(3, 1), torch.zeros(3, 2))
