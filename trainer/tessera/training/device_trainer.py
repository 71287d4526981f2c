"""Training bucket chunks on one device: a CUDA GPU, or the CPU (which the tests use).

The bucket's partitions (embeddings and their Adagrad sums) are copied to the device while
the host reads and shuffles the bucket's edges; then every batch is copied there (from
pinned memory, without waiting) and scored, differentiated and stepped there, by the torch
code of the model and optimizers (the compiled kernels are CPU-only and are turned off for
this thread, so a test on the CPU runs what a GPU runs). Losses are summed on the device and
read once per bucket; the trained partitions and the model's change go back to the host at
the end, so checkpoints and swaps are exactly those of the CPU path.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .. import kernels
from ..config import ConfigSchema
from ..data.batching import iter_batches
from ..data.graph_data import GraphData
from ..edgelist import EdgeList
from ..model import batch_gradients
from ..model.negatives import DegreeNegatives, DegreePool, degree_negatives
from ..vocabulary import PartitionKey
from .bucket_trainer import (
    BucketOutcome,
    bucket_degree_pools,
    chunk_seed,
    evaluate_held_out,
    read_training_edges,
)
from .device_copies import Key, PartitionCopier
from .device_model import DeviceModel
from .optimizers import RowAdagrad
from .partitions import Partition
from .recorded_steps import StepRecorder, worth_recording
from .schedule import TrainingStep
from .trained_edges import EdgeTally, count_trained
from .worker import ModelState

Tables = dict[PartitionKey, Partition]


class DeviceTimer:
    """The device's time from now to `stop`, by CUDA events recorded on its stream (on the
    CPU, the host's)."""

    def __init__(self, device: torch.device) -> None:
        self.events = None
        if device.type == "cuda":
            self.events = (torch.cuda.Event(enable_timing=True),
                           torch.cuda.Event(enable_timing=True))
            self.events[0].record()

    def stop(self, host_seconds: float) -> float:
        if self.events is None:
            return host_seconds
        start, end = self.events
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000


@dataclass(eq=False)
class DeviceBucketTrainer:
    """Trains bucket chunks on `device`, embeddings stored there as `dtype`."""

    config: ConfigSchema
    data: GraphData
    state: ModelState  # the host's: what checkpoints save
    num_chunks: int
    device: torch.device
    dtype: torch.dtype = torch.float32
    record_steps: bool = True  # replay each batch shape's recorded step (`recorded_steps`)
    closed_form: bool | None = None  # the run's step implementation's (see `batch_gradients`)
    in_place: bool = False  # the partitions are held in the device's memory (`holder_device`)

    def __post_init__(self) -> None:
        self.model = DeviceModel(self.state, self.config, self.device)
        self.copier = PartitionCopier(self.device, self.dtype, self.in_place)
        self.tally = EdgeTally()
        self.recorded_shapes = 0  # batch shapes recorded so far (CUDA graphs on a GPU)
        # The next chunk's edges, read (shuffled, staged) while this one trains, by chunk in
        # the order asked for.
        self.edge_reader = ThreadPoolExecutor(1, thread_name_prefix="tessera-edges")
        self.ahead: dict[TrainingStep, Future[tuple[EdgeList, EdgeList]]] = {}

    def look_ahead(self, step: TrainingStep) -> None:
        """Start reading the edges of `step`, the chunk that trains next, in the background:
        a GPU trains a chunk in milliseconds, and would otherwise wait for the read."""
        if step not in self.ahead:
            self.ahead[step] = self.edge_reader.submit(self._read_edges, step)

    def _read_edges(self, step: TrainingStep) -> tuple[EdgeList, EdgeList]:
        """The chunk's shuffled training edges, staged, and its held-out edges."""
        with kernels.torch_only():  # as the chunk's own thread reads them
            [edges], eval_edges = read_training_edges(self.config, self.data, step,
                                                      self.num_chunks, 1)
            return self.staged(edges), eval_edges

    def _edges_of(self, step: TrainingStep) -> tuple[EdgeList, EdgeList]:
        """The chunk's edges: read ahead, else read now. Reads ahead for chunks asked for
        before this one are let go: the order changed, and they read again if they come
        (their failures too are theirs)."""
        if step not in self.ahead:
            return self._read_edges(step)
        while (earlier := next(iter(self.ahead))) != step:
            self.ahead.pop(earlier).exception()
        return self.ahead.pop(step).result()  # a failed read raises here, as it would have

    def edges_trained(self) -> int:
        """Edges trained so far in the bucket chunk being trained."""
        return self.tally.total()

    def train(self, step: TrainingStep, partitions: Tables,
              delay_seconds: float = 0.0) -> BucketOutcome:
        """Train one bucket chunk (`delay_seconds`, the Hogwild delay, has no use here)."""
        on_gpu = torch.cuda.device(self.device) if self.device.type == "cuda" \
            else contextlib.nullcontext()
        self.tally.reset()
        with kernels.torch_only(), on_gpu:
            return self._train(step, partitions)

    def _train(self, step: TrainingStep, partitions: Tables) -> BucketOutcome:
        lhs_keys, rhs_keys = self.data.partition_keys(step.bucket)
        in_flight = self.copier.to_device(partitions)
        edges, eval_edges = self._edges_of(step)  # read while the partitions are copied
        tables = in_flight.ready()
        pools = bucket_degree_pools(self.config, edges, lhs_keys, rhs_keys, tables, self.device)
        state = self.model.pull()
        before = evaluate_held_out(self.config, state.model, eval_edges, tables, lhs_keys,
                                   rhs_keys, self.device, pools)
        started, timer = time.monotonic(), DeviceTimer(self.device)
        loss, regularization = self.train_edges(state, edges, tables, lhs_keys, rhs_keys,
                                                chunk_seed(step, self.config.seed), pools)
        seconds = time.monotonic() - started  # reading the sums waited for the device
        device_seconds = timer.stop(seconds)
        after = evaluate_held_out(self.config, state.model, eval_edges, tables, lhs_keys,
                                  rhs_keys, self.device, pools)
        self.model.push()
        PartitionCopier.to_host(tables, partitions)
        count = max(len(edges), 1)
        return BucketOutcome(step=step, count=len(edges), loss=loss / count,
                             regularization=regularization / count, seconds=seconds,
                             eval_before=before, eval_after=after,
                             device_seconds=device_seconds)

    def staged(self, edges: EdgeList) -> EdgeList:
        """The edges as batches will slice them: grouped by relation type (as `iter_batches`
        would group them, so it slices this copy), in pinned memory for a GPU."""
        if not self.config.dynamic_relations and len(edges) > 1 \
                and not bool((edges.rel[1:] >= edges.rel[:-1]).all()):
            edges = edges[torch.argsort(edges.rel, stable=True)]
        return edges.pin_memory() if self.device.type == "cuda" else edges

    def train_edges(self, state: ModelState, edges: EdgeList, tables: Mapping[Key, Partition],
                    lhs_keys: Sequence[Key], rhs_keys: Sequence[Key], seed: int,
                    degree_pools: Mapping[Key, DegreePool] | None = None
                    ) -> tuple[float, float]:
        """Train on `edges` batch by batch against `tables` (on the device; each relation's
        sides' tables named by `lhs_keys` and `rhs_keys`); the summed loss and
        regularization. Degree negatives come from `degree_pools` (on the device), else
        from `edges`' own."""
        config = self.config
        order = torch.Generator().manual_seed(seed)  # batch order: drawn on the host
        # Negatives are drawn where they are used; on the CPU from the one generator, as a
        # Hogwild worker draws them.
        draws = order if self.device.type == "cpu" \
            else torch.Generator(self.device).manual_seed(seed)
        recorder = StepRecorder(self.device, draws, config.dynamic_relations,
                                self.record_steps
                                and worth_recording(len(edges), config.batch_size))
        with kernels.torch_only():  # the torch code: the compiled kernels read CPU tensors
            if degree_pools is None and config.num_degree_negs:
                degree_pools = bucket_degree_pools(config, edges, lhs_keys, rhs_keys, tables,
                                                   self.device)
            self._train_batches(recorder, state, edges, tables, lhs_keys, rhs_keys, order,
                                degree_pools)
        self.recorded_shapes += recorder.recorded
        return recorder.sums.read()

    def _train_batches(self, recorder: StepRecorder, state: ModelState, edges: EdgeList,
                       tables: Mapping[Key, Partition], lhs_keys: Sequence[Key],
                       rhs_keys: Sequence[Key], order: torch.Generator,
                       degree_pools: Mapping[Key, DegreePool] | None) -> None:
        """The batches of `edges` in `order`, negatives drawn from the recorder's generator."""
        config, draws = self.config, recorder.generator
        row_optimizers = {id(p.embeddings): RowAdagrad(p.embeddings, config.lr, p.adagrad_sum,
                                                       without_syncs=True)
                          for p in tables.values()}
        for batch in iter_batches(edges, config.batch_size, config.dynamic_relations, order):
            relation = 0 if config.dynamic_relations else int(batch.rel[0])  # a host tensor
            step = functools.partial(
                train_batch, state, lhs_table=tables[lhs_keys[relation]].embeddings,
                rhs_table=tables[rhs_keys[relation]].embeddings, row_optimizers=row_optimizers,
                generator=draws, degree=degree_negatives(config.num_degree_negs, degree_pools,
                                                         lhs_keys[relation],
                                                         rhs_keys[relation]),
                closed_form=self.closed_form)
            recorder.run((relation, len(batch)), batch, step)
            count_trained(self.tally.slots, len(batch))


def train_batch(state: ModelState, batch: EdgeList, lhs_table: torch.Tensor,
                rhs_table: torch.Tensor, row_optimizers: dict[int, RowAdagrad],
                generator: torch.Generator, degree: DegreeNegatives | None = None,
                closed_form: bool | None = None
                ) -> tuple[float | torch.Tensor, float | torch.Tensor]:
    """One step on the device: the batch's gradients, the row-wise Adagrad steps of the
    tables' rows (`row_optimizers`, by the table's id) and the model's Adagrad step; the
    batch's loss and regularization (0-d device tensors off the CPU); `closed_form` as in
    `batch_gradients`."""
    config = state.model.config
    if state.optimizer is not None:
        state.optimizer.zero_grad()
    gradients = batch_gradients(state.model, batch, lhs_table, rhs_table,
                                num_batch_negs=config.num_batch_negs,
                                num_uniform_negs=config.num_uniform_negs, generator=generator,
                                degree=degree, closed_form=closed_form)
    for rows in gradients.rows:
        row_optimizers[id(rows.table)].step(rows.rows, rows.grads)
    if state.optimizer is not None:
        state.optimizer.step()
    return gradients.loss, gradients.regularization
