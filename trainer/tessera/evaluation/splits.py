"""Which edge sets `tessera eval --split` means: a split named as the folder the importer
wrote it to (`edges/valid` is `valid`), among the config's edge paths, or an edge set's path.

Tuning is judged on the validation split and reported on the test split; naming the split
keeps the test edges out of the tuning by a word, not by a path typed again.
"""

from __future__ import annotations

import posixpath

from ..errors import ConfigError


def split_name(edge_path: str) -> str:
    """The name of an edge set: the last folder of its path or URL."""
    return posixpath.basename(edge_path.rstrip("/"))


def is_path(split: str) -> bool:
    return "/" in split or "://" in split


def choose_split(edge_paths: list[str], split: str) -> list[str]:
    """The edge paths `split` names: those of the config called so, or the path given."""
    if is_path(split):
        return [split]
    chosen = [path for path in edge_paths if split_name(path) == split]
    if not chosen:
        names = ", ".join(split_name(path) for path in edge_paths) or "none"
        raise ConfigError("--split", f"no edge path of the config is named {split!r} (its "
                          f"names: {names}); give one of them, or an edge set's path")
    return chosen
