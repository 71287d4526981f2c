"""Reading a featurized type's features file: one `entity<TAB>feature` pair per row.

A long table (one row per pair, an entity on as many rows as it has features) reads the same
way from TSV, CSV and Parquet, with the edge-list readers. Entities and features are numbered
in order of first appearance; an entity's features keep the order of their rows, and a pair
given twice counts twice in the entity's mean, as it would in PBG's bags of features.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadInputError
from ..storage.entity_features import EntityFeatures
from .edge_blocks import Columns
from .options import ImportOptions
from .readers import detect_format, read_edge_blocks


@dataclass(frozen=True)
class FeatureTable:
    """A featurized type's entities with their features, and the feature names by id."""

    entities: EntityFeatures
    feature_names: list[str]


def read_feature_table(url: str, options: ImportOptions,
                       storage_options: Mapping[str, Any]) -> FeatureTable:
    """Read the whole file (its size follows the type's entities, not the edge list)."""
    entity_columns, feature_columns = [], []
    for block in read_edge_blocks(url, input_format=detect_format(url, options.input_format),
                                  columns=Columns(0, 1), block_edges=options.block_edges,
                                  delimiter=options.delimiter, skip_rows=options.skip_rows,
                                  storage_options=storage_options):
        entity_columns.append(block.lhs)
        feature_columns.append(block.rhs)
    if not entity_columns or not sum(len(column) for column in entity_columns):
        raise BadInputError(f"{url}: no entity-feature pairs; give one 'entity<TAB>feature' "
                            "row per feature of each entity")
    entities = pc.dictionary_encode(pa.concat_arrays(entity_columns))
    features = pc.dictionary_encode(pa.concat_arrays(feature_columns))
    entity_ids = entities.indices.to_numpy().astype(np.int64)
    order = np.argsort(entity_ids, kind="stable")
    offsets = np.zeros(len(entities.dictionary) + 1, dtype=np.int64)
    np.cumsum(np.bincount(entity_ids, minlength=len(entities.dictionary)), out=offsets[1:])
    data = features.indices.to_numpy().astype(np.int64)[order]
    return FeatureTable(EntityFeatures(entities.dictionary.to_pylist(), offsets, data),
                        features.dictionary.to_pylist())
