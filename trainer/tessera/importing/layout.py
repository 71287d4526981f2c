"""Where every name ends up once all are known: entity partitions and offsets, relation ids.

Entities below `entity_min_count` occurrences (as either side of any edge) and, with dynamic
relations, relation types below `relation_type_min_count` get partition / id -1, which makes
the second pass drop their edges. Dynamic relation types are numbered in name order, so the
numbering does not depend on the order of the input. An import that extends a dictionary keeps
the known entities and relation types where they are (never dropped) and places only the new
ones (`growth`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .existing import KnownNames
from .growth import grown_placement
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
    entities_new: dict[str, int]  # entities kept that the extended dictionary did not know
    relation_ids: np.ndarray | None  # final id of each relation dictionary id (-1: dropped)
    relation_names: list[str]  # relation types in the buckets, by id
    relation_types_dropped: int
    relation_types_new: int  # relation types kept that the extended dictionary did not know

    def partition_members(self, entity_type: str, part: int) -> np.ndarray:
        """Entity dictionary ids of one partition, by offset."""
        return self.members[entity_type][self.placements[entity_type].members(part)]


def lay_out(plan: ImportPlan, tables: NameTables) -> Layout:
    """Drop what is too rare, place every entity type's entities, number relation types."""
    entities = tables.entities
    known = _known_mask(len(entities), tables.known)
    kept = (entities.counts >= plan.options.entity_min_count) & ~known
    hashes = entities.stable_hashes()
    entity_places = np.full(len(entities), -1, dtype=np.int64)
    placements, members, dropped, new = {}, {}, {}, {}
    for kind, entity_type in enumerate(plan.entity_types):
        of_type = entities.kinds == kind
        new_members = np.flatnonzero(of_type & kept)
        dropped[entity_type] = int(np.count_nonzero(of_type & ~kept & ~known))
        # Each type gets its own shuffle, reproducible from the seed.
        seed = (plan.options.seed, kind)
        if tables.known is None:
            placement = place_entities(hashes[new_members], plan.type_partitions[kind],
                                       plan.options.partitioning, seed=seed)
            members[entity_type] = new_members
        else:
            placement = grown_placement(tables.known.entity_counts[entity_type],
                                        hashes[new_members], plan.options.partitioning, seed)
            members[entity_type] = np.concatenate([tables.known.entity_ids[entity_type],
                                                   new_members])
        new[entity_type] = len(new_members)
        parts, offsets = placement.partitions_and_offsets()
        entity_places[members[entity_type]] = parts << PLACE_SHIFT | offsets
        placements[entity_type] = placement
    relation_ids, relation_names, relations_dropped, relations_new = _relation_layout(
        plan, tables)
    return Layout(entity_places, hashes, placements, members, dropped, new, relation_ids,
                  relation_names, relations_dropped, relations_new)


def _known_mask(size: int, known: KnownNames | None) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    if known is not None:
        for ids in known.entity_ids.values():
            mask[ids] = True
    return mask


def _relation_layout(plan: ImportPlan,
                     tables: NameTables) -> tuple[np.ndarray | None, list[str], int, int]:
    if tables.relations is None:
        return None, plan.relation_names, 0, 0
    relations = tables.relations
    names = relations.names().to_pylist()
    known = [] if tables.known is None or tables.known.relation_ids is None \
        else tables.known.relation_ids.tolist()
    known_set = set(known)
    new = [i for i in range(len(names)) if i not in known_set
           and relations.counts[i] >= plan.options.relation_type_min_count]
    new.sort(key=names.__getitem__)
    kept = known + new
    relation_ids = np.full(len(names), -1, dtype=np.int64)
    relation_ids[np.array(kept, dtype=np.int64)] = np.arange(len(kept))
    return (relation_ids, [names[i] for i in kept], len(names) - len(kept), len(new))
