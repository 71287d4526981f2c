"""Entity names of a graph, read one partition at a time: where a name lives, and the names of
given rows.

Names come from `entity_names_{type}_{part}.json`; a partition without one (a graph built by
another tool) names its entities `{part}:{offset}`, as `tessera export` writes them. No
function here holds more than one partition's names at a time.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import BadInputError, FormatError
from ..storage.entities import (
    entity_count_file,
    entity_names_file,
    is_published,
    read_entity_names,
)
from ..storage.fs import Directory

# Close names offered for an unknown one.
SUGGESTIONS = 3
# In partitions of more names, a close name must share AFFIX characters at one end.
COMPARE_ALL_UP_TO = 100_000
AFFIX = 3


@dataclass(frozen=True, order=True)
class EntityRow:
    """Where one entity's embedding is: its type, partition and offset."""

    entity_type: str
    part: int
    offset: int


def partition_names(entity_dir: Directory, entity_type: str, part: int, count: int) -> list[str]:
    """The names of a partition's `count` entities by offset (`{part}:{offset}` without a
    names file); a names file of another length is refused."""
    names_file = entity_names_file(entity_type, part)
    if not is_published(entity_dir, names_file):
        return [f"{part}:{offset}" for offset in range(count)]
    names = read_entity_names(entity_dir, entity_type, part)
    if len(names) != count:
        raise FormatError(entity_dir.url_of(names_file),
                          f"holds {len(names)} names, but the partition has {count} entities "
                          f"({entity_count_file(entity_type, part)}); import the entities "
                          "again")
    return names


def locate(entity_dir: Directory, counts: dict[str, list[int]], names: Sequence[str],
           entity_type: str | None = None) -> dict[str, EntityRow]:
    """Where each of `names` is, searching `entity_type` (or every type).

    An unknown name is refused with close names if there are any; a name found in two types
    without `entity_type` is refused, listing them.
    """
    wanted = set(names)
    found: dict[str, list[EntityRow]] = {name: [] for name in wanted}
    types = [entity_type] if entity_type is not None else list(counts)
    for kind, part, part_names in _partitions(entity_dir, counts, types):
        for offset, name in enumerate(part_names):
            if name in wanted:
                found[name].append(EntityRow(kind, part, offset))
    unknown = [name for name in names if not found[name]]
    if unknown:
        name = unknown[0]
        others = f" (and {len(unknown) - 1} more unknown names)" if len(unknown) > 1 else ""
        raise BadInputError(f"unknown entity {name!r}"
                            f"{f' of entity type {entity_type!r}' if entity_type else ''}: "
                            f"{_suggestion(entity_dir, counts, types, name)}{others}")
    for name in names:
        kinds = sorted({row.entity_type for row in found[name]})
        if len(kinds) > 1:
            raise BadInputError(f"entity {name!r} exists in entity types {', '.join(kinds)}; "
                                "choose one with --entity-type (entity_type= in Python)")
    return {name: rows[0] for name, rows in found.items()}


def _partitions(entity_dir: Directory, counts: dict[str, list[int]],
                types: Iterable[str]) -> Iterator[tuple[str, int, list[str]]]:
    for kind in types:
        for part, count in enumerate(counts[kind]):
            yield kind, part, partition_names(entity_dir, kind, part, count)


def _suggestion(entity_dir: Directory, counts: dict[str, list[int]], types: list[str],
                name: str) -> str:
    """Close names, found in a second reading of the names (only when one is unknown).

    In a large partition only names that share their first or last characters with `name`
    are compared: difflib on each of a million names takes about ten seconds.
    """
    close: list[str] = []
    head, tail = name[:AFFIX], name[-AFFIX:]
    for _, _, part_names in _partitions(entity_dir, counts, types):
        if len(part_names) > COMPARE_ALL_UP_TO:
            part_names = [other for other in part_names
                          if other.startswith(head) or other.endswith(tail)]
        close += difflib.get_close_matches(name, part_names, SUGGESTIONS)
    suggestions = difflib.get_close_matches(name, close, SUGGESTIONS)
    if suggestions:
        return f"did you mean {', '.join(map(repr, suggestions))}?"
    return "check the name, or entity_path"


def names_of(entity_dir: Directory, counts: dict[str, list[int]],
             rows: Iterable[EntityRow]) -> dict[EntityRow, str]:
    """The names of some rows, reading only the partitions they are in."""
    by_partition: dict[tuple[str, int], list[EntityRow]] = {}
    for row in rows:
        by_partition.setdefault((row.entity_type, row.part), []).append(row)
    result = {}
    for (kind, part), members in sorted(by_partition.items()):
        part_names = partition_names(entity_dir, kind, part, counts[kind][part])
        result.update({row: part_names[row.offset] for row in members})
    return result
