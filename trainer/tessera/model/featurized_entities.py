"""Whole-type embeddings of featurized entities, for ranking against all of them and export.

Training never needs them (a batch averages the features of its own edges); evaluation and
export do. An entity's embedding is computed as the model computes it in a batch, PBG's
`FeaturizedEmbedding`: the mean of its features' rows, each row renormed to `max_norm` first
when that is set (`embedding_bag` with `max_norm`). The global embedding is the model's to add.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .rows import renorm_rows

# Features gathered at a time, so that a type with many entities needs little extra memory.
BLOCK_FEATURES = 2**20


def featurized_entity_embeddings(feature_rows: torch.Tensor, offsets: np.ndarray,
                                 data: np.ndarray, max_norm: float | None) -> torch.Tensor:
    """[len(offsets) - 1, dim]: entity i is the mean of rows data[offsets[i]:offsets[i + 1]]."""
    num_entities = len(offsets) - 1
    result = feature_rows.new_zeros((num_entities, feature_rows.shape[1]))
    first = 0
    while first < num_entities:
        last = int(np.searchsorted(offsets, offsets[first] + BLOCK_FEATURES, side="right")) - 1
        last = min(max(last, first + 1), num_entities)
        start, stop = int(offsets[first]), int(offsets[last])
        rows = feature_rows[torch.from_numpy(data[start:stop])]
        if max_norm is not None:
            rows = renorm_rows(rows, max_norm)
        bags = torch.from_numpy(offsets[first:last] - start)
        result[first:last] = F.embedding_bag(torch.arange(stop - start), rows, bags, mode="mean")
        first = last
    return result
