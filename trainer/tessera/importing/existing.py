"""The entity dictionary an earlier import left in `entity_path`, which a new import extends.

An import into a folder that already holds entity files keeps every known entity where it is
(type, partition, offset) and, with dynamic relations, every known relation type's id: the
known names are put into the new import's name dictionaries first, before any input is read.
The count files say what is known: a names file holding more names than its count (left by
an older Tessera's import stopped while moving its dictionary into place) has its extra names
read as new ones. The importer reads it holding the entity_path lease, after finishing or
clearing what a stopped import left (`publication`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import BadInputError, FormatError
from ..storage import entities as entity_files
from ..storage.entities import entity_names_file
from ..storage.fs import Directory
from .dictionary import NameDictionary
from .plan import ImportPlan

_FRESH_HINT = ("import into a new entity_path, or pass --replace-dictionary to start a new "
               "dictionary there (entities may then change ids)")


@dataclass(frozen=True)
class ExistingDictionary:
    """The dictionary found in `entity_path`: its counts, read at once, and its names, read
    one partition at a time when seeding (never all of them in memory as Python strings)."""

    directory: Directory
    entity_counts: dict[str, list[int]]  # per type and partition (0: a type new to it)
    relation_names: list[str] | None  # dynamic relation types by id (dynamic relations only)

    def seed(self, entities: NameDictionary, relations: NameDictionary | None) -> KnownNames:
        """Put the known names into empty dictionaries; returns their dictionary ids."""
        entity_ids = {}
        for kind, (entity_type, counts) in enumerate(self.entity_counts.items()):
            ids = [self._seed_partition(entities, kind, entity_type, part, count)
                   for part, count in enumerate(counts) if count]
            entity_ids[entity_type] = np.concatenate([np.zeros(0, np.int64), *ids])
        relation_ids = None
        if relations is not None and self.relation_names is not None:
            relation_ids = relations.encode(pa.array(self.relation_names, pa.large_string()))
            if len(relations) != len(self.relation_names):
                raise BadInputError(f"{entity_files.DYNAMIC_RELATION_NAMES_FILE} names a "
                                    f"relation type twice; {_FRESH_HINT}")
        return KnownNames(entity_ids, self.entity_counts, relation_ids)

    def _seed_partition(self, entities: NameDictionary, kind: int, entity_type: str,
                        part: int, count: int) -> np.ndarray:
        names = _read_names(self.directory, entity_type, part, count)
        before = len(entities)
        ids = entities.encode(pa.array(names, pa.large_string()), kind)
        if len(entities) - before != count:
            raise BadInputError(
                f"{self.directory.url_of(entity_names_file(entity_type, part))}: holds an "
                "entity name twice (or one of an earlier partition of its type): the "
                f"dictionary in entity_path is damaged; {_FRESH_HINT}")
        return ids


@dataclass(frozen=True)
class KnownNames:
    """Dictionary ids of the known names, in the order of their places."""

    entity_ids: dict[str, np.ndarray]  # per type, by (partition, offset)
    entity_counts: dict[str, list[int]]  # known entities of each type per partition
    relation_ids: np.ndarray | None  # per known dynamic relation type, by relation id


def read_existing_dictionary(plan: ImportPlan) -> ExistingDictionary | None:
    """The dictionary in the plan's entity_path, or None if there is none (or it is to be
    replaced)."""
    if plan.options.replace_dictionary:
        return None
    directory = plan.entity_dir
    present = set(directory.listdir())
    found = {entity_type: _partitions_present(present, entity_type)
             for entity_type in plan.entity_types}
    if not any(found.values()):
        return None
    counts = {entity_type: _read_counts(directory, entity_type, parts, found[entity_type])
              for entity_type, parts in zip(plan.entity_types, plan.type_partitions)}
    relation_names = _read_relations(directory, present) if plan.dynamic_relations else None
    return ExistingDictionary(directory, counts, relation_names)


def _partitions_present(present: set[str], entity_type: str) -> list[int]:
    pattern = re.compile(re.escape(f"entity_count_{entity_type}_") + r"([0-9]+)\.txt")
    return sorted(int(match.group(1)) for name in present
                  if (match := pattern.fullmatch(name)))


def _read_counts(directory: Directory, entity_type: str, num_partitions: int,
                 present: list[int]) -> list[int]:
    if not present:
        return [0] * num_partitions  # a type new to the config
    if present != list(range(num_partitions)):
        raise BadInputError(
            f"{directory.url}: holds entity type {entity_type!r} in {len(present)} "
            f"partition(s) (entity_count_{entity_type}_*.txt), but the config's "
            f"entities.{entity_type}.num_partitions is {num_partitions}; an import extends "
            f"the dictionary it finds: set num_partitions to {len(present)}, or "
            f"{_FRESH_HINT}")
    return [entity_files.read_entity_count(directory, entity_type, part) for part in present]


def _read_names(directory: Directory, entity_type: str, part: int, count: int) -> list[str]:
    names = entity_files.read_entity_names(directory, entity_type, part)
    if len(names) < count:
        raise FormatError(directory.url_of(entity_names_file(entity_type, part)),
                          f"holds {len(names)} names, but the partition has {count} "
                          f"entities; {_FRESH_HINT}")
    return names[:count]


def _read_relations(directory: Directory, present: set[str]) -> list[str]:
    if entity_files.DYNAMIC_RELATION_COUNT_FILE not in present:
        raise BadInputError(
            f"{directory.url_of(entity_files.DYNAMIC_RELATION_COUNT_FILE)}: file not found, "
            "so the dictionary there was imported without dynamic relations; set "
            f"dynamic_relations as it was, or {_FRESH_HINT}")
    count = entity_files.read_dynamic_relation_count(directory)
    names = entity_files.read_relation_names(directory)
    if len(names) < count:
        raise FormatError(directory.url_of(entity_files.DYNAMIC_RELATION_NAMES_FILE),
                          f"holds {len(names)} names, but "
                          f"{entity_files.DYNAMIC_RELATION_COUNT_FILE} says {count}; "
                          f"{_FRESH_HINT}")
    return names[:count]
