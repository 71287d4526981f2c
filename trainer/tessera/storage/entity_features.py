"""`entity_features_{type}.h5`: the entities of a featurized type and each one's features.

PBG's layout has no list of featurized entities: an edge file carries each edge's features
(`lhsd_offsets`/`lhsd_data`), the type's `entity_count_{type}_0.txt` counts its features and
`entity_names_{type}_0.json` names them. To rank against every entity of the type (filtered
evaluation) and to export one embedding per entity, Tessera also keeps the entities: this
file, which PBG never opens, holds `names` (UTF-8 strings), and `offsets` [n + 1] / `data`
(int64 feature ids, entity i's features are `data[offsets[i]:offsets[i + 1]]`, as in edge
files), with the root attribute `format_version` = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import FormatError
from .fs import Directory
from .hdf5 import check_format_version, reading_hdf5, writing_hdf5

_IMPORT_HINT = "; import the edges with `tessera import --features TYPE=FILE`"


def entity_features_file(entity_type: str) -> str:
    return f"entity_features_{entity_type}.h5"


@dataclass(frozen=True)
class EntityFeatures:
    """The entities of a featurized type, by index, and their features (CSR)."""

    names: list[str]
    offsets: np.ndarray  # int64 [len(names) + 1], from 0 to len(data)
    data: np.ndarray  # int64 feature ids

    def __len__(self) -> int:
        return len(self.names)

    def features_of(self, entities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, data) of the given entities' features, in their order (a ragged gather)."""
        starts, ends = self.offsets[entities], self.offsets[entities + 1]
        lengths = ends - starts
        offsets = np.zeros(len(entities) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        positions = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return offsets, self.data[positions]


def write_entity_features(directory: Directory, entity_type: str,
                          features: EntityFeatures) -> None:
    """Write the file atomically."""
    with writing_hdf5(directory, entity_features_file(entity_type)) as file:
        file.create_dataset("names", data=np.array(features.names, dtype=h5py.string_dtype()))
        file.create_dataset("offsets", data=features.offsets.astype(np.int64))
        file.create_dataset("data", data=features.data.astype(np.int64))


def has_entity_features(directory: Directory, entity_type: str) -> bool:
    return directory.exists(entity_features_file(entity_type))


def read_entity_features(directory: Directory, entity_type: str,
                         num_features: int) -> EntityFeatures:
    """The file, checked: offsets well formed and every feature id below `num_features`."""
    name = entity_features_file(entity_type)
    url = directory.url_of(name)
    with reading_hdf5(directory, name, _IMPORT_HINT) as file:
        check_format_version(file, url)
        for key in ("names", "offsets", "data"):
            if not isinstance(file.get(key), h5py.Dataset) or file[key].ndim != 1:
                raise FormatError(url, f"dataset '{key}' is missing or not 1-D{_IMPORT_HINT}")
        names = [name.decode("utf-8") for name in file["names"][()]]
        offsets = file["offsets"][()].astype(np.int64)
        data = file["data"][()].astype(np.int64)
    if len(offsets) != len(names) + 1 or offsets[0] != 0 or offsets[-1] != len(data) \
            or np.any(np.diff(offsets) < 0):
        raise FormatError(url, f"'offsets' must be {len(names) + 1} increasing rows from 0 to "
                               f"len(data) = {len(data)}{_IMPORT_HINT}")
    bad = np.flatnonzero((data < 0) | (data >= num_features))
    if len(bad):
        raise FormatError(url, f"feature id {data[bad[0]]} is out of range [0, {num_features})"
                               f" (entity_count_{entity_type}_0.txt){_IMPORT_HINT}")
    return EntityFeatures(names, offsets, data)
