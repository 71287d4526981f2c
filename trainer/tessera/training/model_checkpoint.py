"""Saving and loading the model (operators, global embeddings) and its optimizer.

Parameters are stored under PBG's public names with their state-dict keys, so a model file
written here loads in PBG and the other way round.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..errors import BadInputError, FormatError
from ..model import EmbeddingModel
from ..storage.checkpoint import CheckpointStore, model_file
from .optimizers import DenseAdagrad, load_optimizer_state


def save_model(store: CheckpointStore, version: int, model: EmbeddingModel,
               optimizer: DenseAdagrad | None, metadata: Mapping[str, Any]) -> None:
    names = model.public_parameter_names()
    params = {names[key]: (key, tensor.detach().numpy().copy())
              for key, tensor in model.state_dict().items()}
    blob = None
    if optimizer is not None:
        buffer = io.BytesIO()
        torch.save(optimizer.state_dict(), buffer)
        blob = buffer.getvalue()
    store.write_model(version, params, blob, metadata)


def load_model(store: CheckpointStore, version: int | None, model: EmbeddingModel,
               optimizer: DenseAdagrad | None) -> None:
    """Load parameters (and optimizer state when present and compatible) in place."""
    params, blob = store.read_model(version)
    state = {key: torch.from_numpy(np.asarray(array)) for key, array in params.values()}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    mismatched = sorted(k for k in expected if k in state and state[k].shape != expected[k].shape)
    if missing or mismatched:
        raise FormatError(f"{store.directory.url}/model",
                          f"the model file does not fit this config (missing: {missing}, "
                          f"wrong shape: {mismatched}); check relations, operators and "
                          "dimension, or start without init_path")
    model.load_state_dict({key: state[key] for key in expected})
    if optimizer is not None and blob is not None:
        saved = load_optimizer_state(blob, store.directory.url_of(
            model_file(store.current_version() if version is None else version)))
        try:
            optimizer.load_state_dict(saved)
        except BadInputError:
            pass  # optimizer state of another model layout: start its accumulators afresh
