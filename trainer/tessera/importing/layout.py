"""Where every name ends up once all are known: entity partitions and offsets, relation ids.

Entities below `entity_min_count` occurrences (as either side of any edge) and, with dynamic
relations, relation types below `relation_type_min_count` get partition / id -1, which makes
the second pass drop their edges. Dynamic relation types are numbered in name order, so the
numbering does not depend on the order of the input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .name_pass import NameTables
from .partitioning import Placement, place_entities
from .plan import ImportPlan

# An entity's place is one int64, partition << PLACE_SHIFT | offset (-1: dropped), so that
# placing an edge side costs one gather instead of two.
PLACE_SHIFT = 40
OFFSET_MASK = (1 << PLACE_SHIFT) - 1


@dataclass(frozen=True)
class Layout:
    """Where each entity and relation type goes: what the second pass and the summary need."""

    entity_places: np.ndarray  # place of each entity dictionary id (see PLACE_SHIFT)
    entity_hashes: np.ndarray  # stable hash of each entity dictionary id's name
    placements: dict[str, Placement]  # per entity type, over `members[type]`
    members: dict[str, np.ndarray]  # entity dictionary ids kept, per type
    entities_dropped: dict[str, int]
    relation_ids: np.ndarray | None  # final id of each relation dictionary id (-1: dropped)
    relation_names: list[str]  # relation types in the buckets, by id
    relation_types_dropped: int

    def partition_members(self, entity_type: str, part: int) -> np.ndarray:
        """Entity dictionary ids of one partition, by offset."""
        return self.members[entity_type][self.placements[entity_type].members(part)]


def lay_out(plan: ImportPlan, tables: NameTables) -> Layout:
    """Drop what is too rare, place every entity type's entities, number relation types."""
    entities = tables.entities
    kept = entities.counts >= plan.options.entity_min_count
    hashes = entities.stable_hashes()
    entity_places = np.full(len(entities), -1, dtype=np.int64)
    placements, members, dropped = {}, {}, {}
    for kind, entity_type in enumerate(plan.entity_types):
        of_type = entities.kinds == kind
        members[entity_type] = np.flatnonzero(of_type & kept)
        dropped[entity_type] = int(np.count_nonzero(of_type & ~kept))
        # Each type gets its own shuffle, reproducible from the seed.
        placement = place_entities(hashes[members[entity_type]], plan.type_partitions[kind],
                                   plan.options.partitioning, seed=(plan.options.seed, kind))
        parts, offsets = placement.partitions_and_offsets()
        entity_places[members[entity_type]] = parts << PLACE_SHIFT | offsets
        placements[entity_type] = placement
    relation_ids, relation_names, relations_dropped = _relation_layout(plan, tables)
    return Layout(entity_places, hashes, placements, members, dropped, relation_ids,
                  relation_names, relations_dropped)


def _relation_layout(plan: ImportPlan,
                     tables: NameTables) -> tuple[np.ndarray | None, list[str], int]:
    if tables.relations is None:
        return None, plan.relation_names, 0
    relations = tables.relations
    names = relations.names().to_pylist()
    kept = [i for i in range(len(names))
            if relations.counts[i] >= plan.options.relation_type_min_count]
    kept.sort(key=names.__getitem__)
    relation_ids = np.full(len(names), -1, dtype=np.int64)
    relation_ids[np.array(kept, dtype=np.int64)] = np.arange(len(kept))
    return relation_ids, [names[i] for i in kept], len(names) - len(kept)
