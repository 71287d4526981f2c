"""Publishing an import's entity dictionary: staged first, moved into place after the buckets.

The dictionary files (entity counts and names, dynamic relations) are written into a hidden
folder of `entity_path` before the buckets, the long part of an import, and moved into place
once every bucket is written, names before counts. So whatever stops an import before that
last step (an error, a kill), `entity_path` holds its dictionary as it was, and the next
import clears the staged files. Moving is a few renames (copies on object stores): if one
fails, an extended dictionary is put back as it was, a new one is deleted with the buckets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..storage import entities as entity_files
from ..storage.fs import Directory
from .writer import Publication

STAGING_FOLDER = ".tessera-import-dictionary"


class DictionaryUpdate:
    """The dictionary files one import writes into `entity_dir`.

    `known_counts` (per type and partition) and `known_relations` describe the dictionary
    being extended (None: a new dictionary); unchanged partitions are not written again.
    """

    def __init__(self, entity_dir: Directory, known_counts: dict[str, list[int]] | None,
                 known_relations: int | None) -> None:
        self.entity_dir = entity_dir
        self.staging = entity_dir.subdirectory(STAGING_FOLDER)
        self.known_counts = known_counts
        self.known_relations = known_relations
        self._staged: list[tuple[str, str, int | None]] = []  # (names, count file, old count)
        self.staging.remove()  # what a stopped import left

    @property
    def extends(self) -> bool:
        return self.known_counts is not None

    def stage_partition(self, entity_type: str, part: int, names: Sequence[str]) -> None:
        old = self.known_counts[entity_type][part] if self.known_counts is not None else None
        if old == len(names):
            return  # nothing new in this partition
        entity_files.write_entity_names(self.staging, entity_type, part, names)
        entity_files.write_entity_count(self.staging, entity_type, part, len(names))
        names_file = entity_files.entity_names_file(entity_type, part)
        # Staging a partition again (a featurized type's features) replaces its entry.
        self._staged = [entry for entry in self._staged if entry[0] != names_file]
        self._staged.append((names_file, entity_files.entity_count_file(entity_type, part),
                             old))

    def stage_relations(self, names: Sequence[str]) -> None:
        if self.known_relations == len(names):
            return
        entity_files.write_relation_names(self.staging, names)
        entity_files.write_dynamic_relation_count(self.staging, len(names))
        self._staged.append((entity_files.DYNAMIC_RELATION_NAMES_FILE,
                             entity_files.DYNAMIC_RELATION_COUNT_FILE, self.known_relations))

    def publish(self, publication: Publication) -> None:
        """Move the staged files into place; on failure, restore an extended dictionary."""
        moved: list[tuple[str, str, int | None]] = []
        try:
            for entry in self._staged:
                names_file, count_file, _ = entry
                moved.append(entry)
                for name in (names_file, count_file):
                    self.staging.move(name, self.entity_dir)
                    if not self.extends:
                        publication.published(self.entity_dir, name)
        except BaseException:
            if self.extends:
                self._restore(moved)
            raise
        finally:
            self.discard()

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.staging.remove()

    def _restore(self, moved: list[tuple[str, str, int | None]]) -> None:
        """Put the extended partitions back as they were (best effort: the error matters)."""
        for names_file, count_file, old in moved:
            with contextlib.suppress(Exception):
                if old is None:  # a type or relation list new to the dictionary
                    self.entity_dir.delete(count_file)
                    self.entity_dir.delete(names_file)
                    continue
                self.entity_dir.write_text(count_file, f"{old}\n")
                names = entity_files.read_names_file(self.entity_dir, names_file)[:old]
                entity_files.write_names_file(self.entity_dir, names_file, names)
