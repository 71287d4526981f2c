"""The files of an `entity_path` directory: entity counts, entity names, dynamic relations.

Names and formats are PBG's: `entity_count_{type}_{part}.txt` holds one integer (the number of
entities of that type in that partition), `entity_names_{type}_{part}.json` a JSON list whose
item i names the entity at offset i, `dynamic_rel_count.txt` the number of relation types when
`dynamic_relations` is on, and `dynamic_rel_names.json` their names. Every file is written
atomically, so a reader never sees half of one.

An import publishes a whole dictionary at once, with its buckets (`importing.publication`):
staged in STAGING_FOLDER, committed by writing COMMIT_FILE there, then moved into place. A file
still in a committed staging folder is newer than the one in place, so it is read from there:
readers see the old dictionary or the new one, never a mix, even when the import was killed
while moving it. (Buckets are read only in place: see `importing.publication` for the window
that leaves open.)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence

from ..config.schema import ConfigSchema
from ..errors import BadInputError, FormatError
from .fs import Directory

DYNAMIC_RELATION_COUNT_FILE = "dynamic_rel_count.txt"
DYNAMIC_RELATION_NAMES_FILE = "dynamic_rel_names.json"
STAGING_FOLDER = ".tessera-import-dictionary"
COMMIT_FILE = "commit.json"
NAMES_PER_PIECE = 2**16  # names encoded at a time when a names file is written

_IMPORT_HINT = "; run `tessera import` to create it, or fix entity_path"
_NON_NEGATIVE_INTEGER = re.compile(r"[0-9]+")


def entity_count_file(entity_type: str, part: int) -> str:
    return f"entity_count_{entity_type}_{part}.txt"


def entity_names_file(entity_type: str, part: int) -> str:
    return f"entity_names_{entity_type}_{part}.json"


def read_entity_count(directory: Directory, entity_type: str, part: int) -> int:
    """The number of entities of a type in one partition."""
    return _read_count(directory, entity_count_file(entity_type, part))


def write_entity_count(directory: Directory, entity_type: str, part: int, count: int) -> None:
    _write_count(directory, entity_count_file(entity_type, part), count)


def read_entity_counts(directory: Directory, config: ConfigSchema) -> dict[str, list[int]]:
    """Every entity type's count in each of its partitions."""
    return {
        entity_type: [read_entity_count(directory, entity_type, part)
                      for part in range(entity.num_partitions)]
        for entity_type, entity in config.entities.items()
    }


def read_entity_names(directory: Directory, entity_type: str, part: int) -> list[str]:
    """The names of a partition's entities, by offset."""
    return read_names_file(directory, entity_names_file(entity_type, part))


def write_entity_names(directory: Directory, entity_type: str, part: int,
                       names: Sequence[str]) -> None:
    write_names_file(directory, entity_names_file(entity_type, part), names)


def read_dynamic_relation_count(directory: Directory) -> int:
    """How many relation types a dynamic-relations graph has."""
    return _read_count(directory, DYNAMIC_RELATION_COUNT_FILE)


def write_dynamic_relation_count(directory: Directory, count: int) -> None:
    _write_count(directory, DYNAMIC_RELATION_COUNT_FILE, count)


def read_relation_names(directory: Directory) -> list[str]:
    """The names of a dynamic-relations graph's relation types, by index."""
    return read_names_file(directory, DYNAMIC_RELATION_NAMES_FILE)


def write_relation_names(directory: Directory, names: Sequence[str]) -> None:
    write_names_file(directory, DYNAMIC_RELATION_NAMES_FILE, names)


def _read_count(directory: Directory, name: str) -> int:
    text = _read_text(directory, name)
    if not _NON_NEGATIVE_INTEGER.fullmatch(text.strip()):
        shown = text.strip()[:40]
        raise FormatError(directory.url_of(name),
                          f"expected a non-negative integer, found {shown!r}")
    return int(text)


def _write_count(directory: Directory, name: str, count: int) -> None:
    if count < 0:
        raise ValueError(f"{name}: a count cannot be negative ({count})")
    directory.write_text(name, f"{count}\n")


def read_names_file(directory: Directory, name: str) -> list[str]:
    text = _read_text(directory, name)
    try:
        names = json.loads(text)
    except json.JSONDecodeError as error:
        raise FormatError(directory.url_of(name), f"invalid JSON ({error})") from error
    if not isinstance(names, list):
        raise FormatError(directory.url_of(name), "expected a JSON list of names")
    for index, entry in enumerate(names):
        if not isinstance(entry, str):
            raise FormatError(directory.url_of(name),
                              f"item {index} is {entry!r}, expected a string")
    return names


def write_names_file(directory: Directory, name: str, names: Sequence[str]) -> None:
    # Pieces of NAMES_PER_PIECE names, so that millions of names never become one huge
    # string, each encoded by json.dumps: json.dump would take the pure-Python encoder, about
    # ten times slower (a million names: 0.9 s). The text is json.dump's, byte for byte.
    with directory.writing(name) as temp_path, open(temp_path, "w", encoding="utf-8") as file:
        file.write("[")
        for start in range(0, len(names), NAMES_PER_PIECE):
            piece = json.dumps(list(names[start:start + NAMES_PER_PIECE]), ensure_ascii=False)
            file.write(piece[1:-1] if start == 0 else ", " + piece[1:-1])
        file.write("]")


def _read_text(directory: Directory, name: str) -> str:
    try:
        return _read_published(directory, name)
    except FileNotFoundError as error:
        raise BadInputError(f"{directory.url_of(name)}: file not found{_IMPORT_HINT}") from error
    except UnicodeDecodeError as error:
        raise FormatError(directory.url_of(name), f"not UTF-8 text ({error})") from error


def is_published(directory: Directory, name: str) -> bool:
    """Whether a dictionary file exists, in place or in a committed staging folder (where an
    import killed while moving left it): what readers take it from."""
    staging = directory.subdirectory(STAGING_FOLDER)
    return directory.exists(name) or (staging.exists(COMMIT_FILE) and staging.exists(name))


def _read_published(directory: Directory, name: str) -> str:
    staging = directory.subdirectory(STAGING_FOLDER)
    if staging.exists(COMMIT_FILE):
        with contextlib.suppress(FileNotFoundError):  # moved into place by now
            return staging.read_text(name)
    return directory.read_text(name)
