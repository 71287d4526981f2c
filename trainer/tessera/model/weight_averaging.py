"""Weight averaging: a run ends with the mean of its checkpoints of its last epochs instead of
the last one alone (stochastic weight averaging, Izmailov et al. 2018), a model of wider
optima and less luck: on Nations, ComplEx gains about 0.01 of filtered MRR and its seeds lie
closer together (docs/benchmarks.md#weight-averaging).

The mean is taken where checkpoints are written, so every way of training (Hogwild workers,
a GPU, a distributed job) averages the same: each checkpoint of the window folds its values
into the running mean that the previous version's files hold, and keeps the result beside its
own (`Averaged`). A run that resumes in the window carries the mean on from there. Once the
run's last checkpoint is committed, one version more holds the means in place of the trained
values (`training.averaged_model`), so that every reader (`tessera eval`, `export`,
`neighbors`, PBG) reads the averaged model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import ConfigSchema
from ..storage.checkpoint import Averaged, CheckpointStore, ModelParameters


@dataclass(frozen=True)
class Window:
    """Where a checkpoint stands in the averaged epochs."""

    first_epoch: int  # 0-based
    ends_run: bool  # the run's last checkpoint: the averaged version follows it


def first_averaged_epoch(config: ConfigSchema, num_epochs: int) -> int | None:
    """The first epoch (0-based) whose checkpoints are averaged (None: none are): the last
    `weight_averaging` share of the run's epochs, at least its last."""
    if not config.weight_averaging:
        return None
    return num_epochs - max(1, round(config.weight_averaging * num_epochs))


def window_of(config: ConfigSchema, metadata: Mapping[str, Any]) -> Window | None:
    """The averaging window of the checkpoint whose iteration `metadata` is given (None: it
    is not averaged)."""
    if not config.weight_averaging:
        return None
    num_epochs = int(metadata["iteration/num_epochs"])
    epoch = int(metadata["iteration/epoch_idx"])
    first = first_averaged_epoch(config, num_epochs)
    if first is None or epoch < first:
        return None
    ends_run = (epoch == num_epochs - 1
                and _is_last(metadata, "edge_path_idx", "num_edge_paths")
                and _is_last(metadata, "edge_chunk_idx", "num_edge_chunks"))
    return Window(first, ends_run)


def _is_last(metadata: Mapping[str, Any], index: str, count: str) -> bool:
    return int(metadata[f"iteration/{index}"]) == int(metadata[f"iteration/{count}"]) - 1


def fold_embeddings(store: CheckpointStore, window: Window, version: int, entity: str,
                    part: int, values: np.ndarray) -> Averaged[np.ndarray]:
    """The running mean that a partition's file of `version` keeps beside `values`."""
    previous = store.read_averaged_embeddings(entity, part, version - 1) if version > 1 else None
    count = _carried_count(previous, window)
    if previous is not None and count and previous.values.shape == values.shape:
        mean = _folded(previous.values, values, count)
    else:
        count, mean = 0, np.array(values, dtype=np.float32)
    return Averaged(mean, window.first_epoch, count + 1)


def fold_model(store: CheckpointStore, window: Window, version: int,
               params: ModelParameters) -> Averaged[ModelParameters]:
    """The running mean that the model file of `version` keeps beside `params`."""
    previous = store.read_averaged_model(version - 1) if version > 1 else None
    count = _carried_count(previous, window)
    if previous is not None and count and all(
            name in previous.values and previous.values[name][1].shape == np.shape(values)
            for name, (_, values) in params.items()):
        mean = {name: (key, _folded(previous.values[name][1], values, count))
                for name, (key, values) in params.items()}
    else:
        count = 0
        mean = {name: (key, np.array(values)) for name, (key, values) in params.items()}
    return Averaged(mean, window.first_epoch, count + 1)


def _carried_count(previous: Averaged[Any] | None, window: Window) -> int:
    """How many checkpoints the previous version's mean holds for this window (0: it holds
    none, or those of another window, as after num_epochs changed)."""
    if previous is None or previous.first_epoch != window.first_epoch:
        return 0
    return previous.count


# Elements folded at a time: the temporaries stay a few MB, however large the table.
FOLD_BLOCK = 1 << 20


def _folded(mean: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """The mean of `count` checkpoints' values and one more's, folded into `mean` (read from
    the previous version for this alone) a block at a time: no copy of a partition more."""
    if not (mean.flags.c_contiguous and mean.flags.writeable):
        mean = np.array(mean, order="C")
    flat_mean = mean.reshape(-1)  # a view: the blocks are folded in place
    flat_values = np.asarray(values).reshape(-1)
    for start in range(0, flat_mean.size, FOLD_BLOCK):
        block = flat_mean[start:start + FOLD_BLOCK]
        block += (flat_values[start:start + FOLD_BLOCK].astype(mean.dtype) - block) / (count + 1)
    return mean
