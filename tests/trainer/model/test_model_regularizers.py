"""N3 regularizer: known values, per-edge parameter counting, complex moduli, finite gradients."""

from __future__ import annotations

import typing

import pytest
import torch

from tessera.config.schema import RegularizerName
from tessera.errors import ConfigError
from tessera.model.operators import DYNAMIC_OPERATORS, OPERATORS
from tessera.model.regularizers import REGULARIZERS, N3Regularizer, make_regularizer


def test_registry_holds_exactly_the_config_regularizers() -> None:
    assert set(REGULARIZERS) == set(typing.get_args(RegularizerName))


def test_a_zero_coefficient_means_no_regularizer(make_config) -> None:
    assert make_regularizer(make_config()) is None
    regularizer = make_regularizer(make_config(regularization_coef=0.5))
    assert isinstance(regularizer, N3Regularizer) and regularizer.weight == 0.5


def test_known_value_counts_parameters_once_per_edge() -> None:
    operator = OPERATORS["diagonal"](2)
    with torch.no_grad():
        operator.diagonal.copy_(torch.tensor([1.0, -2.0]))
    regularizer = N3Regularizer(0.5)
    # Embeddings: |1|^3 + |-1|^3 + |2|^3 + 0 = 10; parameters: 1 + 8 = 9 for the one edge.
    one = regularizer(torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, 0.0]]), operator)
    assert one.item() == pytest.approx(0.5 * 19)
    two = regularizer(torch.tensor([[1.0, -1.0], [0.0, 0.0]]),
                      torch.tensor([[2.0, 0.0], [0.0, 0.0]]), operator)
    assert two.item() == pytest.approx(0.5 * 28)


def test_complex_coordinates_are_penalised_by_modulus_with_finite_gradients() -> None:
    operator = OPERATORS["complex_diagonal"](2)  # real 1, imag 0: modulus 1
    lhs = torch.tensor([[3.0, 4.0]], requires_grad=True)  # 3 + 4i, modulus 5
    rhs = torch.zeros(1, 2, requires_grad=True)  # modulus 0, where sqrt has no slope
    penalty = N3Regularizer(1.0)(lhs, rhs, operator)
    assert penalty.item() == pytest.approx(125 + 0 + 1)
    penalty.backward()
    assert torch.isfinite(rhs.grad).all() and torch.isfinite(lhs.grad).all()
    assert operator.real.grad is not None and operator.real.grad.item() == pytest.approx(3.0)


def test_dynamic_penalty_uses_each_edges_relation_parameters() -> None:
    operator = DYNAMIC_OPERATORS["translation"](1, 3)
    with torch.no_grad():
        operator.translations.copy_(torch.tensor([[1.0], [2.0], [-3.0]]))
    zeros = torch.zeros(3, 1)
    penalty = N3Regularizer(1.0).dynamic(zeros, zeros, operator, torch.tensor([1, 2, 2]))
    assert penalty.item() == pytest.approx(8 + 27 + 27)


@pytest.mark.parametrize("operator", ["linear", "affine"])
def test_operators_without_a_regularizer_term_are_rejected_at_start(make_config,
                                                                   operator: str) -> None:
    relations = [{"name": "r", "lhs": "node", "rhs": "node", "operator": operator}]
    make_config(relations=relations)
    with pytest.raises(ConfigError, match="regularization_coef"):
        make_config(relations=relations, regularization_coef=0.1)
