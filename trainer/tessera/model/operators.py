"""Relation operators: the learned transformation a relation applies to an embedding.

Parameter names, shapes and initial values are PyTorch-BigGraph's, because they are the keys
of the model file (`model/relations/{idx}/operator/{side}/{param}`): a checkpoint written by
either system must load into the other. Plain operators hold one set of parameters for one
relation; dynamic operators hold a leading `[num_operations]` dimension and pick each
embedding's parameters by its relation index, for batches that mix relation types.

Operators also say what the N3 regularizer penalises: the magnitude of each coordinate, where
a complex operator's coordinate is a (real, imaginary) pair. Plain operators also write out
their backward pass (`vjp`), which the training fast path (`closed_form`) uses instead of
autograd.
"""

from __future__ import annotations

import torch
from torch import nn


def check_even(name: str, dim: int) -> None:
    """The complex operators split an embedding into real and imaginary halves."""
    if dim % 2 != 0:
        raise ValueError(f"the {name} operator needs an even dimension (first half real, second "
                         f"half imaginary), got {dim}")


def complex_product(embs: torch.Tensor, real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    """(a + ib)(c + id) with the embeddings' first half as a, second half as b."""
    half = embs.shape[-1] // 2
    embs_real, embs_imag = embs[..., :half], embs[..., half:]
    return torch.cat([embs_real * real - embs_imag * imag,
                      embs_real * imag + embs_imag * real], dim=-1)


def complex_modulus(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    # Clamped so that the gradient stays finite at a zero coordinate.
    return (real * real + imag * imag).clamp_min(1e-30).sqrt()


def halves_modulus(embs: torch.Tensor) -> torch.Tensor:
    half = embs.shape[-1] // 2
    return complex_modulus(embs[..., :half], embs[..., half:])


def matrix_vector(matrices: torch.Tensor, embs: torch.Tensor) -> torch.Tensor:
    """A x for each row x; `matrices` is one [dim, dim] matrix or one per row."""
    return torch.matmul(matrices, embs.unsqueeze(-1)).squeeze(-1)


def accumulate_grad(param: nn.Parameter, grad: torch.Tensor) -> None:
    """Add `grad` to `param.grad`, creating it on first use, as autograd's backward does."""
    if param.grad is None:
        param.grad = grad
    else:
        param.grad += grad


def summed_over_rows(values: torch.Tensor) -> torch.Tensor:
    """[..., dim] -> [dim]: a shared parameter's gradient is the sum over every row using it."""
    return values.reshape(-1, values.shape[-1]).sum(0)


def outer_summed_over_rows(grad: torch.Tensor, embs: torch.Tensor) -> torch.Tensor:
    """sum_i grad_i embs_i^T, the gradient of a matrix applied to every row (one product)."""
    return grad.reshape(-1, grad.shape[-1]).T @ embs.reshape(-1, embs.shape[-1])


class Operator(nn.Module):
    """Transforms every embedding of one relation with the same parameters."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return embs

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """The gradient w.r.t. `embs` [..., dim] of sum(grad * forward(embs)); the parameters'
        gradients are added to their `.grad`, as `backward()` would."""
        return grad

    def parameter_magnitudes(self) -> torch.Tensor | None:
        """What N3 penalises in the parameters (None: nothing)."""
        return None

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        """What N3 penalises in an embedding this operator is applied to."""
        return embs.abs()


class IdentityOperator(Operator):
    """Leaves embeddings unchanged (`none`)."""


class TranslationOperator(Operator):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.translation = nn.Parameter(torch.zeros(dim))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return embs + self.translation

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        accumulate_grad(self.translation, summed_over_rows(grad))
        return grad

    def parameter_magnitudes(self) -> torch.Tensor:
        return self.translation.abs()


class DiagonalOperator(Operator):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.diagonal = nn.Parameter(torch.ones(dim))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return embs * self.diagonal

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        accumulate_grad(self.diagonal, summed_over_rows(grad * embs))
        return grad * self.diagonal

    def parameter_magnitudes(self) -> torch.Tensor:
        return self.diagonal.abs()


class LinearOperator(Operator):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.linear_transformation = nn.Parameter(torch.eye(dim))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return matrix_vector(self.linear_transformation, embs)

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        accumulate_grad(self.linear_transformation, outer_summed_over_rows(grad, embs))
        return grad @ self.linear_transformation


class AffineOperator(Operator):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.linear_transformation = nn.Parameter(torch.eye(dim))
        self.translation = nn.Parameter(torch.zeros(dim))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return matrix_vector(self.linear_transformation, embs) + self.translation

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        accumulate_grad(self.linear_transformation, outer_summed_over_rows(grad, embs))
        accumulate_grad(self.translation, summed_over_rows(grad))
        return grad @ self.linear_transformation


class ComplexDiagonalOperator(Operator):
    """Multiplies each complex coordinate by a learned complex number (ComplEx)."""

    def __init__(self, dim: int) -> None:
        check_even("complex_diagonal", dim)
        super().__init__(dim)
        self.real = nn.Parameter(torch.ones(dim // 2))
        self.imag = nn.Parameter(torch.zeros(dim // 2))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return complex_product(embs, self.real, self.imag)

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        # With x = a + ib, w = real + i imag and upstream g = g1 + i g2: d/dw is sum(g conj(x)),
        # d/dx is g conj(w).
        half = embs.shape[-1] // 2
        a, b, g1, g2 = embs[..., :half], embs[..., half:], grad[..., :half], grad[..., half:]
        accumulate_grad(self.real, summed_over_rows(g1 * a + g2 * b))
        accumulate_grad(self.imag, summed_over_rows(g2 * a - g1 * b))
        return complex_product(grad, self.real, -self.imag)

    def parameter_magnitudes(self) -> torch.Tensor:
        return complex_modulus(self.real, self.imag)

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        return halves_modulus(embs)


class RotateOperator(Operator):
    """Rotates each complex coordinate by a learned phase: multiplies it by exp(i phase), of
    modulus 1 (RotatE, Sun et al. 2019). With the `l2` comparator this is RotatE."""

    def __init__(self, dim: int) -> None:
        check_even("rotate", dim)
        super().__init__(dim)
        self.phase = nn.Parameter(torch.zeros(dim // 2))

    def forward(self, embs: torch.Tensor) -> torch.Tensor:
        return complex_product(embs, self.phase.cos(), self.phase.sin())

    def vjp(self, embs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        # A rotation's derivative by its angle is i times the rotated value y: d/dphase is
        # sum(Re(conj(g) i y)) = sum(g2 y1 - g1 y2); d/dx is g rotated back, g exp(-i phase).
        cos, sin = self.phase.cos(), self.phase.sin()
        rotated = complex_product(embs, cos, sin)
        half = embs.shape[-1] // 2
        accumulate_grad(self.phase, summed_over_rows(grad[..., half:] * rotated[..., :half]
                                                     - grad[..., :half] * rotated[..., half:]))
        return complex_product(grad, cos, -sin)

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        # The phases have no magnitude to penalise: every rotation has modulus 1.
        return halves_modulus(embs)


def rows_of(parameter: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
    """`parameter[operator_idxs]`, whose gradient is one index_add: indexing's own backward
    sorts the indices first (on a GPU, 31 against a few microseconds per call)."""
    rows = parameter.index_select(0, operator_idxs.reshape(-1))
    return rows.view(*operator_idxs.shape, *parameter.shape[1:])


class DynamicOperator(nn.Module):
    """Transforms each embedding with the parameters of its own relation type."""

    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__()
        self.dim = dim
        self.num_operations = num_operations

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return embs

    def parameter_magnitudes(self, operator_idxs: torch.Tensor) -> torch.Tensor | None:
        """What N3 penalises in the parameters used by each embedding (None: nothing)."""
        return None

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        return embs.abs()


class IdentityDynamicOperator(DynamicOperator):
    """Leaves embeddings unchanged (`none`)."""


class TranslationDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.translations = nn.Parameter(torch.zeros(num_operations, dim))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return embs + rows_of(self.translations, operator_idxs)

    def parameter_magnitudes(self, operator_idxs: torch.Tensor) -> torch.Tensor:
        return rows_of(self.translations, operator_idxs).abs()


class DiagonalDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.diagonals = nn.Parameter(torch.ones(num_operations, dim))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return embs * rows_of(self.diagonals, operator_idxs)

    def parameter_magnitudes(self, operator_idxs: torch.Tensor) -> torch.Tensor:
        return rows_of(self.diagonals, operator_idxs).abs()


class LinearDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.linear_transformations = nn.Parameter(torch.eye(dim).repeat(num_operations, 1, 1))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return matrix_vector(rows_of(self.linear_transformations, operator_idxs), embs)


class AffineDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.linear_transformations = nn.Parameter(torch.eye(dim).repeat(num_operations, 1, 1))
        self.translations = nn.Parameter(torch.zeros(num_operations, dim))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return (matrix_vector(rows_of(self.linear_transformations, operator_idxs), embs)
                + rows_of(self.translations, operator_idxs))


class ComplexDiagonalDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        check_even("complex_diagonal", dim)
        super().__init__(dim, num_operations)
        self.real = nn.Parameter(torch.ones(num_operations, dim // 2))
        self.imag = nn.Parameter(torch.zeros(num_operations, dim // 2))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        return complex_product(embs, rows_of(self.real, operator_idxs),
                               rows_of(self.imag, operator_idxs))

    def parameter_magnitudes(self, operator_idxs: torch.Tensor) -> torch.Tensor:
        return complex_modulus(rows_of(self.real, operator_idxs),
                               rows_of(self.imag, operator_idxs))

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        return halves_modulus(embs)


class RotateDynamicOperator(DynamicOperator):
    def __init__(self, dim: int, num_operations: int) -> None:
        check_even("rotate", dim)
        super().__init__(dim, num_operations)
        self.phases = nn.Parameter(torch.zeros(num_operations, dim // 2))

    def forward(self, embs: torch.Tensor, operator_idxs: torch.Tensor) -> torch.Tensor:
        phases = rows_of(self.phases, operator_idxs)
        return complex_product(embs, phases.cos(), phases.sin())

    def embedding_magnitudes(self, embs: torch.Tensor) -> torch.Tensor:
        return halves_modulus(embs)


OPERATORS: dict[str, type[Operator]] = {
    "none": IdentityOperator,
    "translation": TranslationOperator,
    "diagonal": DiagonalOperator,
    "linear": LinearOperator,
    "affine": AffineOperator,
    "complex_diagonal": ComplexDiagonalOperator,
    "rotate": RotateOperator,
}

DYNAMIC_OPERATORS: dict[str, type[DynamicOperator]] = {
    "none": IdentityDynamicOperator,
    "translation": TranslationDynamicOperator,
    "diagonal": DiagonalDynamicOperator,
    "linear": LinearDynamicOperator,
    "affine": AffineDynamicOperator,
    "complex_diagonal": ComplexDiagonalDynamicOperator,
    "rotate": RotateDynamicOperator,
}
