"""Tessera: PyTorch-BigGraph-style training of embeddings of huge multi-relation graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .querying.trained import TrainedModel

from . import mkl_dispatch  # noqa: F401  (before anything imports torch)

__version__ = "0.1.0"


def load(config: Any, **overrides: Any) -> TrainedModel:
    """Open the latest checkpoint of a config (a path, a mapping or a parsed config) for
    queries: `embedding(name)`, `neighbors(name, k)`. Keyword arguments override top-level
    config keys. Importing `tessera` stays cheap: torch is imported here, on first use."""
    from .querying.trained import load as load_trained

    return load_trained(config, **overrides)
