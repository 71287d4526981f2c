"""Publishing every file an import writes at once, all or nothing, even when it is killed.

Nothing is written in place: the dictionary files (and featurized types' entity files) are
staged in a hidden folder of entity_path (`storage.entities.STAGING_FOLDER`), each edge path's
buckets in a hidden folder of that edge path (BUCKET_STAGING_FOLDER). Once every file is
written, one atomic write of the commit file in the dictionary's staging folder, listing each
staged file with its folder, publishes them all; then each is moved into place (a rename on
disks, a copy and a delete on object stores: repeating a move does nothing) and the staging
folders are removed. An import that fails before the commit deletes what it staged; one killed
before it changed nothing in place, and the next import into those edge paths deletes what it
staged. One killed after the commit is finished by the next import into entity_path, which
holds the entity_path lease (`lease`) before it reads anything there.

Readers take the dictionary files from a committed staging folder first (`storage.entities`),
buckets and entity feature files only from their place: an import stopped while moving (a
kill or a storage error in its last seconds) leaves edge paths that may hold old buckets next
to the new dictionary until the next import into entity_path finishes the moves.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence

from ..errors import FormatError
from ..storage.entities import COMMIT_FILE, STAGING_FOLDER
from ..storage.fs import Directory

BUCKET_STAGING_FOLDER = ".tessera-import-buckets"


class Publication:
    """The files one import stages for entity_path and for `edge_dirs`, published together.

    Files are staged by several threads (the dictionary's, the buckets'), hence the lock.
    """

    def __init__(self, entity_dir: Directory, edge_dirs: Sequence[Directory] = ()) -> None:
        self.entity_dir = entity_dir
        home = location(entity_dir)
        self.edge_dirs = {location(edge_dir): edge_dir for edge_dir in edge_dirs
                          if location(edge_dir) != home}
        self._staged: dict[str, dict[str, None]] = {}  # target folder -> file names, in order
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Delete what an import killed before its commit staged in these edge paths."""
        for edge_dir in self.edge_dirs.values():
            edge_dir.subdirectory(BUCKET_STAGING_FOLDER).remove()

    def staging_for(self, target: Directory) -> Directory:
        """The folder where the files bound for `target` are written until they are moved."""
        return staging_folder(self.entity_dir, target)

    def staged(self, target: Directory, name: str) -> None:
        """Record a file written into `staging_for(target)` (again: no second entry)."""
        with self._lock:
            self._staged.setdefault(location(target), {})[name] = None

    def commit(self) -> None:
        """Publish every staged file with one atomic write (nothing staged: nothing to do)."""
        home = location(self.entity_dir)
        record = {"files": list(self._staged.get(home, {})),
                  "edge_paths": [{"url": where, "files": list(names)}
                                 for where, names in self._staged.items() if where != home]}
        if record["files"] or record["edge_paths"]:
            self.staging_for(self.entity_dir).write_text(COMMIT_FILE, json.dumps(record) + "\n")

    def finish(self) -> None:
        """Move the committed files into place; if this fails, the next import finishes it."""
        complete_publication(self.entity_dir)

    def discard(self) -> None:
        """Delete what this import staged, commit first: a commit must never outlive a staged
        file it lists (best effort: the import's error matters more)."""
        dictionary = self.entity_dir.subdirectory(STAGING_FOLDER)
        with contextlib.suppress(Exception):
            dictionary.delete(COMMIT_FILE)
            for edge_dir in self.edge_dirs.values():
                edge_dir.subdirectory(BUCKET_STAGING_FOLDER).remove()
            dictionary.remove()


def complete_publication(entity_dir: Directory) -> bool:
    """Finish the publication a stopped import committed, or clear the dictionary one left
    uncommitted (call it holding the entity_path lease); whether there was a committed one.

    Every step may be repeated: a move of a file moved already, or whose staging folder is
    gone, does nothing, and the commit file goes only once every file is in place.
    """
    dictionary = entity_dir.subdirectory(STAGING_FOLDER)
    committed = dictionary.exists(COMMIT_FILE)
    if committed:
        targets = _committed_files(entity_dir)
        for target, names in targets:
            staging = staging_folder(entity_dir, target)
            for name in names:
                staging.move(name, target)
        for target, _ in targets[1:]:
            target.subdirectory(BUCKET_STAGING_FOLDER).remove()
        dictionary.delete(COMMIT_FILE)
    dictionary.remove()
    return committed


def staging_folder(entity_dir: Directory, target: Directory) -> Directory:
    """Where files bound for `target` are staged: one folder of it, the dictionary's in
    entity_path (an edge path may be entity_path itself)."""
    if location(target) == location(entity_dir):
        return entity_dir.subdirectory(STAGING_FOLDER, shown_as=target.url)
    return target.subdirectory(BUCKET_STAGING_FOLDER, shown_as=target.url)


def location(directory: Directory) -> str:
    """A folder's address for the commit file: absolute, so that any working directory
    finishes the moves."""
    return directory.root if directory.is_local else directory.url


def _committed_files(entity_dir: Directory) -> list[tuple[Directory, list[str]]]:
    """Each target folder of the commit, entity_path first, with its files."""
    commit = entity_dir.subdirectory(STAGING_FOLDER)
    url = commit.url_of(COMMIT_FILE)
    try:
        record = json.loads(commit.read_text(COMMIT_FILE))
        targets = [(entity_dir, _names(record["files"]))]
        for entry in record.get("edge_paths", []):  # absent in older Tessera's commits
            edge_dir = Directory(_text(entry["url"]), entity_dir.storage_options,
                                 retry_timeout=entity_dir.retry_timeout)
            targets.append((edge_dir, _names(entry["files"])))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise FormatError(url, f"not an import's commit ({error!r})") from error
    return targets


def _names(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"a list of file names expected, found {value!r}")
    return [_text(name) for name in value]


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a string expected, found {value!r}")
    return value
