"""Staging an import's entity dictionary, to be published with its buckets (`publication`).

The dictionary files (entity counts and names, dynamic relations) are written into a hidden
folder of `entity_path` while the buckets, the long part of an import, are written into hidden
folders of the edge paths; one commit then publishes them all. Until the files are moved into
place, readers take each dictionary file from the committed folder first (`storage.entities`),
so they see the old dictionary or the new one, never a mix.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..storage import entities as entity_files
from ..storage.entities import COMMIT_FILE as COMMIT_FILE
from ..storage.entities import STAGING_FOLDER as STAGING_FOLDER
from ..storage.fs import Directory
from .publication import Publication
from .publication import complete_publication as complete_publication


class DictionaryUpdate:
    """The dictionary files one import writes into `entity_dir`, staged in `publication` (by
    default one of their own).

    `known_counts` (per type and partition) and `known_relations` describe the dictionary
    being extended (None: a new dictionary); unchanged partitions are not written again.
    """

    def __init__(self, entity_dir: Directory, known_counts: dict[str, list[int]] | None,
                 known_relations: int | None, publication: Publication | None = None) -> None:
        self.entity_dir = entity_dir
        self.publication = publication or Publication(entity_dir)
        self.staging = self.publication.staging_for(entity_dir)
        self.known_counts = known_counts
        self.known_relations = known_relations

    @property
    def extends(self) -> bool:
        return self.known_counts is not None

    def stage_partition(self, entity_type: str, part: int, names: Sequence[str]) -> None:
        """Stage a partition's names and count; staging it again (a featurized type's
        features) replaces them."""
        old = self.known_counts[entity_type][part] if self.known_counts is not None else None
        if old == len(names):
            return  # nothing new in this partition
        entity_files.write_entity_names(self.staging, entity_type, part, names)
        entity_files.write_entity_count(self.staging, entity_type, part, len(names))
        self.publication.staged(self.entity_dir, entity_files.entity_names_file(entity_type,
                                                                                part))
        self.publication.staged(self.entity_dir, entity_files.entity_count_file(entity_type,
                                                                                part))

    def stage_relations(self, names: Sequence[str]) -> None:
        if self.known_relations == len(names):
            return
        entity_files.write_relation_names(self.staging, names)
        entity_files.write_dynamic_relation_count(self.staging, len(names))
        self.publication.staged(self.entity_dir, entity_files.DYNAMIC_RELATION_NAMES_FILE)
        self.publication.staged(self.entity_dir, entity_files.DYNAMIC_RELATION_COUNT_FILE)

    def commit(self) -> None:
        """Publish the staged files (with whatever else the publication holds)."""
        self.publication.commit()

    def finish(self) -> None:
        """Move the committed files into place; if this fails, the next import finishes it."""
        self.publication.finish()

    def discard(self) -> None:
        """Drop an uncommitted publication (best effort: the import's error matters more)."""
        self.publication.discard()
