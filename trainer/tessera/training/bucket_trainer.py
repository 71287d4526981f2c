"""Training one chunk of one bucket: load its edges, hold some out, share the rest among workers.

The held-out edges are ranked before and after the bucket is trained, so the training stats
show what each bucket taught the model (PBG's eval_stats_before / eval_stats_after).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..config import ConfigSchema
from ..data.batching import (
    shuffle_edges,
    shuffle_edges_in_place,
    split_among_workers,
    split_holdout,
)
from ..data.graph_data import GraphData
from ..edgelist import EdgeList
from ..evaluation.sampled import rank_against_sampled
from ..model import EmbeddingModel
from ..model.negatives import DegreePool, Key, degree_negatives, degree_pools
from ..seeding import stable_seed
from ..vocabulary import PartitionKey
from .allocator import release_freed_memory
from .hogwild import HogwildPool, Pool, empty_shared
from .partitions import Partition
from .schedule import TrainingStep
from .steps import StepImplementation, choose_step
from .trained_edges import EdgeTally
from .worker import BatchSettings, ModelState, WorkerTask, train_part


@dataclass(frozen=True)
class BucketOutcome:
    """What training one bucket chunk produced, as written to training_stats.json."""

    step: TrainingStep
    count: int
    loss: float  # mean per edge
    regularization: float
    seconds: float
    eval_before: dict[str, float] | None
    eval_after: dict[str, float] | None
    device_seconds: float | None = None  # the device's time in the batch loop (device path)

    def record(self) -> dict[str, Any]:
        return {"epoch_idx": self.step.epoch_idx, "edge_path_idx": self.step.edge_path_idx,
                "edge_chunk_idx": self.step.edge_chunk_idx,
                "lhs_partition": self.step.bucket.lhs, "rhs_partition": self.step.bucket.rhs,
                "stats": {"count": self.count, "metrics": {"loss": self.loss,
                                                           "reg": self.regularization}},
                "eval_stats_before": self.eval_before, "eval_stats_after": self.eval_after,
                "seconds": self.seconds}


@dataclass(eq=False)
class BucketTrainer:
    """Trains bucket chunks with a pool of Hogwild workers (or inline with one worker)."""

    config: ConfigSchema
    data: GraphData
    state: ModelState
    pool: Pool | None
    num_workers: int
    num_chunks: int
    step: StepImplementation | None = None  # the run's (None: `choose_step`'s for config)

    def __post_init__(self) -> None:
        config = self.config
        step = self.step or choose_step(config, on_device=False)
        self.settings = BatchSettings(
            batch_size=config.batch_size, num_batch_negs=config.num_batch_negs,
            num_uniform_negs=config.num_uniform_negs,
            dynamic_relations=config.dynamic_relations, lr=config.lr,
            num_degree_negs=config.num_degree_negs, whole_loop=step.whole_loop,
            closed_form=step.closed_form)
        self.tally = EdgeTally(self.num_workers, shared=isinstance(self.pool, HogwildPool))

    def edges_trained(self) -> int:
        """Edges trained so far in the bucket chunk being trained."""
        return self.tally.total()

    def train(self, step: TrainingStep, partitions: dict[PartitionKey, Partition],
              delay_seconds: float = 0.0) -> BucketOutcome:
        lhs_keys, rhs_keys = self.data.partition_keys(step.bucket)
        seed = chunk_seed(step, self.config.seed)
        shuffled, eval_edges = read_shuffled_edges(
            self.config, self.data, step, self.num_chunks,
            empty_shared if isinstance(self.pool, HogwildPool) else None)
        pools = bucket_degree_pools(self.config, shuffled, lhs_keys, rhs_keys, partitions)
        parts = split_among_workers(shuffled, self.num_workers)
        del shuffled
        before = evaluate_held_out(self.config, self.state.model, eval_edges, partitions,
                                   lhs_keys, rhs_keys, degree_pools=pools)
        tasks = [WorkerTask(edges=part, partitions=partitions, lhs_keys=lhs_keys,
                            rhs_keys=rhs_keys, settings=self.settings, seed=seed + rank,
                            delay_seconds=delay_seconds if rank > 0 else 0.0,
                            trained=self.tally.slot(rank), degree_pools=pools)
                 for rank, part in enumerate(parts)]
        self.tally.reset()
        if self.pool is None:
            results = [train_part(self.state, task) for task in tasks]
        else:
            results = self.pool.run(tasks)
        after = evaluate_held_out(self.config, self.state.model, eval_edges, partitions,
                                  lhs_keys, rhs_keys, degree_pools=pools)
        count = sum(r.count for r in results)
        return BucketOutcome(
            step=step, count=count, loss=sum(r.loss for r in results) / max(count, 1),
            regularization=sum(r.regularization for r in results) / max(count, 1),
            seconds=max((r.seconds for r in results), default=0.0),
            eval_before=before, eval_after=after)



def chunk_identity(step: TrainingStep) -> tuple[int, int, int, int]:
    """What names a bucket chunk: its held-out edges and shuffles are drawn from it."""
    return (step.edge_path_idx, step.edge_chunk_idx, step.bucket.lhs, step.bucket.rhs)


def chunk_seed(step: TrainingStep, seed: int) -> int:
    """The seed of a bucket chunk's shuffle and negatives in one epoch (worker r: + r), drawn
    from the run's `seed`."""
    return stable_seed((seed, step.epoch_idx, *chunk_identity(step)))


def read_training_edges(config: ConfigSchema, data: GraphData, step: TrainingStep,
                        num_chunks: int, num_parts: int,
                        allocate: Callable[..., torch.Tensor] | None = None
                        ) -> tuple[list[EdgeList], EdgeList]:
    """`num_parts` parts of the chunk's shuffled training edges, and its held-out edges (see
    `read_shuffled_edges`)."""
    shuffled, eval_edges = read_shuffled_edges(config, data, step, num_chunks, allocate)
    return split_among_workers(shuffled, num_parts), eval_edges


def read_shuffled_edges(config: ConfigSchema, data: GraphData, step: TrainingStep,
                        num_chunks: int, allocate: Callable[..., torch.Tensor] | None = None
                        ) -> tuple[EdgeList, EdgeList]:
    """The chunk's shuffled training edges and its held-out edges; `allocate`: where the
    shuffled edges go (`shuffle_edges`; None: shuffled in place).

    Only one copy of the chunk outlives this call: with `allocate`, the chunk as read is
    dropped here rather than held, a second bucket-sized copy, while the workers train.
    """
    edges = data.read_chunk(step.edge_path_idx, step.bucket, step.edge_chunk_idx, num_chunks)
    train_edges, eval_edges = split_holdout(edges, config.eval_fraction, chunk_identity(step))
    train_edges = with_replayed_edges(data, step, num_chunks, train_edges)
    train_edges = sample_old_edges(config, data, step, train_edges)
    generator = torch.Generator().manual_seed(chunk_seed(step, config.seed))
    shuffled = shuffle_edges(train_edges, generator, allocate) if allocate is not None \
        else shuffle_edges_in_place(train_edges, generator)  # read here: ours to reorder
    del edges, train_edges
    # The chunk as read (where the holdout or the old-edge sampling took a copy) and what the
    # shuffle freed on the way are handed back now; workers that keep freed memory for their
    # batches (threads: the trainer's own heap) would otherwise hold them all bucket.
    release_freed_memory()
    return shuffled, eval_edges


def bucket_degree_pools(config: ConfigSchema, edges: EdgeList, lhs_keys: Sequence[Key],
                        rhs_keys: Sequence[Key], tables: Mapping[Key, Partition],
                        device: torch.device | None = None) -> dict[Key, DegreePool] | None:
    """Each table's degree-negatives pool from a bucket chunk's training `edges` (views of
    them where a side has one table), on `device` if given; None when no negatives are drawn
    by degree."""
    if not (config.num_degree_negs or config.eval_num_degree_negs):
        return None
    pools = degree_pools(edges, lhs_keys, rhs_keys, lambda key: tables[key].embeddings)
    if device is None:
        return pools
    moved: dict[int, DegreePool] = {}  # a pool two keys share is copied once
    return {key: moved.setdefault(id(pool), pool.to(device)) for key, pool in pools.items()}


def with_replayed_edges(data: GraphData, step: TrainingStep, num_chunks: int,
                        edges: EdgeList) -> EdgeList:
    """The chunk's edges and its part of the bucket's replayed old edges (`replay_paths`).
    The chunks of all edge sets share each replayed bucket, so an old edge trains once an
    epoch, shuffled among the new ones: in an edge set of its own, trained before or after
    them, the set trained last pulls the model its way."""
    replayed = data.read_replay(step.bucket,
                                step.edge_path_idx * num_chunks + step.edge_chunk_idx,
                                len(data.config.edge_paths) * num_chunks)
    return edges if replayed is None else EdgeList.cat([edges, replayed])


def sample_old_edges(config: ConfigSchema, data: GraphData, step: TrainingStep,
                     edges: EdgeList) -> EdgeList:
    """The edges that train this epoch: all that touch an entity new since `init_path`, and
    `init_old_edge_fraction` of those between known entities (replayed ones included), drawn
    anew each epoch (so a run can replay part of the old graph while the new entities
    learn)."""
    if config.init_old_edge_fraction == 1 or data.known_rows is None or len(edges) == 0:
        return edges
    old = data.between_known(step.bucket, edges)
    generator = torch.Generator().manual_seed(stable_seed((chunk_seed(step, config.seed), 1)))
    replayed = torch.rand(len(edges), generator=generator) < config.init_old_edge_fraction
    return edges[torch.nonzero(~old | replayed).flatten()]


def evaluate_held_out(config: ConfigSchema, model: EmbeddingModel, edges: EdgeList,
                      partitions: Mapping[Key, Partition], lhs_keys: Sequence[Key],
                      rhs_keys: Sequence[Key], device: torch.device | None = None,
                      degree_pools: Mapping[Key, DegreePool] | None = None
                      ) -> dict[str, float] | None:
    """The ranking metrics of a chunk's held-out edges (None if it holds none out);
    `device`: where the model and partitions are, if not on the CPU; `degree_pools`: those
    of the chunk's training edges, for `eval_num_degree_negs`."""
    if len(edges) == 0:
        return None
    metrics = rank_against_sampled(
        model, edges,
        lambda r: (partitions[lhs_keys[r]].embeddings, partitions[rhs_keys[r]].embeddings),
        batch_size=config.batch_size, num_batch_negs=config.eval_num_batch_negs,
        num_uniform_negs=config.eval_num_uniform_negs,
        dynamic_relations=config.dynamic_relations, device=device,
        degree_of=lambda r: degree_negatives(config.eval_num_degree_negs, degree_pools,
                                             lhs_keys[r], rhs_keys[r]))
    return metrics.summary()
