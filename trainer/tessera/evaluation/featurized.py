"""Featurized entity types in filtered evaluation: which entity each edge names, and the table
of every entity's embedding to rank against.

An edge file's featurized side holds the edge's features, not an entity; `tessera import`
also writes each edge's entity index (in `entity_features_{type}.h5`) as `{side}d_entities`.
That index is trusted only if the edge's features are exactly that entity's, and a bucket
without it (written by another tool) is refused instead of ranked wrongly.
"""

from __future__ import annotations

import numpy as np
import torch

from ..config import ConfigSchema
from ..data.graph_data import GraphData
from ..edgelist import EntityList
from ..errors import BadInputError, FormatError
from ..model.featurized_entities import featurized_entity_embeddings
from ..storage.edges import bucket_file, read_featurized_entity_ids
from ..storage.entity_features import EntityFeatures, entity_features_file, read_entity_features
from ..vocabulary import Bucket

_HINT = "; import the edges with `tessera import --features TYPE=FILE` to evaluate them filtered"


def used_featurized_types(config: ConfigSchema) -> list[str]:
    return sorted({side for relation in config.relations for side in (relation.lhs, relation.rhs)
                   if config.entities[side].featurized})


def read_featurized_entities(data: GraphData) -> dict[str, EntityFeatures]:
    """The entities of each featurized type the relations use."""
    return {entity_type: read_entity_features(data.entity_dir, entity_type,
                                              data.entity_counts[entity_type][0])
            for entity_type in used_featurized_types(data.config)}


def entity_tables(config: ConfigSchema, tables: dict[str, torch.Tensor],
                  entities: dict[str, EntityFeatures]) -> dict[str, torch.Tensor]:
    """`tables` with each featurized type's feature rows replaced by its entities' embeddings."""
    return {entity_type: (featurized_entity_embeddings(table, entities[entity_type].offsets,
                                                       entities[entity_type].data,
                                                       config.max_norm)
                          if entity_type in entities else table)
            for entity_type, table in tables.items()}


def featurized_side_ids(data: GraphData, edge_path_idx: int, bucket: Bucket, side: str,
                        edges: EntityList, entities: dict[str, EntityFeatures]) -> np.ndarray:
    """The entity index of each edge on a featurized side, checked against its features."""
    directory = data.edge_dirs[edge_path_idx]
    url = directory.url_of(bucket_file(bucket.lhs, bucket.rhs))
    types = sorted(set(data.relation_types(side)))
    if len(types) != 1 or types[0] not in entities:
        raise BadInputError(f"{url}: the {side} side is featurized, but its relations name "
                            f"the entity types {', '.join(types)}; filtered evaluation needs "
                            f"one featurized type there")
    known = entities[types[0]]
    ids = read_featurized_entity_ids(directory, bucket.lhs, bucket.rhs, side)
    if ids is None:
        raise FormatError(url, f"the featurized {side} side has no '{side}d_entities' (which "
                               f"entity each edge names){_HINT}")
    assert edges.offsets is not None and edges.data is not None
    row = _first_mismatch(ids, edges.offsets.numpy(), edges.data.numpy(), known)
    if row is not None:
        raise FormatError(url, f"{side} row {row} (id {ids[row]}) does not name an entity of "
                               f"'{types[0]}' with that row's features "
                               f"({entity_features_file(types[0])}){_HINT}")
    return ids


def _first_mismatch(ids: np.ndarray, offsets: np.ndarray, data: np.ndarray,
                    known: EntityFeatures) -> int | None:
    """The first edge whose id is no entity, or an entity with other features; else None."""
    out_of_range = np.flatnonzero((ids < 0) | (ids >= len(known)))
    if len(out_of_range):
        return int(out_of_range[0])
    expected_offsets, expected = known.features_of(ids)
    lengths_differ = np.flatnonzero(np.diff(expected_offsets) != np.diff(offsets))
    if len(lengths_differ):
        return int(lengths_differ[0])
    differing = np.flatnonzero(expected != data)
    if len(differing):
        return int(np.searchsorted(offsets, differing[0], side="right")) - 1
    return None
