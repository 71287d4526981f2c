"""Edge bucket files: `edges_{lhs}_{rhs}.h5`, written by appending, read a row range at a time.

A bucket holds every edge whose left-hand entity is in partition `lhs` and right-hand entity
in partition `rhs`, of all relation types, as three equally long int64 datasets `rel`, `lhs`
and `rhs` (offsets within the partitions) and the root attribute `format_version` = 1. A
featurized side also has PBG's ragged datasets `{side}d_offsets` (one more row than there are
edges, starting at 0) and `{side}d_data` (the feature ids); its `lhs`/`rhs` rows are -1 (PBG
requires it). `tessera import` adds `{side}d_entities`, which PBG never reads: the index of
each edge's entity in `entity_features_{type}.h5`, for filtered evaluation. Each dataset it
writes carries the CRC-32 of its rows, checked whenever the whole column is read.

Datasets are chunked in modest pieces so that reading rows [start, stop) from an object store
fetches little more than those rows. Each piece carries HDF5's own Fletcher-32 checksum,
which HDF5 checks as it reads the piece: a part read alone (an edge chunk) is checked too.
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import h5py
import numpy as np

from ..errors import FormatError
from .fs import Directory
from .hdf5 import (
    CRC32_ATTR,
    check_crc32,
    check_format_version,
    raised_by_h5py,
    reading_hdf5,
    writing_hdf5,
)

if TYPE_CHECKING:
    from typing_extensions import Self

EDGE_FORMAT_VERSION = 1
EDGE_DATASETS = ("rel", "lhs", "rhs")

# 64 Ki rows (512 KiB of int64) per HDF5 chunk: a partial remote read over-fetches at most
# this much per dataset, while the chunk index of a billion-edge bucket stays small. Appended
# rows are written once this many are pending, so that many small appends become few writes
# and a writer holds little memory (an importer keeps one writer open per bucket).
CHUNK_ROWS = 2**16

_IMPORT_HINT = "; run `tessera import` to create it, or fix edge_paths"
_REIMPORT = "run `tessera import` again, or restore the file from a copy"

Features = tuple[np.ndarray, np.ndarray]  # (offsets [n + 1] from 0, data [offsets[-1]])


def bucket_file(lhs_part: int, rhs_part: int) -> str:
    return f"edges_{lhs_part}_{rhs_part}.h5"


@dataclass(frozen=True)
class BucketEdges:
    """Rows of a bucket: relation types and both sides' entity offsets (int64).

    A featurized side has `{side}_offsets` and `{side}_data` instead of meaningful ids: the
    features of edge i's entity are `data[offsets[i]:offsets[i + 1]]`.
    """

    rel: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray
    lhs_offsets: np.ndarray | None = None
    lhs_data: np.ndarray | None = None
    rhs_offsets: np.ndarray | None = None
    rhs_data: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rel)


class _AppendableDataset:
    """A growing 1-D int64 dataset whose appends are gathered into writes of whole chunks.

    The dataset is created at its first write of a whole chunk; one that never fills a chunk
    is written at its exact size, unchunked, when closed: a chunked dataset takes a whole
    chunk of disk (512 KiB) however few rows it holds, 1.5 MB for a bucket of a few edges."""

    def __init__(self, file: h5py.File, name: str) -> None:
        self.file, self.name = file, name
        self.dataset: h5py.Dataset | None = None
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.total = 0
        self.crc = 0  # of every row appended, in order

    def append(self, values: np.ndarray) -> None:
        self.total += len(values)
        # as read back: int64 rows (a copy only of other integers, or of a strided view)
        self.crc = zlib.crc32(np.ascontiguousarray(values, dtype=np.int64).data, self.crc)
        if len(values) >= CHUNK_ROWS:  # large enough to write as is, without a copy
            self.flush()
            self._write(values)
            return
        if len(values):
            self.pending.append(values.copy())  # the caller may reuse its array
            self.pending_rows += len(values)
        if self.pending_rows >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self._write(np.concatenate(self.pending))
            self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        """Write what is pending; a dataset still not created gets exactly its rows."""
        if self.dataset is None:
            rows = np.concatenate(self.pending) if self.pending else np.empty(0, np.int64)
            self.dataset = self.file.create_dataset(self.name, data=rows)
            self.pending, self.pending_rows = [], 0
        else:
            self.flush()
        self.dataset.attrs[CRC32_ATTR] = np.uint32(self.crc)

    def _write(self, values: np.ndarray) -> None:
        if self.dataset is None:
            self.dataset = self.file.create_dataset(
                self.name, shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(CHUNK_ROWS,),
                fletcher32=True)
        size = self.dataset.shape[0]
        self.dataset.resize((size + len(values),))
        self.dataset[size:] = values


class BucketWriter:
    """Appends edges to one bucket file, published atomically when the `with` block succeeds."""

    def __init__(self, directory: Directory, lhs_part: int, rhs_part: int) -> None:
        self.directory = directory
        self.name = bucket_file(lhs_part, rhs_part)
        self._stack = contextlib.ExitStack()
        self._datasets: dict[str, _AppendableDataset] = {}
        self._file: h5py.File | None = None
        self._featurized: dict[str, bool] = {}

    def __enter__(self) -> Self:
        self._file = self._stack.enter_context(writing_hdf5(self.directory, self.name))
        for name in EDGE_DATASETS:
            self._datasets[name] = _AppendableDataset(self._file, name)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._file = None
        if exc is not None:
            self._stack.__exit__(exc_type, exc, traceback)
            return
        with self._stack:  # a failure while flushing also leaves nothing published
            for dataset in self._datasets.values():
                dataset.close()

    @property
    def num_edges(self) -> int:
        return self._datasets["rel"].total if self._datasets else 0

    def append(self, rel: np.ndarray, lhs: np.ndarray, rhs: np.ndarray, *,
               lhs_features: Features | None = None, rhs_features: Features | None = None,
               lhs_entities: np.ndarray | None = None,
               rhs_entities: np.ndarray | None = None) -> None:
        """Append edges; a featurized side passes `(offsets, data)` and -1s as its ids, and
        optionally its entities' indices (`{side}d_entities`, see the module docstring)."""
        if self._file is None:
            raise RuntimeError(f"{self.name}: append() outside the writer's `with` block")
        rel, lhs, rhs = (np.asarray(array, dtype=np.int64) for array in (rel, lhs, rhs))
        if not rel.ndim == lhs.ndim == rhs.ndim == 1 or not len(rel) == len(lhs) == len(rhs):
            raise ValueError(f"{self.name}: rel, lhs and rhs must be 1-D arrays of one length, "
                             f"got shapes {rel.shape}, {lhs.shape}, {rhs.shape}")
        features = {side: self._checked_features(side, given, len(rel))
                    for side, given in (("lhs", lhs_features), ("rhs", rhs_features))}
        entities = {side: self._checked_entities(side, given, features[side], len(rel))
                    for side, given in (("lhs", lhs_entities), ("rhs", rhs_entities))}
        for side, checked in features.items():
            if checked is not None:
                self._append_features(side, *checked)
            side_entities = entities[side]
            if side_entities is not None:
                self._append_entities(side, side_entities)
        self._datasets["rel"].append(rel)
        self._datasets["lhs"].append(lhs)
        self._datasets["rhs"].append(rhs)

    def _checked_features(self, side: str, features: Features | None,
                          num_edges: int) -> Features | None:
        """Check one side's features before anything is appended, so appends are all or none."""
        if self._featurized.setdefault(side, features is not None) != (features is not None):
            raise ValueError(f"{self.name}: the {side} side must be featurized in every append "
                             "or in none")
        if features is None:
            return None
        offsets, data = (np.asarray(array, dtype=np.int64) for array in features)
        if len(offsets) != num_edges + 1 or offsets[0] != 0 or offsets[-1] != len(data) \
                or np.any(np.diff(offsets) < 0):
            raise ValueError(f"{self.name}: {side} feature offsets must be {num_edges + 1} "
                             f"increasing rows from 0 to len(data) = {len(data)}")
        return offsets, data

    def _checked_entities(self, side: str, entities: np.ndarray | None,
                          features: Features | None, num_edges: int) -> np.ndarray | None:
        name = f"{side}d_entities"
        if self.num_edges and (name in self._datasets) != (entities is not None):
            raise ValueError(f"{self.name}: {name} must be given in every append or in none")
        if entities is None:
            return None
        entities = np.asarray(entities, dtype=np.int64)
        if features is None or entities.shape != (num_edges,):
            raise ValueError(f"{self.name}: {name} needs {side} features and one id per edge")
        return entities

    def _append_entities(self, side: str, entities: np.ndarray) -> None:
        name = f"{side}d_entities"
        if name not in self._datasets:
            assert self._file is not None
            self._datasets[name] = _AppendableDataset(self._file, name)
        self._datasets[name].append(entities)

    def _append_features(self, side: str, offsets: np.ndarray, data: np.ndarray) -> None:
        if f"{side}d_offsets" not in self._datasets:
            assert self._file is not None
            for suffix in ("offsets", "data"):
                self._datasets[f"{side}d_{suffix}"] = _AppendableDataset(
                    self._file, f"{side}d_{suffix}")
            self._datasets[f"{side}d_offsets"].append(np.zeros(1, dtype=np.int64))
        data_so_far = self._datasets[f"{side}d_data"].total
        self._datasets[f"{side}d_offsets"].append(offsets[1:] + data_so_far)
        self._datasets[f"{side}d_data"].append(data)


def open_bucket_writer(directory: Directory, lhs_part: int, rhs_part: int) -> BucketWriter:
    """A writer for bucket (lhs_part, rhs_part); use it as a context manager."""
    return BucketWriter(directory, lhs_part, rhs_part)


def write_bucket(directory: Directory, lhs_part: int, rhs_part: int, rel: np.ndarray,
                 lhs: np.ndarray, rhs: np.ndarray) -> None:
    """Write a whole bucket at once."""
    with open_bucket_writer(directory, lhs_part, rhs_part) as writer:
        writer.append(rel, lhs, rhs)


def read_bucket_size(directory: Directory, lhs_part: int, rhs_part: int) -> int:
    """The number of edges in a bucket, read from the file's metadata only."""
    name = bucket_file(lhs_part, rhs_part)
    url = directory.url_of(name)
    with reading_hdf5(directory, name, _IMPORT_HINT) as file:
        check_format_version(file, url)
        return _checked_length(file, url)


def read_bucket(directory: Directory, lhs_part: int, rhs_part: int, start: int = 0,
                stop: int | None = None, *, num_lhs: int | None = None,
                num_rhs: int | None = None, num_relations: int | None = None) -> BucketEdges:
    """Rows [start, stop) of a bucket (slice semantics), checked against the given bounds.

    Only those rows are read, so a remote bucket is fetched by ranges, never whole.
    """
    name = bucket_file(lhs_part, rhs_part)
    url = directory.url_of(name)
    with reading_hdf5(directory, name, _IMPORT_HINT) as file:
        check_format_version(file, url)
        start, stop, _ = slice(start, stop).indices(_checked_length(file, url))
        if num_relations == 1:
            rel = _read_single_relation(file["rel"], start, stop, url)
        else:
            rel = _read_rows(file["rel"], start, stop, url)
            _check_ids(url, "rel", rel, num_relations, start)
        lhs, rhs = (_read_rows(file[key], start, stop, url) for key in ("lhs", "rhs"))
        lhs_offsets, lhs_data = _read_features(file, "lhs", start, stop, url)
        rhs_offsets, rhs_data = _read_features(file, "rhs", start, stop, url)
    _check_ids(url, "lhs", lhs, num_lhs, start, lhs_offsets, lhs_data)
    _check_ids(url, "rhs", rhs, num_rhs, start, rhs_offsets, rhs_data)
    return BucketEdges(rel, lhs, rhs, lhs_offsets, lhs_data, rhs_offsets, rhs_data)


def read_featurized_entity_ids(directory: Directory, lhs_part: int, rhs_part: int,
                               side: str) -> np.ndarray | None:
    """The whole `{side}d_entities` column of a bucket, or None if it has none."""
    name = bucket_file(lhs_part, rhs_part)
    url = directory.url_of(name)
    with reading_hdf5(directory, name, _IMPORT_HINT) as file:
        check_format_version(file, url)
        dataset = file.get(f"{side}d_entities")
        if dataset is None:
            return None
        length = _checked_length(file, url)
        if not isinstance(dataset, h5py.Dataset) or dataset.shape != (length,):
            raise FormatError(url, f"'{side}d_entities' must be 1-D with one row per edge "
                                   f"({length})")
        return _read_rows(dataset, 0, length, url)


def _checked_length(file: h5py.File, url: str) -> int:
    """The common length of rel, lhs and rhs, after checking they exist and agree."""
    lengths = {}
    for key in EDGE_DATASETS:
        dataset = file.get(key)
        if not isinstance(dataset, h5py.Dataset):
            raise FormatError(url, f"dataset '{key}' is missing")
        if dataset.ndim != 1 or dataset.dtype.kind not in "iu":
            raise FormatError(url, f"dataset '{key}' must be 1-D integers, found shape "
                                   f"{dataset.shape} of {dataset.dtype}")
        lengths[key] = dataset.shape[0]
    for key in ("lhs", "rhs"):
        if lengths[key] != lengths["rel"]:
            raise FormatError(url, f"'{key}' has {lengths[key]} rows but 'rel' has "
                                   f"{lengths['rel']}")
    return lengths["rel"]


def _read_single_relation(dataset: h5py.Dataset, start: int, stop: int,
                          url: str) -> np.ndarray:
    """Rows [start, stop) of the relation column where there is one relation type: each id
    is checked to be 0, a block at a time, and the column returned is a broadcast view of
    one 0, so that a bucket held for training keeps no third column."""
    block = np.empty(max(min(CHUNK_ROWS, stop - start), 1), dtype=np.int64)  # a chunk at a time
    crc = 0
    for first in range(start, stop, len(block)):
        rows = block[:min(len(block), stop - first)]
        _read_into(rows, dataset, first, url)
        _check_ids(url, "rel", rows, 1, first)
        crc = zlib.crc32(rows.data, crc)
    _check_if_whole(dataset, url, start, stop, crc)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=np.int64), shape=(stop - start,),
                                           strides=(0,))


def _read_rows(dataset: h5py.Dataset, start: int, stop: int, url: str) -> np.ndarray:
    rows = np.empty(stop - start, dtype=np.int64)
    if stop > start:  # HDF5 rejects empty selections
        _read_into(rows, dataset, start, url)
    _check_if_whole(dataset, url, start, stop, zlib.crc32(rows.data))
    return rows


def _read_into(rows: np.ndarray, dataset: h5py.Dataset, first: int, url: str) -> None:
    """Read rows [first, first + len(rows)) into `rows`; a piece that fails its Fletcher-32
    checksum is named as such (HDF5 says only that a filter failed)."""
    try:
        dataset.read_direct(rows, source_sel=np.s_[first:first + len(rows)])
    except OSError as error:
        # HDF5's words for a failed filter; a failed read of the disk says "file read failed"
        said = str(error).lower()
        if not (dataset.fletcher32 and raised_by_h5py(error)
                and ("filter" in said or "fletcher" in said)):
            raise
        raise FormatError(url, f"corrupt: rows {first}..{first + len(rows)} of "
                               f"'{dataset.name.lstrip('/')}' fail the Fletcher-32 checksum "
                               f"written with them, so bytes changed after they were written; "
                               f"{_REIMPORT}") from error


def _check_if_whole(dataset: h5py.Dataset, url: str, start: int, stop: int, crc: int) -> None:
    """Rows [start, stop) read with CRC-32 `crc` are checked against the column's when they
    are all of it (a part has nothing to be checked against)."""
    if start == 0 and stop == dataset.shape[0]:
        check_crc32(dataset, url, crc, f"the rows of '{dataset.name.lstrip('/')}'", _REIMPORT)


def _read_features(file: h5py.File, side: str, start: int, stop: int,
                   url: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A featurized side's offsets (rebased to 0) and data for rows [start, stop)."""
    offsets_key, data_key = f"{side}d_offsets", f"{side}d_data"
    if offsets_key not in file and data_key not in file:
        return None, None
    for key in (offsets_key, data_key):
        if key not in file:
            raise FormatError(url, f"dataset '{key}' is missing (featurized {side} needs both "
                                   f"'{offsets_key}' and '{data_key}')")
    num_edges, num_offsets = file["rel"].shape[0], file[offsets_key].shape[0]
    if num_offsets != num_edges + 1:
        raise FormatError(url, f"'{offsets_key}' has {num_offsets} rows, expected "
                               f"{num_edges + 1} (one more than 'rel')")
    offsets = _read_rows(file[offsets_key], start, stop + 1, url)
    num_data = file[data_key].shape[0]
    if np.any(np.diff(offsets) < 0) or offsets[0] < 0 or offsets[-1] > num_data:
        raise FormatError(url, f"'{offsets_key}' rows {start}..{stop} are not increasing "
                               f"within [0, {num_data}]")
    data = _read_rows(file[data_key], int(offsets[0]), int(offsets[-1]), url)
    return offsets - offsets[0], data


def _check_ids(url: str, name: str, ids: np.ndarray, bound: int | None, first_row: int,
               offsets: np.ndarray | None = None, data: np.ndarray | None = None) -> None:
    """Every id (or, on a featurized side, every feature id) must lie in [0, bound)."""
    if bound is None:
        return
    checked = ids if data is None else data
    if len(checked) == 0 or (checked.min() >= 0 and checked.max() < bound):
        return  # no bucket-sized temporaries on the way
    bad = np.flatnonzero((checked < 0) | (checked >= bound))
    position = int(bad[0])
    if offsets is None:
        raise FormatError(url, f"{name} id {checked[position]} at row {first_row + position} "
                               f"is out of range [0, {bound})")
    row = int(np.searchsorted(offsets, position, side="right")) - 1
    raise FormatError(url, f"{name} feature id {checked[position]} at row {first_row + row} "
                           f"is out of range [0, {bound})")
