"""Starting from an `init_path` checkpoint trained before the graph grew: what can be checked.

An import that extends a dictionary appends new entities after the known ones of each
partition, so a checkpoint trained on the smaller graph holds the first rows of each
partition now: those start from it, the rows after them as a fresh run starts them. The
checkpoint stores no names, so the order is checked where it can be: when the checkpoint was
trained on another entity folder (its config.json says which) and both folders hold names,
the names of its rows must be the first names of the partition now. In the same folder an
import only ever appends (unless told to replace the dictionary).
"""

from __future__ import annotations

from ..config import ConfigSchema
from ..errors import BadInputError, FormatError
from ..storage.checkpoint import CheckpointStore
from ..storage.entities import entity_count_file, entity_names_file, read_entity_names
from ..storage.fs import Directory


def check_grown_partition(config: ConfigSchema, init: CheckpointStore, entity: str, part: int,
                          rows: int, count: int, url: str) -> None:
    """Raise FormatError unless `rows` rows trained in `init` can start the first rows of a
    partition of `count` entities (`url`: the checkpoint's file of that partition)."""
    if rows > count:
        raise FormatError(url, f"has {rows} rows but the partition has {count} entities "
                               f"({entity_count_file(entity, part)} in {config.entity_path}): "
                               "init_path was trained on more entities than entity_path holds; "
                               "use the entity_path it was trained with (or one that extends "
                               "it), or drop init_path")
    trained_on = _trained_entity_path(init)
    if trained_on is None or trained_on.rstrip("/") == config.entity_path.rstrip("/"):
        return
    before = Directory.from_config(trained_on, config)
    now = Directory.from_config(config.entity_path, config)
    names_file = entity_names_file(entity, part)
    if not (before.exists(names_file) and now.exists(names_file)):
        return
    known = read_entity_names(before, entity, part)[:rows]
    current = read_entity_names(now, entity, part)[:rows]
    for offset, (old, new) in enumerate(zip(known, current)):
        if old != new:
            raise FormatError(url, f"row {offset} is entity {old!r} ({before.url_of(names_file)})"
                                   f" but offset {offset} of that partition is {new!r} now "
                                   f"({now.url_of(names_file)}): entity_path does not extend "
                                   "the dictionary init_path was trained on; import the new "
                                   f"edges into {trained_on} (known entities keep their ids "
                                   "there), or drop init_path")


def _trained_entity_path(init: CheckpointStore) -> str | None:
    """The entity_path the checkpoint was trained with, if its config.json says."""
    try:
        trained = init.read_config().get("entity_path")
    except BadInputError:
        return None  # a checkpoint made by another tool: nothing to compare with
    return trained if isinstance(trained, str) else None
