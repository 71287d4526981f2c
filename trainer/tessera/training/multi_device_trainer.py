"""Training a bucket chunk on several devices at once, by sub-buckets (see `sub_buckets`).

Each device has its own copy of the model (merged back as `DeviceModel` does: the changes
of all devices are added up, as Hogwild workers' are) and, in each round, copies of only
the row ranges its sub-buckets use, with entity offsets made relative to them; ranges are
copied back before the next round gives them to another device. One host thread per
device drives it, so that the devices compute at once. The held-out edges are ranked on the
host, against the host's partitions, before and after.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from .. import kernels
from ..config import ConfigSchema
from ..data.graph_data import GraphData
from ..edgelist import EdgeList, EntityList
from ..seeding import stable_seed
from ..vocabulary import PartitionKey
from .bucket_trainer import (
    BucketOutcome,
    bucket_degree_pools,
    chunk_seed,
    evaluate_held_out,
    read_training_edges,
)
from .device_copies import PartitionCopier
from .device_trainer import DeviceBucketTrainer, DeviceTimer
from .partitions import Partition
from .schedule import TrainingStep
from .sub_buckets import SubBucket, num_ranges, sub_bucket_rounds
from .worker import ModelState

SideKey = tuple[str, PartitionKey]  # ("lhs" | "rhs", partition): a range of one side


def range_starts(index: torch.Tensor, rows: torch.Tensor, count: int) -> torch.Tensor:
    """The first row of range `index` when `rows` rows are cut into `count` ranges as
    `vocabulary.chunk_range` cuts them (larger ranges first)."""
    size, larger = rows // count, rows % count
    return index * size + torch.minimum(index, larger)


def range_of(ids: torch.Tensor, rows: torch.Tensor, count: int) -> torch.Tensor:
    """The range (of `count`, cut as `range_starts` says) each id falls in."""
    size, larger = rows // count, rows % count
    in_larger = ids < larger * (size + 1)
    return torch.where(in_larger, ids // (size + 1),
                       larger + (ids - larger * (size + 1)) // size.clamp(min=1))


@dataclass
class BucketLayout:
    """A bucket's edges with the range of each side, and each side's rows per edge."""

    edges: EdgeList
    ranges: int
    lhs_rows: torch.Tensor  # rows of the partition of each edge's left side
    rhs_rows: torch.Tensor
    lhs_range: torch.Tensor = field(init=False)
    rhs_range: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.lhs_range = range_of(self.edges.lhs.ids, self.lhs_rows, self.ranges)
        self.rhs_range = range_of(self.edges.rhs.ids, self.rhs_rows, self.ranges)

    def sub_bucket(self, lhs: int, rhs: int) -> EdgeList:
        """Its edges, with entity offsets relative to the first rows of their ranges."""
        chosen = ((self.lhs_range == lhs) & (self.rhs_range == rhs)).nonzero().squeeze(1)
        edges = self.edges[chosen]
        lhs_start = range_starts(torch.full_like(chosen, lhs), self.lhs_rows[chosen], self.ranges)
        rhs_start = range_starts(torch.full_like(chosen, rhs), self.rhs_rows[chosen], self.ranges)
        return EdgeList(rel=edges.rel, lhs=EntityList.from_ids(edges.lhs.ids - lhs_start),
                        rhs=EntityList.from_ids(edges.rhs.ids - rhs_start))


@dataclass(eq=False)
class MultiDeviceBucketTrainer:
    """Trains bucket chunks on `devices` together, embeddings stored there as `dtype`."""

    config: ConfigSchema
    data: GraphData
    state: ModelState
    num_chunks: int
    devices: list[torch.device]
    dtype: torch.dtype = torch.float32
    closed_form: bool | None = None  # the run's step implementation's (see `batch_gradients`)

    def __post_init__(self) -> None:
        self.trainers = [DeviceBucketTrainer(self.config, self.data, self.state,
                                             self.num_chunks, device, self.dtype,
                                             closed_form=self.closed_form)
                         for device in self.devices]
        self.threads = ThreadPoolExecutor(len(self.devices), thread_name_prefix="tessera-gpu")

    def edges_trained(self) -> int:
        """Edges trained so far in the bucket chunk being trained, on all devices."""
        return sum(trainer.edges_trained() for trainer in self.trainers)

    def train(self, step: TrainingStep, partitions: dict[PartitionKey, Partition],
              delay_seconds: float = 0.0) -> BucketOutcome:
        """Train one bucket chunk (`delay_seconds`, the Hogwild delay, has no use here)."""
        for trainer in self.trainers:
            trainer.tally.reset()
        lhs_keys, rhs_keys = self.data.partition_keys(step.bucket)
        [edges], eval_edges = read_training_edges(self.config, self.data, step,
                                                  self.num_chunks, 1)
        # The held-out edges' degree negatives, on the host; training's come from each
        # sub-bucket's own edges (`DeviceBucketTrainer.train_edges`).
        pools = bucket_degree_pools(self.config, edges, lhs_keys, rhs_keys, partitions) \
            if self.config.eval_num_degree_negs else None
        before = evaluate_held_out(self.config, self.state.model, eval_edges, partitions,
                                   lhs_keys, rhs_keys, degree_pools=pools)
        shared = bool(set(lhs_keys) & set(rhs_keys))
        count = num_ranges(len(self.devices), shared)
        relation = (torch.zeros_like(edges.rel) if self.config.dynamic_relations
                    else edges.rel)
        layout = BucketLayout(edges, count, self._rows(partitions, lhs_keys)[relation],
                              self._rows(partitions, rhs_keys)[relation])
        states = [trainer.model.pull() for trainer in self.trainers]
        started = time.monotonic()
        totals = torch.zeros(3, dtype=torch.float64)  # loss, regularization, device seconds
        for device_work in sub_bucket_rounds(len(self.devices), shared):
            for result in self.threads.map(
                    lambda trainer, state, work: self._train_round(
                        trainer, state, work, layout, partitions, lhs_keys, rhs_keys, step),
                    self.trainers, states, device_work):
                totals += torch.tensor(result, dtype=torch.float64)
        seconds = time.monotonic() - started
        for trainer in self.trainers:
            trainer.model.push()
        after = evaluate_held_out(self.config, self.state.model, eval_edges, partitions,
                                  lhs_keys, rhs_keys, degree_pools=pools)
        loss, regularization, device_seconds = totals.tolist()
        num_edges = max(len(edges), 1)
        return BucketOutcome(step=step, count=len(edges), loss=loss / num_edges,
                             regularization=regularization / num_edges, seconds=seconds,
                             eval_before=before, eval_after=after,
                             device_seconds=device_seconds / len(self.devices))

    @staticmethod
    def _rows(partitions: dict[PartitionKey, Partition],
              keys: list[PartitionKey]) -> torch.Tensor:
        return torch.tensor([len(partitions[key].embeddings) for key in keys])

    def _train_round(self, trainer: DeviceBucketTrainer, state: ModelState,
                     sub_buckets: list[SubBucket], layout: BucketLayout,
                     partitions: dict[PartitionKey, Partition], lhs_keys: list[PartitionKey],
                     rhs_keys: list[PartitionKey], step: TrainingStep
                     ) -> tuple[float, float, float]:
        """One device's sub-buckets of one round, in this (the device's) thread."""
        on_gpu = torch.cuda.device(trainer.device) if trainer.device.type == "cuda" \
            else contextlib.nullcontext()
        loss = regularization = device_seconds = 0.0
        with kernels.torch_only(), on_gpu:
            for lhs, rhs in sub_buckets:
                edges = layout.sub_bucket(lhs, rhs)
                if len(edges) == 0:
                    continue
                ranges = self._ranges(partitions, lhs_keys, rhs_keys, lhs, rhs, layout.ranges)
                tables = trainer.copier.to_device(ranges).ready()
                started, timer = time.monotonic(), DeviceTimer(trainer.device)
                seed = stable_seed((chunk_seed(step, self.config.seed), lhs, rhs))
                sums = trainer.train_edges(
                    state, trainer.staged(edges), tables, [("lhs", k) for k in lhs_keys],
                    [("rhs", k) for k in rhs_keys], seed)
                device_seconds += timer.stop(time.monotonic() - started)
                PartitionCopier.to_host(tables, ranges)
                loss, regularization = loss + sums[0], regularization + sums[1]
        return loss, regularization, device_seconds

    @staticmethod
    def _ranges(partitions: dict[PartitionKey, Partition], lhs_keys: list[PartitionKey],
                rhs_keys: list[PartitionKey], lhs: int, rhs: int,
                count: int) -> dict[SideKey, Partition]:
        """Views of the rows of range `lhs` of the left sides' partitions and of range
        `rhs` of the right sides'; one view (one table) where a partition's two ranges are
        the same rows."""
        def view(key: PartitionKey, index: int) -> Partition:
            partition = partitions[key]
            rows = torch.tensor(len(partition.embeddings))
            start = int(range_starts(torch.tensor(index), rows, count))
            stop = int(range_starts(torch.tensor(index + 1), rows, count)) \
                if index + 1 < count else len(partition.embeddings)
            return Partition(partition.embeddings[start:stop], partition.adagrad_sum[start:stop])

        views: dict[SideKey, Partition] = {("lhs", key): view(key, lhs) for key in lhs_keys}
        for key in rhs_keys:
            same = ("lhs", key) in views and lhs == rhs
            views["rhs", key] = views["lhs", key] if same else view(key, rhs)
        return views
