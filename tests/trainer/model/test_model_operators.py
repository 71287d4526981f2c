"""Relation operators: PBG's names, shapes and initial values, known results, gradients."""

from __future__ import annotations

import math
import typing

import pytest
import torch

from tessera.config.schema import COMPLEX_OPERATORS, OperatorName
from tessera.model.operators import DYNAMIC_OPERATORS, OPERATORS

NAMES = sorted(OPERATORS)

# PBG's parameter names and shapes for dimension 4 (and 3 operations when dynamic): they are
# the keys of the model file, so they must never change.
PLAIN_PARAMETERS = {
    "none": {},
    "translation": {"translation": (4,)},
    "diagonal": {"diagonal": (4,)},
    "linear": {"linear_transformation": (4, 4)},
    "affine": {"linear_transformation": (4, 4), "translation": (4,)},
    "complex_diagonal": {"real": (2,), "imag": (2,)},
    "rotate": {"phase": (2,)},  # Tessera's own (PBG has no rotate)
}
DYNAMIC_PARAMETERS = {
    "none": {},
    "translation": {"translations": (3, 4)},
    "diagonal": {"diagonals": (3, 4)},
    "linear": {"linear_transformations": (3, 4, 4)},
    "affine": {"linear_transformations": (3, 4, 4), "translations": (3, 4)},
    "complex_diagonal": {"real": (3, 2), "imag": (3, 2)},
    "rotate": {"phases": (3, 2)},
}
# Dynamic parameter -> the plain parameter it holds one row of per operation.
PLAIN_OF_DYNAMIC = {"translations": "translation", "diagonals": "diagonal",
                    "linear_transformations": "linear_transformation", "real": "real",
                    "imag": "imag", "phases": "phase"}

# Hand-computed: x = [1, 2] (for complex_diagonal, the complex number 1 + 2i).
KNOWN = {
    "none": ({}, [1.0, 2.0]),
    "translation": ({"translation": [0.5, -1.0]}, [1.5, 1.0]),
    "diagonal": ({"diagonal": [2.0, 3.0]}, [2.0, 6.0]),
    "linear": ({"linear_transformation": [[1.0, 2.0], [3.0, 4.0]]}, [5.0, 11.0]),
    "affine": ({"linear_transformation": [[1.0, 2.0], [3.0, 4.0]], "translation": [1.0, 1.0]},
               [6.0, 12.0]),
    # (1 + 2i)(2 + i) = 0 + 5i
    "complex_diagonal": ({"real": [2.0], "imag": [1.0]}, [0.0, 5.0]),
    # (1 + 2i) exp(i pi/2) = (1 + 2i) i = -2 + i
    "rotate": ({"phase": [math.pi / 2]}, [-2.0, 1.0]),
}


def set_parameters(module: torch.nn.Module, values: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, value in values.items():
            getattr(module, name).copy_(value)


def test_registries_hold_exactly_the_config_operators() -> None:
    assert set(OPERATORS) == set(typing.get_args(OperatorName))
    assert set(DYNAMIC_OPERATORS) == set(typing.get_args(OperatorName))
    assert set(KNOWN) == set(OPERATORS)


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_named_and_shaped_as_in_pbg(name: str) -> None:
    plain = {k: tuple(v.shape) for k, v in OPERATORS[name](4).named_parameters()}
    dynamic = {k: tuple(v.shape) for k, v in DYNAMIC_OPERATORS[name](4, 3).named_parameters()}
    assert plain == PLAIN_PARAMETERS[name]
    assert dynamic == DYNAMIC_PARAMETERS[name]


@pytest.mark.parametrize("name", NAMES)
def test_operators_start_as_the_identity(name: str) -> None:
    embs = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(OPERATORS[name](4)(embs), embs)
    assert torch.allclose(DYNAMIC_OPERATORS[name](4, 3)(embs, torch.tensor([0, 1, 2, 1, 0])),
                          embs)


@pytest.mark.parametrize("name", NAMES)
def test_known_value(name: str) -> None:
    params, expected = KNOWN[name]
    operator = OPERATORS[name](2)
    set_parameters(operator, {k: torch.tensor(v) for k, v in params.items()})
    result = operator(torch.tensor([[1.0, 2.0]]))
    assert result[0].tolist() == pytest.approx(expected, abs=1e-6)  # cos(pi / 2) is not 0


@pytest.mark.parametrize("name", NAMES)
def test_dynamic_operator_applies_each_embeddings_own_relation(name: str) -> None:
    generator = torch.Generator().manual_seed(1)
    dynamic = DYNAMIC_OPERATORS[name](4, 3)
    set_parameters(dynamic, {k: torch.randn(p.shape, generator=generator)
                             for k, p in dynamic.named_parameters()})
    embs = torch.randn(6, 4, generator=generator)
    idxs = torch.tensor([2, 0, 1, 1, 2, 0])
    result = dynamic(embs, idxs)
    for i, relation in enumerate(idxs.tolist()):
        plain = OPERATORS[name](4)
        set_parameters(plain, {PLAIN_OF_DYNAMIC[k]: p[relation]
                               for k, p in dynamic.named_parameters()})
        assert torch.allclose(result[i], plain(embs[i:i + 1])[0], atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_plain_operators_accept_any_leading_dimensions(name: str) -> None:
    # Uniform negatives arrive as [chunks, draws, dim].
    operator = OPERATORS[name](4)
    embs = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(2))
    assert operator(embs).shape == (2, 3, 4)
    assert torch.allclose(operator(embs)[1], operator(embs[1]))


@pytest.mark.parametrize("name", [n for n in NAMES if PLAIN_PARAMETERS[n]])
@pytest.mark.parametrize("dynamic", [False, True])
def test_gradients_reach_every_parameter(name: str, dynamic: bool) -> None:
    generator = torch.Generator().manual_seed(3)
    embs = torch.randn(5, 4, generator=generator, requires_grad=True)
    target = torch.randn(5, 4, generator=generator)
    if dynamic:
        operator = DYNAMIC_OPERATORS[name](4, 3)
        out = operator(embs, torch.tensor([0, 1, 2, 0, 1]))
    else:
        operator = OPERATORS[name](4)
        out = operator(embs)
    (out * target).sum().backward()
    assert embs.grad is not None and embs.grad.abs().sum() > 0
    for param_name, param in operator.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), param_name
        assert param.grad.abs().sum() > 0, param_name


@pytest.mark.parametrize("name", NAMES)
def test_the_complex_operators_of_the_config_rules_need_an_even_dimension(name: str) -> None:
    """The config refuses an odd dimension for exactly the operators that cannot take one."""
    if name not in COMPLEX_OPERATORS:
        OPERATORS[name](5)
        DYNAMIC_OPERATORS[name](5, 2)
        return
    with pytest.raises(ValueError, match="even dimension"):
        OPERATORS[name](5)
    with pytest.raises(ValueError, match="even dimension"):
        DYNAMIC_OPERATORS[name](5, 2)


def test_regularizer_magnitudes_of_complex_coordinates_are_moduli() -> None:
    operator = OPERATORS["complex_diagonal"](2)
    set_parameters(operator, {"real": torch.tensor([3.0]), "imag": torch.tensor([-4.0])})
    assert operator.parameter_magnitudes().tolist() == [5.0]
    assert operator.embedding_magnitudes(torch.tensor([[6.0, 8.0]])).tolist() == [[10.0]]
    assert OPERATORS["diagonal"](2).embedding_magnitudes(torch.tensor([[-1.0, 2.0]])).tolist() \
        == [[1.0, 2.0]]


@pytest.mark.parametrize("name", NAMES)
def test_vjp_equals_autograd(name: str) -> None:
    generator = torch.Generator().manual_seed(4)
    operator = OPERATORS[name](4)
    set_parameters(operator, {k: torch.randn(p.shape, generator=generator)
                              for k, p in operator.named_parameters()})
    embs = torch.randn(2, 3, 4, generator=generator, requires_grad=True)
    upstream = torch.randn(2, 3, 4, generator=generator)
    (operator(embs) * upstream).sum().backward()
    expected = {k: p.grad.clone() for k, p in operator.named_parameters()}
    operator.zero_grad(set_to_none=True)
    with torch.no_grad():
        grad = operator.vjp(embs.detach(), upstream)
    torch.testing.assert_close(grad, embs.grad)
    for param_name, param in operator.named_parameters():
        torch.testing.assert_close(param.grad, expected[param_name], msg=param_name)
    # A second call adds to the parameters' gradients, as a second backward() would.
    with torch.no_grad():
        operator.vjp(embs.detach(), upstream)
    for param_name, param in operator.named_parameters():
        torch.testing.assert_close(param.grad, 2 * expected[param_name], msg=param_name)


def complex_rotation(embs: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """The reference: embeddings as torch complex numbers (first half real, second half
    imaginary) times exp(i phase), back to halves."""
    half = embs.shape[-1] // 2
    rotated = torch.complex(embs[..., :half], embs[..., half:]) * torch.polar(
        torch.ones_like(phase), phase)
    return torch.cat([rotated.real, rotated.imag], dim=-1)


def test_rotate_equals_complex_multiplication_by_a_unit_number_and_its_gradients() -> None:
    generator = torch.Generator().manual_seed(5)
    operator = OPERATORS["rotate"](6)
    set_parameters(operator, {"phase": 4 * torch.rand(3, generator=generator) - 2})
    embs = torch.randn(2, 4, 6, generator=generator, requires_grad=True)
    upstream = torch.randn(2, 4, 6, generator=generator)
    phase = operator.phase.detach().clone().requires_grad_()
    expected = complex_rotation(embs, phase)
    (expected * upstream).sum().backward()
    result = operator(embs.detach())
    torch.testing.assert_close(result, expected.detach())
    # Unit modulus: every complex coordinate keeps its length.
    torch.testing.assert_close(torch.complex(result[..., :3], result[..., 3:]).abs(),
                               torch.complex(embs[..., :3], embs[..., 3:]).abs().detach())
    with torch.no_grad():
        grad = operator.vjp(embs.detach(), upstream)
    torch.testing.assert_close(grad, embs.grad)
    torch.testing.assert_close(operator.phase.grad, phase.grad)


def test_dynamic_rotate_equals_the_reference_and_its_gradients() -> None:
    generator = torch.Generator().manual_seed(6)
    operator = DYNAMIC_OPERATORS["rotate"](4, 3)
    set_parameters(operator, {"phases": 4 * torch.rand(3, 2, generator=generator) - 2})
    embs = torch.randn(5, 4, generator=generator)
    idxs = torch.tensor([2, 0, 1, 2, 2])
    upstream = torch.randn(5, 4, generator=generator)
    phases = operator.phases.detach().clone().requires_grad_()
    expected = complex_rotation(embs, phases[idxs])
    (expected * upstream).sum().backward()
    result = operator(embs, idxs)
    (result * upstream).sum().backward()
    torch.testing.assert_close(result.detach(), expected.detach())
    torch.testing.assert_close(operator.phases.grad, phases.grad)


def test_rotate_regularizes_embedding_moduli_and_not_its_phases() -> None:
    operator = OPERATORS["rotate"](2)
    assert operator.parameter_magnitudes() is None
    assert DYNAMIC_OPERATORS["rotate"](2, 3).parameter_magnitudes(torch.tensor([0])) is None
    assert operator.embedding_magnitudes(torch.tensor([[6.0, 8.0]])).tolist() == [[10.0]]
