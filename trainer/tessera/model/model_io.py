"""Saving and loading the model (operators, global embeddings) and its optimizer, and reading
the optimizer states checkpoint files hold (the model's, and each partition's row state).

Parameters are stored under PBG's public names with their state-dict keys, so a model file
written here loads in PBG and the other way round. A model from `init_path` trained before new
dynamic relation types were imported (appended after the known ones) has fewer rows in its
relation operators: those start the first rows, the new ones start as in a fresh model.
"""

from __future__ import annotations

import copy
import functools
import io
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, BinaryIO, Protocol

import numpy as np
import torch

from ..errors import BadInputError, FormatError
from ..storage.checkpoint import CheckpointStore, model_file
from .embedding_model import EmbeddingModel
from .weight_averaging import fold_model, window_of

# The config key a model file was found through: it decides what to advise when the file does
# not fit the config.
CHECKPOINT_PATH = "checkpoint_path"
INIT_PATH = "init_path"
_REMEDIES = {
    CHECKPOINT_PATH: "this checkpoint was trained with another config: restore that config "
                     "(the checkpoint's config.json holds it), or set a new checkpoint_path "
                     "to train this config from scratch",
    INIT_PATH: "init_path holds a model of another config: make relations, operators and "
               "dimensions match it, or drop init_path to start from scratch",
}
# Differences listed in the message before the rest are only counted.
_DIFFERENCES_SHOWN = 3


class ModelOptimizer(Protocol):
    """What is saved of the model's optimizer (training's DenseAdagrad): its state dict."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def save_model(store: CheckpointStore, version: int, model: EmbeddingModel,
               optimizer: ModelOptimizer | None, metadata: Mapping[str, Any]) -> None:
    model_writer(model, optimizer, copied=False)(store, version, metadata)


def model_writer(model: EmbeddingModel, optimizer: ModelOptimizer | None, *,
                 copied: bool) -> Callable[[CheckpointStore, int, Mapping[str, Any]], None]:
    """What writes the model's file into a version: its parameters as they are now, and the
    optimizer's state as it is now if `copied` (a checkpoint written in the background while
    training goes on), else as it is when written."""
    names = model.public_parameter_names()
    params = {names[key]: (key, tensor.detach().numpy().copy())
              for key, tensor in model.state_dict().items()}
    state = None if optimizer is None else optimizer.state_dict()
    saved_state = None if state is None \
        else functools.partial(torch.save, copy.deepcopy(state) if copied else state)

    def write(store: CheckpointStore, version: int, metadata: Mapping[str, Any]) -> None:
        window = window_of(model.config, metadata)
        averaged = None if window is None else fold_model(store, window, version, params)
        store.write_model(version, params, saved_state, metadata, averaged)
    return write


def load_model(store: CheckpointStore, version: int | None, model: EmbeddingModel,
               optimizer: ModelOptimizer | None, *, origin: str = CHECKPOINT_PATH) -> None:
    """Load parameters (and optimizer state when present and compatible) in place.

    `origin` is the config key `store` comes from (CHECKPOINT_PATH or INIT_PATH).
    """
    if version is None:  # resolved once: the same version is read and named in messages
        version = store.current_version()
    url = store.directory.url_of(model_file(version))
    params, blob = store.read_model(version)
    state = {key: torch.from_numpy(np.asarray(array)) for key, array in params.values()}
    expected = model.state_dict()
    grown = _grown_relations(model, expected, state) if origin == INIT_PATH else set()
    for key in grown:
        state[key] = torch.cat([state[key], expected[key][len(state[key]):]])
    if grown:  # compared as grown
        params = {public: (key, state[key].numpy() if key in grown else array)
                  for public, (key, array) in params.items()}
    differences = _differences(model.public_parameter_names(), expected, params)
    if differences:
        shown = "; ".join(differences[:_DIFFERENCES_SHOWN])
        more = len(differences) - _DIFFERENCES_SHOWN
        raise FormatError(url,
                          f"does not fit this config: {shown}"
                          f"{f' (and {more} more)' if more > 0 else ''}; {_REMEDIES[origin]}")
    model.load_state_dict({key: state[key] for key in expected})
    if optimizer is not None and blob is not None:
        # Read after the parameters were checked: a file of another config says so first.
        saved = load_optimizer_state(io.BytesIO(blob), url)
        if grown:
            _grow_optimizer_state(saved, optimizer.state_dict())
        try:
            optimizer.load_state_dict(saved)
        except BadInputError:
            pass  # optimizer state of another model layout: start its accumulators afresh


def _grown_relations(model: EmbeddingModel, expected: Mapping[str, torch.Tensor],
                     state: Mapping[str, torch.Tensor]) -> set[str]:
    """Dynamic relation operators' parameters (one row per relation type) of which the file
    holds fewer rows than the model has relation types, and otherwise the same shape. None
    with reciprocal relations: the inverses' rows follow all the others, so new types would
    not simply append (nor would the rows of a model trained without inverses)."""
    if not model.config.dynamic_relations or model.config.reciprocal_relations:
        return set()
    public = model.public_parameter_names()
    return {key for key, tensor in expected.items()
            if key in state and public[key].startswith("relations/") and tensor.ndim >= 1
            and len(state[key]) < len(tensor) == model.num_relations
            and state[key].shape[1:] == tensor.shape[1:]}


def _grow_optimizer_state(saved: Any, current: dict[str, Any]) -> None:
    """Give saved accumulators of grown parameters zero rows for the new relation types."""
    for index, entry in current.get("state", {}).items():
        found = saved.get("state", {}).get(index, {}) if isinstance(saved, dict) else {}
        old, new = found.get("sum"), entry.get("sum")
        if (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.ndim >= 1
                and len(old) < len(new) and old.shape[1:] == new.shape[1:]):
            found["sum"] = torch.cat([old, torch.zeros_like(new[len(old):])])


def load_optimizer_state(file: BinaryIO, url: str) -> Any:
    """An optimizer state saved with torch.save, as a checkpoint file stores it.

    Only tensors and plain containers are accepted (weights_only), so a damaged or foreign
    blob is a bad checkpoint file, reported with its location, never code to run.
    """
    try:
        return torch.load(file, weights_only=True)
    except Exception as error:  # torch raises pickle, zip and runtime errors alike
        raise FormatError(url, f"the optimizer state (optimizer/state_dict) cannot be read "
                               f"({type(error).__name__}); restore this file from a copy, or "
                               "delete the dataset to restart the optimizer's "
                               "accumulators") from None


def _dimension_change(mismatches: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[str]:
    """One plain sentence when every mismatched shape differs only in its last axis the same
    way: the usual cause, a changed `dimension`."""
    if not mismatches or any(not file or not config or file[:-1] != config[:-1]
                             for file, config in mismatches):
        return []
    # Operators may store a share of the dimension (a complex one, half): compare ratios.
    ratios = {Fraction(file[-1], config[-1]) for file, config in mismatches if config[-1]}
    if len(ratios) != 1:
        return []
    ratio, = ratios
    in_file, in_config = mismatches[0][0][-1], mismatches[0][1][-1]
    return [f"the checkpoint was trained with another dimension ({float(ratio):g} times this "
            f"config's: its parameters' last axis is {in_file} where this config's is "
            f"{in_config})"]


def _differences(public_names: Mapping[str, str], expected: Mapping[str, torch.Tensor],
                 params: Mapping[str, tuple[str, np.ndarray]]) -> list[str]:
    """What differs between the config's parameters and the file's, by public name.

    Parameters only the file has are listed only next to real differences: alone they are
    harmless (PBG loads such files too), next to a missing one they say what replaced it.
    """
    found = {key: (public, np.shape(array)) for public, (key, array) in params.items()}
    differences = _dimension_change(
        [(found[key][1], tuple(tensor.shape)) for key, tensor in expected.items()
         if key in found and found[key][1] != tuple(tensor.shape)])
    for key, tensor in expected.items():
        shape = tuple(tensor.shape)
        if key not in found:
            differences.append(f"{public_names[key]} {shape} is not in the file")
        elif found[key][1] != shape:
            differences.append(f"{public_names[key]} has shape {found[key][1]} in the file, "
                               f"{shape} in this config")
    if differences:
        differences += [f"{public} {shape} is in the file but not in this config"
                        for key, (public, shape) in found.items() if key not in expected]
    return differences
