"""The compiled fast path of the training step (`_kernels.c`), behind checked Python calls.

The extension is built at install time when a C compiler is present. Without it, or with
`TESSERA_KERNELS=0` in the environment, `AVAILABLE` is False and the callers use their torch
code, which computes the same thing (the tests hold the two equal). `ranking_chunks` also
needs the BLAS matrix product torch is built with (`CHUNKED`). The kernels work on CPU
tensors only: the device trainer turns them off for its thread (`torch_only`), so that it
runs the torch code on whichever device it trains on, CPU included.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_kernels: Any  # the C extension, untyped
try:
    _kernels = importlib.import_module("._kernels", __package__)
except ImportError:  # built without a C compiler
    _kernels = None

AVAILABLE = _kernels is not None and os.environ.get("TESSERA_KERNELS", "1") != "0"

_switched_off = threading.local()


def active() -> bool:
    """Whether callers should use the kernels here and now: built, not turned off in the
    environment, and not turned off for this thread by `torch_only`."""
    return AVAILABLE and not getattr(_switched_off, "value", False)


@contextlib.contextmanager
def torch_only() -> Iterator[None]:
    """Within the block, this thread's callers use their torch code (device training)."""
    before = getattr(_switched_off, "value", False)
    _switched_off.value = True
    try:
        yield
    finally:
        _switched_off.value = before


def _torch_blas() -> tuple[int, int] | None:
    """The addresses of BLAS's `sgemm_` in torch's CPU library (MKL in torch's x86 builds)
    and of MKL's `MKL_Set_Num_Threads_Local` (0 where the BLAS is not MKL); None where the
    library exports no `sgemm_`."""
    for library in sorted((Path(torch.__file__).parent / "lib").glob("libtorch_cpu.*")):
        try:
            blas = ctypes.CDLL(str(library))
        except OSError:
            continue
        sgemm, set_threads = (getattr(blas, name, None)
                              for name in ("sgemm_", "MKL_Set_Num_Threads_Local"))
        if sgemm is not None:
            return _address(sgemm), (_address(set_threads) if set_threads else 0)
    return None


def _address(function: Any) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value or 0


_BLAS = _torch_blas() if _kernels is not None else None
if _BLAS is not None:
    _kernels.use_matrix_product(*_BLAS)
# Whether `ranking_chunks` can run (when AVAILABLE too).
CHUNKED = _BLAS is not None


def _expect(tensor: torch.Tensor, dtype: torch.dtype, dims: int, name: str) -> None:
    if tensor.dtype != dtype or tensor.dim() != dims or not tensor.is_cpu:
        raise ValueError(f"{name}: expected a {dims}-D {dtype} CPU tensor, got "
                         f"{tensor.dtype} {tuple(tensor.shape)} on {tensor.device}")


Pointer, Size = ctypes.c_void_p, ctypes.c_ssize_t  # addresses; counts and strides


class Block(ctypes.Structure):
    """`Block` in _kernels.c: a column block of one side's negatives for `ranking_loss`."""

    _fields_ = [("scores", Pointer), ("score_strides", Size * 3),  # [C, S, M]
                ("grads", Pointer), ("grad_strides", Size * 3),  # like the scores
                ("keys", Pointer), ("key_strides", Size * 2),  # [C, M]
                ("width", Size)]  # M


class Positives(ctypes.Structure):
    """`Positives` in _kernels.c: one side's positives for `ranking_loss`."""

    _fields_ = [("scores", Pointer), ("score_strides", Size * 2),  # [C, S]
                ("keys", Pointer), ("key_strides", Size * 2),  # [C, S]
                ("grads", Pointer),  # [C, S], contiguous
                ("chunks", Size), ("size", Size), ("edges", Size)]


class Batch(ctypes.Structure):
    """`Batch` in _kernels.c: the shape of a batch for `ranking_chunks`."""

    _fields_ = [("chunks", Size), ("size", Size), ("edges", Size), ("dim", Size)]


class Side(ctypes.Structure):
    """`Side` in _kernels.c: one side of a batch for `ranking_chunks`, all contiguous."""

    _fields_ = [("rows", Pointer), ("keys", Pointer), ("grads", Pointer),
                ("grad_sum", Pointer), ("extra", Size)]


Negatives = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # scores, gradients out, keys


def ranking_loss(margin: float, weight: float, num_edges: int, pos_scores: torch.Tensor,
                 pos_keys: torch.Tensor, blocks: Sequence[Negatives], pos_grad: torch.Tensor
                 ) -> float:
    """The ranking loss of one side's negatives, given as one or two column blocks of scores
    [C, S, M] (any strides) with the keys [C, M] naming their entities; writes each block's
    score gradients (times `weight`) to its gradient tensor, which may be the scores
    themselves, and adds d loss / d positive (times `weight`) to `pos_grad` [C, S].

    A negative whose key is the positive's or negative (padding) counts for nothing, and
    the rows of positives past `num_edges` (padding) get zero gradients."""
    _expect(pos_scores, torch.float32, 2, "pos_scores")
    chunks, size = pos_scores.shape
    _expect(pos_keys, torch.int64, 2, "pos_keys")
    _expect(pos_grad, torch.float32, 2, "pos_grad")
    if not pos_grad.is_contiguous() or pos_grad.shape != pos_scores.shape \
            or pos_keys.shape != pos_scores.shape:
        raise ValueError(f"positive scores {tuple(pos_scores.shape)}, keys "
                         f"{tuple(pos_keys.shape)} and gradients {tuple(pos_grad.shape)} "
                         "(contiguous) must have one shape")
    if not 1 <= len(blocks) <= 2:
        raise ValueError("ranking_loss takes one or two blocks of negatives")
    positives = Positives(scores=pos_scores.data_ptr(), score_strides=pos_scores.stride(),
                          keys=pos_keys.data_ptr(), key_strides=pos_keys.stride(),
                          grads=pos_grad.data_ptr(), chunks=chunks, size=size,
                          edges=num_edges)
    return _kernels.ranking_loss(float(margin), float(weight), positives,
                                 *(_block(*block, chunks, size) for block in blocks))


def _block(scores: torch.Tensor, grads: torch.Tensor, keys: torch.Tensor, chunks: int,
           size: int) -> Block:
    """The `Block` of negatives' scores [chunks, size, M] (checked)."""
    _expect(scores, torch.float32, 3, "scores")
    _expect(grads, torch.float32, 3, "score gradients")
    _expect(keys, torch.int64, 2, "negative keys")
    width = scores.shape[2]
    if scores.shape[:2] != (chunks, size) or grads.shape != scores.shape \
            or keys.shape != (chunks, width):
        raise ValueError(f"negative block of scores {tuple(scores.shape)}, gradients "
                         f"{tuple(grads.shape)}, keys {tuple(keys.shape)} for {chunks} "
                         f"chunks of {size}")
    return Block(scores=scores.data_ptr(), score_strides=scores.stride(),
                 grads=grads.data_ptr(), grad_strides=grads.stride(), keys=keys.data_ptr(),
                 key_strides=keys.stride(), width=width)


def ranking_chunks(  # noqa: PLR0913 (the C entry point's operands; bench/ calls it so)
        margin: float, weight: float, num_edges: int, lhs: torch.Tensor, rhs: torch.Tensor,
        lhs_grad: torch.Tensor, rhs_grad: torch.Tensor, lhs_keys: torch.Tensor,
        rhs_keys: torch.Tensor, num_pos: int, grad_sums: torch.Tensor) -> float:
    """The ranking loss of a batch whose two sides both use batch negatives, and its
    gradients w.r.t. both sides' prepared embeddings, one chunk at a time so that a chunk's
    scores and gradients stay in cache from the first matrix product to the last.

    Each side is [C, S + X, d] (contiguous): a chunk's S positives, then its X extra
    negatives; keys [C, S + X] name them (negative: padding). Returns the loss times
    `weight`; writes `lhs_grad`/`rhs_grad` (shaped like the sides) and the sums of their
    rows to `grad_sums` [2, d] (what a shared shift's gradient needs, free while the rows
    are in cache). Same result as `closed_form.score_gradients` with a `RankingLoss`."""
    for tensor, dtype, name in ((lhs, torch.float32, "lhs"), (rhs, torch.float32, "rhs"),
                                (lhs_grad, torch.float32, "lhs_grad"),
                                (rhs_grad, torch.float32, "rhs_grad")):
        _expect(tensor, dtype, 3, name)
    _expect(lhs_keys, torch.int64, 2, "lhs_keys")
    _expect(rhs_keys, torch.int64, 2, "rhs_keys")
    _expect(grad_sums, torch.float32, 2, "grad_sums")
    chunks, lhs_width, dim = lhs.shape
    rhs_width = rhs.shape[1]
    if not (lhs_grad.shape == lhs.shape and rhs_grad.shape == rhs.shape
            and rhs.shape[::2] == (chunks, dim) and lhs_keys.shape == lhs.shape[:2]
            and rhs_keys.shape == rhs.shape[:2] and num_pos <= min(lhs_width, rhs_width)
            and num_edges <= chunks * num_pos and grad_sums.shape == (2, dim)):
        raise ValueError(f"sides {tuple(lhs.shape)} and {tuple(rhs.shape)}, gradients "
                         f"{tuple(lhs_grad.shape)} and {tuple(rhs_grad.shape)}, keys "
                         f"{tuple(lhs_keys.shape)} and {tuple(rhs_keys.shape)}, sums "
                         f"{tuple(grad_sums.shape)} do not make {num_edges} edges in chunks "
                         f"of {num_pos}")
    tensors = (lhs, rhs, lhs_grad, rhs_grad, lhs_keys, rhs_keys, grad_sums)
    if not all(tensor.is_contiguous() for tensor in tensors):
        raise ValueError("ranking_chunks needs contiguous tensors")
    batch = Batch(chunks=chunks, size=num_pos, edges=num_edges, dim=dim)
    lhs_side = Side(rows=lhs.data_ptr(), keys=lhs_keys.data_ptr(), grads=lhs_grad.data_ptr(),
                    grad_sum=grad_sums[0].data_ptr(), extra=lhs_width - num_pos)
    rhs_side = Side(rows=rhs.data_ptr(), keys=rhs_keys.data_ptr(), grads=rhs_grad.data_ptr(),
                    grad_sum=grad_sums[1].data_ptr(), extra=rhs_width - num_pos)
    return _kernels.ranking_chunks(float(margin), float(weight), batch, lhs_side, rhs_side)


class Table(ctypes.Structure):
    """`Table` in _kernels.c: an embedding table with its row-wise Adagrad state."""

    _fields_ = [("rows", Pointer), ("row_sum", Pointer), ("count", Size)]


class Shift(ctypes.Structure):
    """`Shift` in _kernels.c: a vector added to a side's rows, with its Adagrad state."""

    _fields_ = [("value", Pointer), ("sum", Pointer), ("step", Pointer)]


MAX_SHIFTS, SIDE_SHIFTS = 3, 2  # as in _kernels.c


class LoopSide(ctypes.Structure):
    """`LoopSide` in _kernels.c: one side of the edges `train_ranking` trains on."""

    _fields_ = [("ids", Pointer), ("negatives", Pointer), ("num_negatives", Size),
                ("table", Table), ("shifts", Size * SIDE_SHIFTS)]


class Loop(ctypes.Structure):
    """`Loop` in _kernels.c: the settings of `train_ranking`."""

    _fields_ = [("edges", Size), ("batch_size", Size), ("chunk_size", Size),
                ("uniform", Size), ("dim", Size), ("num_shifts", Size),
                ("margin", ctypes.c_double), ("weight", ctypes.c_double),
                ("lr", ctypes.c_double), ("shift_lr", ctypes.c_double),
                ("eps", ctypes.c_double), ("shift", Shift * MAX_SHIFTS)]


@dataclass(frozen=True)
class RankingTable:
    """An embedding table [rows, dim] and its Adagrad state for `train_ranking`: one
    accumulator per row."""

    rows: torch.Tensor
    row_sum: torch.Tensor


@dataclass(frozen=True)
class ShiftParameter:
    """A vector [dim] added to every row of a side, its Adagrad accumulator [dim] and update
    count (0-D), as `dense_adagrad` takes them."""

    value: torch.Tensor
    sum: torch.Tensor
    step: torch.Tensor


@dataclass(frozen=True)
class RankingSide:
    """One side of `train_ranking`'s edges: entity ids [E], the uniform negatives of every
    batch one after the other (each [chunks, uniform]), the table, and the indexes of the
    shifts (into `train_ranking`'s list) added to its rows, in order."""

    ids: torch.Tensor
    negatives: torch.Tensor
    table: RankingTable
    shifts: Sequence[int]


def ranking_buffers(edges: int, batch_size: int, chunk_size: int, uniform: int,
                    dim: int) -> object:
    """Buffers for the `train_ranking` calls of a worker's `edges` edges (whose batches are at
    most `batch_size` edges, with these chunk size, uniform negatives and dimension): made
    once for all its calls, they are freed with the object returned."""
    return _kernels.loop_buffers(Loop(edges=edges, batch_size=batch_size, chunk_size=chunk_size,
                                      uniform=uniform, dim=dim))


def train_ranking(  # noqa: PLR0913 (the loop's settings)
        lhs: RankingSide, rhs: RankingSide, shifts: Sequence[ShiftParameter], *,
        batch_size: int, chunk_size: int, uniform: int, margin: float, weight: float,
        lr: float, shift_lr: float, eps: float, buffers: object) -> float:
    """Train on the edges (lhs.ids[i], rhs.ids[i]) batch after batch with PBG's default setup
    (ranking loss, batch and uniform negatives on both sides, inner products), updating the
    tables and shifts in place; returns the summed loss times `weight`. Each batch is what
    the batch loop computes for it (`closed_form_gradients` with `ranking_chunks`, then
    `RowAdagrad` and `DenseAdagrad` steps): same chunks, padding, masks and updates.
    `buffers` (`ranking_buffers`) hold each batch's rows, scores and gradients."""
    dim = lhs.table.rows.shape[1] if lhs.table.rows.dim() == 2 else -1
    for side in (lhs, rhs):
        table = side.table
        _expect(table.rows, torch.float32, 2, "table")
        _expect(table.row_sum, torch.float32, 1, "row_sum")
        _expect(side.ids, torch.int64, 1, "ids")
        _expect(side.negatives, torch.int64, 1, "negatives")
        if not all(t.is_contiguous() for t in (table.rows, table.row_sum, side.ids,
                                                side.negatives)):
            raise ValueError("train_ranking needs contiguous tensors")
        if table.rows.shape[1] != dim or len(table.row_sum) != len(table.rows) \
                or len(side.ids) != len(lhs.ids):
            raise ValueError(f"tables {tuple(table.rows.shape)}, accumulators "
                             f"{tuple(table.row_sum.shape)} and ids {tuple(side.ids.shape)} "
                             "do not match")
        if len(side.shifts) > SIDE_SHIFTS or any(not 0 <= k < len(shifts)
                                                 for k in side.shifts):
            raise ValueError(f"side shifts {list(side.shifts)} of {len(shifts)}")
    if len(shifts) > MAX_SHIFTS:
        raise ValueError(f"at most {MAX_SHIFTS} shifts, got {len(shifts)}")
    for shift in shifts:
        for tensor, name in ((shift.value, "shift"), (shift.sum, "shift accumulator")):
            _expect(tensor, torch.float32, 1, name)
            if tensor.shape != (dim,) or not tensor.is_contiguous():
                raise ValueError(f"{name}: expected a contiguous [{dim}], got "
                                 f"{tuple(tensor.shape)}")
        _expect(shift.step, torch.float32, 0, "shift update count")
    loop = Loop(edges=len(lhs.ids), batch_size=batch_size, chunk_size=chunk_size,
                uniform=uniform, dim=dim, num_shifts=len(shifts), margin=margin,
                weight=weight, lr=lr, shift_lr=shift_lr, eps=eps,
                shift=(Shift * MAX_SHIFTS)(*(
                    Shift(value=s.value.data_ptr(), sum=s.sum.data_ptr(),
                          step=s.step.data_ptr()) for s in shifts)))
    return _kernels.train_ranking(loop, _loop_side(lhs), _loop_side(rhs), buffers)


def _loop_side(side: RankingSide) -> LoopSide:
    table = side.table
    padded = [*side.shifts, *[-1] * (SIDE_SHIFTS - len(side.shifts))]
    return LoopSide(ids=side.ids.data_ptr(), negatives=side.negatives.data_ptr(),
                    num_negatives=len(side.negatives),
                    table=Table(rows=table.rows.data_ptr(), row_sum=table.row_sum.data_ptr(),
                                count=len(table.rows)),
                    shifts=(Size * SIDE_SHIFTS)(*padded))


def row_adagrad(table: torch.Tensor, row_sum: torch.Tensor, rows: torch.Tensor,
                grads: torch.Tensor, lr: float, eps: float) -> None:
    """Row-wise Adagrad on `table[rows]`, repeated rows summed first; `grads` [K, dim] is
    overwritten."""
    _expect(table, torch.float32, 2, "table")
    _expect(grads, torch.float32, 2, "grads")
    _expect(rows, torch.int64, 1, "rows")
    _expect(row_sum, torch.float32, 1, "row_sum")
    if not (table.is_contiguous() and grads.is_contiguous() and rows.is_contiguous()
            and row_sum.is_contiguous()):
        raise ValueError("row_adagrad needs contiguous tensors")
    if grads.shape != (len(rows), table.shape[1]) or len(row_sum) != len(table):
        raise ValueError(f"rows {tuple(rows.shape)}, grads {tuple(grads.shape)}, table "
                         f"{tuple(table.shape)} and row sums {tuple(row_sum.shape)} do not "
                         "match")
    _kernels.row_adagrad(table.data_ptr(), table.shape[1], row_sum.data_ptr(),
                         rows.data_ptr(), len(rows), grads.data_ptr(), len(table), float(lr),
                         float(eps))  # IndexError for a bad row id


def gather(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`table.index_select(0, rows)` for a contiguous float32 table and int64 row ids; the
    copy asks for rows a few ahead, which the random rows of a large table need."""
    _expect(table, torch.float32, 2, "table")
    _expect(rows, torch.int64, 1, "rows")
    if not (table.is_contiguous() and rows.is_contiguous()):
        raise ValueError("gather needs a contiguous table and row ids")
    out = table.new_empty((len(rows), table.shape[1]))
    _kernels.gather(table.data_ptr(), table.shape[1], rows.data_ptr(), len(rows),
                    out.data_ptr(), len(table))  # raises IndexError for a bad row id
    return out


def shuffle_columns(columns: Sequence[torch.Tensor], seed: int) -> None:
    """Reorder one to three equal-length, contiguous int64 CPU columns in place by one
    uniformly random permutation drawn from `seed` (Fisher-Yates; the same seed, the same
    permutation): a bucket shuffled with no order array and no copy of a column."""
    if not 1 <= len(columns) <= 3:
        raise ValueError(f"shuffle_columns takes 1 to 3 columns, got {len(columns)}")
    for column in columns:
        _expect(column, torch.int64, 1, "column")
        if not column.is_contiguous() or len(column) != len(columns[0]):
            raise ValueError("shuffle_columns needs contiguous columns of one length, got "
                             f"{[tuple(c.shape) for c in columns]}")
    _kernels.shuffle_columns(seed, len(columns[0]), *(column.data_ptr() for column in columns))


def dense_adagrad(param: torch.Tensor, grad: torch.Tensor, row_sum: torch.Tensor,
                  step: torch.Tensor, lr: float, eps: float) -> None:
    """torch.optim.Adagrad's update of one parameter in place, its accumulator `row_sum`
    (shaped like it) and its update count `step` (0-D) included: one call instead of the
    five tensor operations that dominate the step of a parameter of a few hundred floats."""
    for tensor, name in ((param, "parameter"), (grad, "gradient"), (row_sum, "accumulator")):
        _expect(tensor, torch.float32, param.dim(), name)
        if not tensor.is_contiguous() or tensor.shape != param.shape:
            raise ValueError(f"{name}: expected a contiguous tensor of shape "
                             f"{tuple(param.shape)}, got {tuple(tensor.shape)}")
    _expect(step, torch.float32, 0, "step")
    _kernels.dense_adagrad(param.data_ptr(), grad.data_ptr(), row_sum.data_ptr(),
                           step.data_ptr(), param.numel(), float(lr), float(eps))


def softmax_loss(scores: torch.Tensor, pos_scores: torch.Tensor, pos_keys: torch.Tensor,
                 neg_keys: torch.Tensor, pos_grad: torch.Tensor, num_edges: int) -> float:
    """The softmax loss of one side's negatives: scores [C, S, M] (contiguous; overwritten
    by their gradients), the positives' scores and keys [C, S], the negatives' keys [C, M]; a
    negative whose key is the positive's or negative (padding) counts for nothing. Adds
    d loss / d positive to `pos_grad` [C, S]; rows past `num_edges` (padding) get zero
    gradients and no loss. Same result as `losses.SoftmaxLoss.value_and_gradients`."""
    _expect(scores, torch.float32, 3, "scores")
    for tensor, dtype, name in ((pos_scores, torch.float32, "pos_scores"),
                                (pos_keys, torch.int64, "pos_keys"),
                                (neg_keys, torch.int64, "neg_keys"),
                                (pos_grad, torch.float32, "pos_grad")):
        _expect(tensor, dtype, 2, name)
    chunks, size, width = scores.shape
    if not (pos_scores.shape == pos_keys.shape == pos_grad.shape == (chunks, size)
            and neg_keys.shape == (chunks, width) and num_edges <= chunks * size):
        raise ValueError(f"scores {tuple(scores.shape)}, positives {tuple(pos_scores.shape)}, "
                         f"keys {tuple(pos_keys.shape)} and {tuple(neg_keys.shape)}, gradients "
                         f"{tuple(pos_grad.shape)} do not make {num_edges} edges")
    tensors = (scores, pos_scores, pos_keys, neg_keys, pos_grad)
    if not all(tensor.is_contiguous() for tensor in tensors):
        raise ValueError("softmax_loss needs contiguous tensors")
    return _kernels.softmax_loss(*(tensor.data_ptr() for tensor in tensors), chunks, size,
                                 width, num_edges)
