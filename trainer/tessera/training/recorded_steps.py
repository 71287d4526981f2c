"""A device's training steps recorded once per batch shape and replayed: one launch a batch.

The device step of a batch is a few hundred small operations; issued one by one from Python
they cost the host about 4 ms a batch (`bench/bench_device_step.py`), and a GPU waits for
the host. A CUDA graph records those kernels once and replays them all with one call. To be
replayable a step must read its batch from buffers that stay put (each batch is copied into
its shape's `BatchSlots`), write its results into sums that stay put (`StepSums`, which the
step adds to on the device), draw its negatives from a generator the graph knows of, and
never wait for the device (the device step reads nothing back; see `device_trainer`).

A shape is recorded the second time it comes, after one plain step has warmed it up (lazy
allocations, library handles), and only in bucket chunks long enough for the recording to
pay. Recordings hold the addresses of the chunk's tables, so they live as long as the
chunk. On the CPU (the tests, CI) the same buffers and sums are used and a replay calls the
step again: what CI runs is the path a GPU records, save the recording itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch

from ..edgelist import EdgeList, EntityList

logger = logging.getLogger(__name__)

# A chunk is recorded only if it holds at least this many full batches: below that the
# recording (about as long as a few plain steps) does not pay for itself.
MIN_BATCHES_TO_RECORD = 16

StepResult = tuple["float | torch.Tensor", "float | torch.Tensor"]  # loss, regularization
Step = Callable[[EdgeList], StepResult]


@dataclass
class StepSums:
    """The summed loss and regularization of a chunk's batches, on the device, added to by
    every step (a recorded one too), read once at the end."""

    device: torch.device
    loss: torch.Tensor = field(init=False)
    regularization: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.regularization = torch.zeros((), dtype=torch.float64, device=self.device)

    def add(self, result: StepResult) -> None:
        loss, regularization = result
        self.loss.add_(loss)
        self.regularization.add_(regularization)

    def read(self) -> tuple[float, float]:
        return float(self.loss), float(self.regularization)


@dataclass
class BatchSlots:
    """Device buffers for batches of one shape, which every batch of it is copied into.
    With one relation type per batch its (host) relation ids are the model's to read, as
    the device path's batches have them, and stay those of the first batch: the shape's
    key holds the relation."""

    edges: EdgeList
    dynamic_relations: bool  # relation ids are copied in too

    @classmethod
    def like(cls, batch: EdgeList, device: torch.device, dynamic_relations: bool) -> BatchSlots:
        def slot(values: torch.Tensor) -> torch.Tensor:
            return torch.empty(values.shape, dtype=values.dtype, device=device)

        rel = slot(batch.rel) if dynamic_relations else batch.rel.clone()
        return cls(EdgeList(rel=rel, lhs=EntityList.from_ids(slot(batch.lhs.ids)),
                            rhs=EntityList.from_ids(slot(batch.rhs.ids))), dynamic_relations)

    def fill(self, batch: EdgeList) -> EdgeList:
        """Copy `batch` (a host batch, in pinned memory for a GPU) in; the slots' edges."""
        if self.dynamic_relations:
            self.edges.rel.copy_(batch.rel, non_blocking=True)
        self.edges.lhs.ids.copy_(batch.lhs.ids, non_blocking=True)
        self.edges.rhs.ids.copy_(batch.rhs.ids, non_blocking=True)
        return self.edges


@dataclass
class Shape:
    """What a recorder keeps for one batch shape."""

    slots: BatchSlots
    # The recorded step: a CUDA graph's replay (on the CPU, the step again).
    replays: Callable[[], None] | None = None
    seen: int = 0


class StepRecorder:
    """Runs a chunk's steps on `device`, recording each full-size shape once and replaying it;
    negatives come from `generator` (on a GPU, the device's generator, which the graphs
    advance as the plain steps do)."""

    def __init__(self, device: torch.device, generator: torch.Generator,
                 dynamic_relations: bool, record: bool) -> None:
        self.device = device
        self.generator = generator
        self.dynamic_relations = dynamic_relations
        self.record = record
        self.sums = StepSums(device)
        self.shapes: dict[Hashable, Shape] = {}
        self.recorded = 0  # shapes recorded (on the CPU: replayed by stepping again)
        self.failure: str | None = None  # why recording was given up, if it was
        on_gpu = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if on_gpu and record else None
        self.pool = torch.cuda.graph_pool_handle() if on_gpu and record else None

    def run(self, key: Hashable, batch: EdgeList, step: Step) -> None:
        """Train `batch` by `step` (which must use only its argument's edges and the chunk's
        tables); batches of one `key` must have one shape and use the same tables."""
        if batch.lhs.is_featurized or batch.rhs.is_featurized:  # ragged: no fixed shape
            moved = batch.to(self.device, non_blocking=True)
            if not self.dynamic_relations:  # the model reads it on the host
                moved = EdgeList(rel=batch.rel, lhs=moved.lhs, rhs=moved.rhs)
            self.sums.add(step(moved))
            return
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = Shape(BatchSlots.like(batch, self.device,
                                                             self.dynamic_relations))
        edges = shape.slots.fill(batch)
        shape.seen += 1
        if shape.replays is None and shape.seen >= 2 and self.record:
            shape.replays = self._recorded(shape, step)
            self.recorded += shape.replays is not None
        if shape.replays is not None:
            shape.replays()
        else:
            self._warm_up(edges, step)

    def _warm_up(self, edges: EdgeList, step: Step) -> None:
        """A plain step; on a GPU that may record later, on the stream that records, so that
        what it sets up lazily is set up there."""
        if self.stream is None:
            self.sums.add(step(edges))
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            self.sums.add(step(edges))
        current.wait_stream(self.stream)

    def _recorded(self, shape: Shape, step: Step) -> Callable[[], None] | None:
        edges = shape.slots.edges
        if self.stream is None:
            return lambda: self.sums.add(step(edges))
        if self.failure is not None:
            return None
        graph = torch.cuda.CUDAGraph()
        try:
            if self.generator.device.type == "cuda":
                graph.register_generator_state(self.generator)
            current = torch.cuda.current_stream(self.device)
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                # Only this thread's calls are checked: other threads (partition readers,
                # other devices' trainers) may allocate meanwhile.
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    self.sums.add(step(edges))
                finally:
                    graph.capture_end()
            current.wait_stream(self.stream)
        except RuntimeError as error:  # a step the device cannot record: train it plainly
            self.failure = f"{type(error).__name__}: {error}"
            logger.warning("training steps are not recorded on %s (%s); they run one "
                           "operation at a time", self.device, self.failure)
            return None
        return graph.replay  # which holds the graph


def worth_recording(num_edges: int, batch_size: int) -> bool:
    """Whether a chunk of `num_edges` has enough full batches for recordings to pay (on the
    CPU the recorder's path runs for the same chunks, so that tests cover it)."""
    return num_edges >= MIN_BATCHES_TO_RECORD * batch_size

