"""A worker's whole share of a bucket in one compiled call, for PBG's default setup.

In PBG's default setup (one relation type, translation or no operator, `dot`, ranking loss,
batch and uniform negatives on both sides) the batch loop's compiled kernels leave about a
fifth of a worker's time to Python: planning each batch, laying out its rows, and one call
per kernel and optimizer. `kernels.train_ranking` runs the same steps for every batch in one
call. The uniform negatives (and degree negatives, after them in each chunk) are drawn here
first, from the worker's generator in the order the batch loop draws them, so both ways train
the same model (a test holds them equal). Reciprocal relations (two relation types, and two
directions per batch) train through the batch loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .. import kernels
from ..config import ConfigSchema
from ..model.negatives import DegreeNegatives, degree_negatives, draw_sampled, plan_chunking
from ..model.operators import TranslationOperator
from ..stop_signals import raise_if_stopped
from .optimizers import EPSILON
from .trained_edges import count_trained

if TYPE_CHECKING:  # the worker calls this module
    from .worker import ModelState, WorkerTask


def covers(config: ConfigSchema) -> bool:
    """Whether runs of `config` train here: the default setup with the compiled kernels on.
    (Each task is still checked by `handles`.) It decides the default kind of Hogwild worker:
    threads, which no longer wait for the GIL when the loop runs in one call."""
    relation = config.relations[0]
    return (kernels.active() and kernels.CHUNKED and _default_setup(config)
            and config.comparator == "dot" and not config.bias
            and config.loss_fn == "ranking" and config.regularization_coef == 0
            and relation.operator in ("translation", "none")
            and not any(entity.featurized for entity in config.entities.values()))


def handles(state: ModelState, task: WorkerTask) -> bool:
    """Whether `train_compiled` can train the task: a setup it `covers`, one intra-op thread
    (a Hogwild worker's), plain (not featurized) edges, float32 tables and shifts."""
    if not (covers(state.model.config) and torch.get_num_threads() == 1):
        return False
    if task.edges.lhs.is_featurized or task.edges.rhs.is_featurized:
        return False
    tables = [task.partitions[keys[0]] for keys in (task.lhs_keys, task.rhs_keys)]
    shifts = _shift_parameters(*_side_shifts(state))
    optimized = state.optimizer.params if state.optimizer is not None else []
    return (all(p.embeddings.dtype == torch.float32 and p.embeddings.is_contiguous()
                and p.adagrad_sum.is_contiguous() for p in tables)
            and all(param.dtype == torch.float32 and param.is_contiguous()
                    and any(param is p for p in optimized) for param in shifts))


def _default_setup(config: ConfigSchema) -> bool:
    relation = config.relations[0]
    return (len(config.relations) == 1 and not config.dynamic_relations
            and not config.reciprocal_relations and not relation.all_negs
            and config.num_batch_negs > 0
            and not config.disable_lhs_negs and not config.disable_rhs_negs
            and config.max_norm is None)


def _shift_parameters(lhs: list[torch.nn.Parameter],
                      rhs: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """Each distinct vector of the two sides' shifts once: the left's, then the right's."""
    return [*lhs, *(p for p in rhs if not any(p is q for q in lhs))]


def _side_shifts(state: ModelState) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """The vectors added to the left rows and to the right rows, in the order the batch loop
    adds them (`closed_form.SidePipeline`)."""
    model = state.model
    relation = model.config.relations[0]
    lhs = [p for p in [model.global_embedding(relation.lhs)] if p is not None]
    rhs = [p for p in [model.global_embedding(relation.rhs)] if p is not None]
    operator = model.rhs_operators[0]
    if isinstance(operator, TranslationOperator):
        rhs.append(operator.translation)
    return lhs, rhs


# Batches per compiled call. Their uniform negatives are drawn just before it: a few hundred
# kilobytes, where a whole bucket's would take more memory than its edges (16 bytes per
# edge with PBG's defaults, 24 for the edges).
BATCHES_PER_CALL = 32


def train_compiled(state: ModelState, task: WorkerTask, generator: torch.Generator) -> float:
    """Train on `task.edges` (which `handles` accepted); returns the summed loss."""
    settings, config, optimizer = task.settings, state.model.config, state.optimizer
    lhs_part = task.partitions[task.lhs_keys[0]]
    rhs_part = task.partitions[task.rhs_keys[0]]
    lhs_table = kernels.RankingTable(lhs_part.embeddings, lhs_part.adagrad_sum)
    rhs_table = lhs_table if rhs_part.embeddings is lhs_part.embeddings \
        else kernels.RankingTable(rhs_part.embeddings, rhs_part.adagrad_sum)
    side_shifts = _side_shifts(state)
    shifts = _shift_parameters(*side_shifts)
    states = []
    for param in shifts:
        assert optimizer is not None  # `handles` checked that each shift is optimized
        index = next(i for i, p in enumerate(optimizer.params) if p is param)
        states.append(kernels.ShiftParameter(param.data, optimizer.sums[index],
                                             optimizer.steps[index]))
    lhs_shifts, rhs_shifts = ([next(i for i, p in enumerate(shifts) if p is param)
                               for param in side] for side in side_shifts)
    edges, loss = task.edges, 0.0
    if not len(edges):
        return loss
    block = BATCHES_PER_CALL * settings.batch_size  # whole batches, as the batch loop cuts
    degree = degree_negatives(settings.num_degree_negs, task.degree_pools, task.lhs_keys[0],
                              task.rhs_keys[0])
    sampled = settings.num_uniform_negs + settings.num_degree_negs  # extra rows per chunk
    buffers = kernels.ranking_buffers(len(edges), settings.batch_size, settings.num_batch_negs,
                                      sampled, lhs_table.rows.shape[1])
    negatives = None  # the first call's (the largest), reused by the next
    for start in range(0, len(edges), block):
        raise_if_stopped()  # a thread worker stops with the run, not at the bucket's end
        lhs_ids = edges.lhs.ids[start:start + block].contiguous()
        lhs_negatives, rhs_negatives = draw_negatives(
            len(lhs_ids), settings.batch_size, settings.num_batch_negs,
            settings.num_uniform_negs, (len(lhs_table.rows), len(rhs_table.rows)), generator,
            negatives, degree)
        negatives = negatives or (lhs_negatives, rhs_negatives)
        loss += kernels.train_ranking(
            kernels.RankingSide(lhs_ids, lhs_negatives, lhs_table, lhs_shifts),
            kernels.RankingSide(edges.rhs.ids[start:start + block].contiguous(),
                                rhs_negatives, rhs_table, rhs_shifts),
            states, batch_size=settings.batch_size, chunk_size=settings.num_batch_negs,
            uniform=sampled, margin=config.margin,
            weight=config.relations[0].weight, lr=settings.lr,
            shift_lr=optimizer.lr if optimizer is not None else 0.0, eps=EPSILON,
            buffers=buffers)
        count_trained(task.trained, len(lhs_ids))
    return loss


def draw_negatives(num_edges: int, batch_size: int, num_batch_negs: int,
                   num_uniform_negs: int, num_rows: tuple[int, int],
                   generator: torch.Generator,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None,
                   degree: DegreeNegatives | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each side's uniform negatives for every batch, one batch after another, drawn as the
    batch loop draws them (`EmbeddingModel.plan_batch`: per batch, [chunks, uniform] for the
    left side, then for the right); into the start of `out`'s two columns where they fit
    (a worker's calls reuse one pair: new ones at each call fragmented the heap). With
    `degree`, each chunk's degree negatives follow its uniform ones ([chunks, uniform +
    degree] per side and batch)."""
    sampled = num_uniform_negs + (0 if degree is None else degree.count)
    chunks = [plan_chunking(min(batch_size, num_edges - start), False, num_batch_negs,
                            sampled).num_chunks
              for start in range(0, num_edges, batch_size)] if sampled > 0 else []
    total = sum(chunks) * sampled
    drawn = (out[0][:total], out[1][:total]) if out is not None and len(out[0]) >= total \
        else (torch.empty(total, dtype=torch.long), torch.empty(total, dtype=torch.long))
    at = 0
    for num_chunks in chunks:
        count = num_chunks * sampled
        if degree is None:
            for side, rows in zip(drawn, num_rows):
                torch.randint(rows, (count,), generator=generator, out=side[at:at + count])
        else:
            for side, rows, pool in zip(drawn, num_rows, (degree.lhs, degree.rhs)):
                rows_drawn = draw_sampled(num_chunks, num_uniform_negs, rows, generator,
                                          num_degree_negs=degree.count, degree_pool=pool)
                assert rows_drawn is not None  # degree.count > 0
                side[at:at + count].view(num_chunks, sampled).copy_(rows_drawn)
        at += count
    return drawn
