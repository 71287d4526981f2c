"""`tessera import`: edge lists in, entity files and partitioned edge buckets out.

Two passes, PBG's importer made vectorised and streaming: the first reads every input once
and builds the name dictionaries (spilling each edge as ids to a local file), then entities
are laid out in partitions and the entity files written, then the second pass writes the
buckets of each input from the spilled ids. Memory holds the dictionaries and one block at a
time, never the edge list. If anything fails, every file this import published is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..config.schema import ConfigSchema
from ..progress import Reporter
from .bucket_pass import num_rounds, write_buckets
from .dictionary import FingerprintCollision
from .layout import Layout, lay_out
from .name_pass import NameTables, read_names
from .options import ImportOptions
from .plan import ImportPlan, plan_import
from .read_progress import reading_unit
from .readers import input_size
from .spill import EdgeIdSpill
from .summary import ImportSummary, InputSummary
from .writer import Publication

# Salts tried before giving up: each retry follows a fingerprint collision between two
# different names, which is already unlikely once (about n^2 / 2^64 for n names).
MAX_SALTS = 4


def import_edges(config: ConfigSchema, inputs: Sequence[str], options: ImportOptions,
                 reporter: Reporter) -> ImportSummary:
    """Import one edge list per entry of `config.edge_paths`; see the module docstring."""
    started = time.monotonic()
    plan = plan_import(config, inputs, options)
    publication = Publication()
    try:
        with EdgeIdSpill(options.work_dir) as spill:
            tables = _read_names(plan, spill, reporter)
            edges_read = tables.edges_read
            layout = lay_out(plan, tables)
            _write_entity_files(plan, tables, layout, publication)
            del tables  # the names are written; the buckets need the layout only
            reporter.event("import: entities placed", entities={
                entity_type: sum(layout.placements[entity_type].counts)
                for entity_type in plan.entity_types})
            written = _write_all_buckets(plan, spill, layout, publication, reporter)
    except BaseException:
        publication.undo()
        raise
    summary = _summary(plan, edges_read, layout, written, time.monotonic() - started)
    reporter.event("import done", edges_read=summary.edges_read,
                   edges_written=summary.edges_written, edges_dropped=summary.edges_dropped,
                   seconds=round(summary.seconds, 2),
                   edges_per_s=round(summary.edges_per_second, 1))
    return summary


def _read_names(plan: ImportPlan, spill: EdgeIdSpill, reporter: Reporter) -> NameTables:
    sizes = [input_size(source.url, plan.storage_options) for source in plan.inputs]
    unit, total = reading_unit(sizes)
    for salt in range(MAX_SALTS):
        try:
            with reporter.task("import: reading", total=total, unit=unit) as task:
                return read_names(plan, spill, task, salt, sizes)
        except FingerprintCollision:
            spill.clear()
            reporter.event("import: two names share a fingerprint; reading again",
                           salt=salt + 1)
    raise RuntimeError(f"names kept colliding under {MAX_SALTS} fingerprint salts")


def _write_entity_files(plan: ImportPlan, tables: NameTables, layout: Layout,
                        publication: Publication) -> None:
    for kind, entity_type in enumerate(plan.entity_types):
        for part in range(plan.type_partitions[kind]):
            members = layout.partition_members(entity_type, part)
            names = tables.entities.names(members).to_pylist()
            publication.write_entity_partition(plan.entity_dir, entity_type, part, names)
    if plan.dynamic_relations:
        publication.write_dynamic_relations(plan.entity_dir, layout.relation_names)


def _write_all_buckets(plan: ImportPlan, spill: EdgeIdSpill, layout: Layout,
                       publication: Publication, reporter: Reporter) -> list[int]:
    rounds = num_rounds(*plan.grid)
    total = rounds * sum(spill.num_edges(index) for index in range(len(plan.inputs)))
    with reporter.task("import: writing buckets", total=total, unit="edges") as task:
        return [write_buckets(plan, index, spill, layout, publication, task)
                for index in range(len(plan.inputs))]


def _summary(plan: ImportPlan, edges_read: list[int], layout: Layout, written: list[int],
             seconds: float) -> ImportSummary:
    return ImportSummary(
        inputs=[InputSummary(source.url, source.edge_dir.url, read, wrote)
                for source, read, wrote in zip(plan.inputs, edges_read, written)],
        entity_counts={entity_type: layout.placements[entity_type].counts
                       for entity_type in plan.entity_types},
        entities_dropped=layout.entities_dropped,
        relation_types=len(layout.relation_names),
        relation_types_dropped=layout.relation_types_dropped,
        seconds=seconds,
    )
