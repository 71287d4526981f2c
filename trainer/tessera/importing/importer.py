"""`tessera import`: edge lists in, entity files and partitioned edge buckets out.

Two passes, PBG's importer made vectorised and streaming: the first reads every input once
and builds the name dictionaries (spilling each edge as ids to a local file), then entities
are laid out in partitions, then the second pass writes the buckets of each input from the
spilled ids while a thread stages the entity files, featurized entity types are turned into
bags of features (`featurized`), and last every file is published at once (`publication`):
buckets and entity files are staged aside, committed together, then moved into place. Each
pass runs as a pipeline on two cores: one thread reads and hashes (or places and sorts) the
next block while another encodes (or writes) the current one. Memory holds the dictionaries
and a few blocks, never the edge list. If anything fails before the commit, every file this
import staged is deleted and nothing in place has changed.

An import holds a lease on `entity_path` (`lease`) from before it reads anything there. A
dictionary already in it is extended (`existing`): known entities and relation types keep
their ids, new ones are appended.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence

from ..config.schema import ConfigSchema
from ..errors import BadInputError
from ..progress import Reporter
from .bucket_pass import num_rounds, write_buckets
from .dictionary import FingerprintCollision
from .dictionary_update import DictionaryUpdate
from .existing import ExistingDictionary, read_existing_dictionary
from .features_input import FeatureTable
from .featurized import featurize, featurized_entity_indices, read_feature_tables
from .layout import Layout, lay_out
from .lease import entity_path_lease
from .name_pass import NameTables, read_names
from .options import ImportOptions
from .plan import ImportPlan, plan_import
from .publication import Publication, complete_publication
from .read_progress import reading_unit
from .readers import input_size
from .spill import EdgeIdSpill
from .summary import ImportSummary, InputSummary

# Salts tried before giving up: each retry follows a fingerprint collision between two
# different names, which is already unlikely once (about n^2 / 2^64 for n names).
MAX_SALTS = 4


def import_edges(config: ConfigSchema, inputs: Sequence[str], options: ImportOptions,
                 reporter: Reporter) -> ImportSummary:
    """Import one edge list per entry of `config.edge_paths`; see the module docstring."""
    started = time.monotonic()
    plan = plan_import(config, inputs, options)
    feature_tables = read_feature_tables(plan)
    with entity_path_lease(plan.entity_dir, reporter):
        if complete_publication(plan.entity_dir):
            reporter.event("import: finished publishing the files of a stopped import")
        return _import(plan, feature_tables, reporter, started)


def _import(plan: ImportPlan, feature_tables: dict[str, FeatureTable], reporter: Reporter,
            started: float) -> ImportSummary:
    existing = read_existing_dictionary(plan)
    if existing is not None and feature_tables:
        raise BadInputError("--features: a featurized import cannot extend the dictionary "
                            f"in {plan.entity_dir.url} (its entity files name features); "
                            "import into a new entity_path, or pass --replace-dictionary")
    publication = Publication(plan.entity_dir, [source.edge_dir for source in plan.inputs])
    update = DictionaryUpdate(plan.entity_dir, _known_counts(plan, existing),
                              _known_relations(existing), publication)
    try:
        publication.begin()
        with EdgeIdSpill(plan.options.work_dir) as spill:
            tables = _read_names(plan, spill, reporter, existing)
            edges_read = tables.edges_read
            layout = lay_out(plan, tables)
            entity_indices = featurized_entity_indices(plan, feature_tables, tables, layout)
            reporter.event("import: entities placed", entities={
                entity_type: sum(layout.placements[entity_type].counts)
                for entity_type in plan.entity_types}, new_entities=layout.entities_new)
            # The entity files are staged by a thread of their own while the buckets are
            # written: the two share nothing but the layout, which neither changes.
            with concurrent.futures.ThreadPoolExecutor(1) as staging:
                staged = staging.submit(_stage_entity_files, plan, tables, layout, update)
                del tables  # the staging thread frees the names when it is done
                written = _write_all_buckets(plan, spill, layout, publication, reporter)
                staged.result()
        featurize(plan, feature_tables, entity_indices, update, publication, reporter)
        publication.commit()
    except BaseException:
        publication.discard()
        raise
    publication.finish()
    summary = _summary(plan, edges_read, layout, written, time.monotonic() - started,
                       update.extends)
    reporter.event("import done", edges_read=summary.edges_read,
                   edges_written=summary.edges_written, edges_dropped=summary.edges_dropped,
                   dictionary="extended" if summary.dictionary_extended else "new",
                   new_entities=sum(summary.entities_new.values()),
                   new_relation_types=summary.relation_types_new,
                   seconds=round(summary.seconds, 2),
                   edges_per_s=round(summary.edges_per_second, 1))
    return summary


def _known_counts(plan: ImportPlan,
                  existing: ExistingDictionary | None) -> dict[str, list[int]] | None:
    if existing is None:
        return None
    return existing.entity_counts


def _known_relations(existing: ExistingDictionary | None) -> int | None:
    if existing is None or existing.relation_names is None:
        return None
    return len(existing.relation_names)


def _read_names(plan: ImportPlan, spill: EdgeIdSpill, reporter: Reporter,
                existing: ExistingDictionary | None) -> NameTables:
    sizes = [input_size(source.url, plan.storage_options) for source in plan.inputs]
    unit, total = reading_unit(sizes)
    for salt in range(MAX_SALTS):
        try:
            with reporter.task("import: reading", total=total, unit=unit) as task:
                return read_names(plan, spill, task, salt, existing, sizes)
        except FingerprintCollision:
            spill.clear()
            reporter.event("import: two names share a fingerprint; reading again",
                           salt=salt + 1)
    raise RuntimeError(f"names kept colliding under {MAX_SALTS} fingerprint salts")


def _stage_entity_files(plan: ImportPlan, tables: NameTables, layout: Layout,
                        update: DictionaryUpdate) -> None:
    for kind, entity_type in enumerate(plan.entity_types):
        for part in range(plan.type_partitions[kind]):
            members = layout.partition_members(entity_type, part)
            names = tables.entities.names(members).to_pylist()
            update.stage_partition(entity_type, part, names)
    if plan.dynamic_relations:
        update.stage_relations(layout.relation_names)


def _write_all_buckets(plan: ImportPlan, spill: EdgeIdSpill, layout: Layout,
                       publication: Publication, reporter: Reporter) -> list[int]:
    rounds = num_rounds(*plan.grid)
    total = rounds * sum(spill.num_edges(index) for index in range(len(plan.inputs)))
    with reporter.task("import: writing buckets", total=total, unit="edges") as task:
        return [write_buckets(plan, index, spill, layout, publication, task)
                for index in range(len(plan.inputs))]


def _summary(plan: ImportPlan, edges_read: list[int], layout: Layout, written: list[int],
             seconds: float, extended: bool) -> ImportSummary:
    return ImportSummary(
        inputs=[InputSummary(source.url, source.edge_dir.url, read, wrote)
                for source, read, wrote in zip(plan.inputs, edges_read, written)],
        entity_counts={entity_type: layout.placements[entity_type].counts
                       for entity_type in plan.entity_types},
        entities_dropped=layout.entities_dropped,
        relation_types=len(layout.relation_names),
        relation_types_dropped=layout.relation_types_dropped,
        seconds=seconds,
        dictionary_extended=extended,
        entities_new=layout.entities_new,
        relation_types_new=layout.relation_types_new,
    )
