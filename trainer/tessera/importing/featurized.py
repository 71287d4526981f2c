"""Featurized entity types, imported into PBG's featurized layout.

The edge lists name featurized entities like any other, so the two passes import them as
plain entities of one partition first; this step then turns them into bags of features, in
the files PBG reads (see its featurized-entities documentation):

- `entity_count_{type}_0.txt` counts the type's features and `entity_names_{type}_0.json`
  names them: the embedding table of a featurized type has one row per feature;
- each bucket with that type on a side gets `{side}d_offsets` / `{side}d_data`, the features
  of each edge's entity, and -1 in its `lhs`/`rhs` column (PBG's reader insists on it); and,
  for Tessera's filtered evaluation only, `{side}d_entities`: the entity's index in
  `entity_features_{type}.h5` (PBG reads only the datasets it knows).

The entities of the type are those of its features file, in its order; an entity of the edge
lists without a row there is an error, naming it, found before any file is written. Buckets
are rewritten in their staging folder (`publication`) one block of rows at a time, each
written whole again, as it was the first time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadInputError
from ..progress import Reporter
from ..storage.edges import open_bucket_writer, read_bucket, read_bucket_size
from ..storage.entity_features import entity_features_file, write_entity_features
from ..storage.fs import Directory
from .dictionary_update import DictionaryUpdate
from .features_input import FeatureTable, read_feature_table
from .layout import Layout
from .name_pass import NameTables
from .plan import ImportPlan
from .publication import Publication

REWRITE_BLOCK_EDGES = 2**18


def read_feature_tables(plan: ImportPlan) -> dict[str, FeatureTable]:
    """Every featurized type's features file, read before any output is written."""
    return {entity_type: read_feature_table(url, plan.options, plan.storage_options)
            for entity_type, url in plan.options.entity_features.items()}


def featurized_entity_indices(plan: ImportPlan, tables: dict[str, FeatureTable],
                              name_tables: NameTables,
                              layout: Layout) -> dict[str, np.ndarray]:
    """For each featurized type, each imported entity's index in its features file (by the
    entity's offset in the plain import). Called before anything is written, so that an
    entity without features fails the import with nothing replaced."""
    indices = {}
    for entity_type, table in tables.items():
        imported = name_tables.entities.names(layout.partition_members(entity_type, 0))
        found = pc.index_in(imported, value_set=pa.array(table.entities.names, pa.large_string()))
        if found.null_count:
            missing = imported[int(np.flatnonzero(found.is_null().to_numpy(False))[0])]
            raise BadInputError(
                f"{plan.options.entity_features[entity_type]}: entity '{missing}' of featurized "
                f"type '{entity_type}' is in the edge lists but has no features here; add an "
                f"'{missing}<TAB>feature' row for each of its features")
        indices[entity_type] = found.to_numpy().astype(np.int64)
    return indices


def featurize(plan: ImportPlan, tables: dict[str, FeatureTable],
              entity_indices: dict[str, np.ndarray], update: DictionaryUpdate,
              publication: Publication,
              reporter: Reporter) -> None:
    """Turn the plainly imported featurized types into PBG's featurized layout."""
    for entity_type, table in tables.items():
        _write_entity_files(plan.entity_dir, entity_type, table, update, publication)
        reporter.event("import: featurized entities", entity_type=entity_type,
                       entities=len(table.entities), features=len(table.feature_names))
    sides = _featurized_sides(plan)
    if not sides:
        return
    for source in plan.inputs:
        for lhs_part, rhs_part in plan.buckets:
            _rewrite_bucket(publication.staging_for(source.edge_dir), lhs_part, rhs_part,
                            sides, tables, entity_indices)


def _write_entity_files(directory: Directory, entity_type: str, table: FeatureTable,
                        update: DictionaryUpdate, publication: Publication) -> None:
    # The staged count and names become the features' (the rows of the type's table).
    update.stage_partition(entity_type, 0, table.feature_names)
    write_entity_features(publication.staging_for(directory), entity_type, table.entities)
    publication.staged(directory, entity_features_file(entity_type))


def _featurized_sides(plan: ImportPlan) -> dict[str, str]:
    """Side -> featurized entity type (plan checks made a side all featurized or none)."""
    sides = {}
    for side, kinds in (("lhs", plan.lhs_kinds), ("rhs", plan.rhs_kinds)):
        entity_type = plan.entity_types[int(kinds[0])]
        if entity_type in plan.options.entity_features:
            sides[side] = entity_type
    return sides


def _rewrite_bucket(directory: Directory, lhs_part: int, rhs_part: int,
                    sides: dict[str, str], tables: dict[str, FeatureTable],
                    entity_indices: dict[str, np.ndarray]) -> None:
    """Rewrite a staged bucket (it stays listed in the publication)."""
    size = read_bucket_size(directory, lhs_part, rhs_part)
    with open_bucket_writer(directory, lhs_part, rhs_part) as writer:
        for start in range(0, max(size, 1), REWRITE_BLOCK_EDGES):  # empty: empty datasets
            edges = read_bucket(directory, lhs_part, rhs_part, start,
                                start + REWRITE_BLOCK_EDGES)
            columns = {"lhs": edges.lhs, "rhs": edges.rhs}
            featurized: dict = {}
            for side, entity_type in sides.items():
                entities = entity_indices[entity_type][columns[side]]
                featurized[f"{side}_features"] = tables[entity_type].entities.features_of(
                    entities)
                featurized[f"{side}_entities"] = entities
                columns[side] = np.full(len(entities), -1, dtype=np.int64)  # as PBG requires
            writer.append(edges.rel, columns["lhs"], columns["rhs"], **featurized)
