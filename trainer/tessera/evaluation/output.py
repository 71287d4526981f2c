"""Where `tessera eval --output` may write its metrics, checked before the evaluation runs.

An evaluation can take hours: an output that cannot be written (a read-only disk, a folder
without permission, a symlink loop, a file in the path) must be refused before it, not after.
And an output inside the folders whose files a job's commands rewrite (checkpoint_path,
init_path, entity_path) could replace one of them, such as the checkpoint's
`checkpoint_version.txt`, so it is refused too.
"""

from __future__ import annotations

import os

from ..config import ConfigSchema
from ..errors import BadInputError
from ..publishing import check_output_file
from ..storage.fs import Directory, place_of


def check_metrics_output(url: str, config: ConfigSchema) -> None:
    """Refuse an output file that lies in the job's folders, or that cannot be written."""
    check_output_file(url, config)  # a folder, a file in the path
    owners = [("checkpoint_path", config.checkpoint_path), ("init_path", config.init_path),
              ("entity_path", config.entity_path)]
    for key, folder in owners:
        if folder and _inside(url, folder):
            raise BadInputError(f"{url}: inside {key} {folder}, whose files the job owns; "
                                "write the metrics somewhere else")
    Directory.from_config(_folder_of(url), config).check_writable()


def _inside(url: str, folder: str) -> bool:
    """Whether `url` names a place in `folder` (or `folder` itself): local paths compared
    with links resolved, URLs as written."""
    if ("://" in url) != ("://" in folder):
        return False
    url, folder = place_of(url), place_of(folder)
    return url == folder or url.startswith(folder.rstrip("/") + "/")


def _folder_of(url: str) -> str:
    if "://" not in url:
        url = os.path.abspath(url)
    folder = url.rstrip("/").rpartition("/")[0]
    return folder or "/"
