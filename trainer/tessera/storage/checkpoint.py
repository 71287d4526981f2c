"""Versioned checkpoints in PBG's format, written so that a crash never loses the last one.

A checkpoint directory holds, for version N: `model.vN.h5` (group `model` with one dataset per
parameter under its public name, such as `relations/0/operator/rhs/translation`, each with a
`state_dict_key` attribute), `embeddings_{type}_{part}.vN.h5` (dataset `embeddings`, float32
[entities, dimension]), each optionally with the optimizer state (the torch.save bytes) as
the opaque-byte dataset `optimizer/state_dict`, and with `format_version` = 1 and the caller's
metadata as root attributes; plus `config.json`, `checkpoint_version.txt` and `training_stats.json`.
A run that averages its last epochs' weights also keeps their running mean in each file, in
the group `averaged` (the same layout as the trained values: `averaged/embeddings`,
`averaged/model/...`), which PBG does not read.

Version N counts only once `checkpoint_version.txt` says N. Every file is published atomically
(a renamed temporary file, or one PUT), the files of N + 1 are all written before the version
file changes, and the files of N are deleted only after: at every moment the directory holds a
complete, readable committed version. Version 0 means "no committed version"; reading it uses
PBG's unversioned names (`model.h5`, `embeddings_{type}_{part}.h5`), which is what an
`init_path` made by hand or by another tool contains.

What a commit does after its version file (append the chunk's statistics, copy the version
into `epoch_N/`) is written first into `commit_journal.json`, so that a run that resumes after
a crash finishes it exactly once. A directory that lost its version file (or says 0) while
complete versions are in it is taken to be at its newest complete version: nothing a crash, a
partial sync or a restore of the `*.h5` files alone left is ever deleted as uncommitted.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Generic, Protocol, TypeVar, cast, overload

import h5py
import numpy as np

from ..config.redaction import redacted
from ..errors import BadInputError, FormatError, TesseraError, TransientError
from .fs import Directory, StorageSettings
from .hdf5 import (
    CRC32_ATTR,
    FORMAT_VERSION_ATTR,
    DatasetFile,
    check_crc32,
    check_format_version,
    reading_hdf5,
    writing_hdf5,
)

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION_FILE = "checkpoint_version.txt"
CONFIG_FILE = "config.json"
STATS_FILE = "training_stats.json"
JOURNAL_FILE = "commit_journal.json"
EMBEDDINGS_DATASET = "embeddings"
MODEL_GROUP = "model"
OPTIMIZER_STATE_DATASET = "optimizer/state_dict"
STATE_DICT_KEY_ATTR = "state_dict_key"
AVERAGED_GROUP = "averaged"

# A parameter's public name -> (its key in the model's state dict, its values).
ModelParameters = dict[str, tuple[str, np.ndarray]]
MetadataValue = str | int | float | bool
# An optimizer state to write: the bytes torch.save produced, or a function that saves it into
# a binary file. The function is called twice, to size the dataset and then to fill it, and
# must write the same bytes both times (torch.save of one state does): a partition's state
# then goes from its tensors to the file with no copy of it in memory.
OptimizerState = bytes | Callable[[BinaryIO], object]
State = TypeVar("State")
Values = TypeVar("Values", np.ndarray, ModelParameters)


@dataclass(frozen=True)
class Averaged(Generic[Values]):
    """A running mean of the values of `count` checkpoints, the first of them written in
    epoch `first_epoch` (0-based): embeddings, or a model's parameters."""

    values: Values
    first_epoch: int
    count: int

# PBG stores the optimizer's torch.save() blob as 1-byte opaque HDF5 elements.
_OPAQUE_BYTE = np.dtype("V1")
# Embeddings are read in slices of this size (see _read_in_slices).
READ_SLICE_BYTES = 8 * 2**20
# An optimizer state's CRC-32 is taken in pieces of this size, the state read whole after it.
STATE_CHECK_BYTES = 2**18

_VERSIONED_FILE = re.compile(r"(?:model|embeddings_.+_\d+)\.v(\d+)\.h5")
_NON_NEGATIVE_INTEGER = re.compile(r"[0-9]+")


def unread(file: BinaryIO) -> None:
    """A `read_state` for readers of embeddings that have no use for the optimizer state: it
    stays in the file (a partition's is megabytes)."""


def model_file(version: int) -> str:
    return "model.h5" if version == 0 else f"model.v{version}.h5"


def embeddings_file(entity_type: str, part: int, version: int) -> str:
    stem = f"embeddings_{entity_type}_{part}"
    return f"{stem}.h5" if version == 0 else f"{stem}.v{version}.h5"


def should_preserve(epochs_done: int, interval: int | None) -> bool:
    """Whether the checkpoint after `epochs_done` epochs is kept (PBG's preservation rule)."""
    return interval is not None and epochs_done > 0 and epochs_done % interval == 0


class CheckpointSettings(StorageSettings, Protocol):
    """The config keys that say where checkpoints are (a ConfigSchema has them)."""

    @property
    def checkpoint_path(self) -> str: ...

    @property
    def init_path(self) -> str | None: ...


class CheckpointStore:
    """The checkpoints in one directory: write a version's files, commit it, read it back."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    @classmethod
    def from_config(cls, config: CheckpointSettings) -> CheckpointStore:
        """The run's own checkpoints, at `checkpoint_path`."""
        return cls(Directory.from_config(config.checkpoint_path, config))

    @classmethod
    def init_from_config(cls, config: CheckpointSettings) -> CheckpointStore | None:
        """The checkpoint a run starts from when it has none of its own (`init_path`)."""
        if not config.init_path:
            return None
        return cls(Directory.from_config(config.init_path, config))

    def __repr__(self) -> str:
        return f"CheckpointStore({self.directory.url!r})"

    # Versions and config.

    def current_version(self) -> int:
        """The committed version, or 0 when nothing was ever committed here."""
        try:
            text = self.directory.read_text(CHECKPOINT_VERSION_FILE)
        except FileNotFoundError:
            return 0
        if not _NON_NEGATIVE_INTEGER.fullmatch(text.strip()):
            raise FormatError(self.directory.url_of(CHECKPOINT_VERSION_FILE),
                              f"expected a checkpoint version (an integer), found "
                              f"{text.strip()[:40]!r}; delete the file (the newest complete "
                              "version is then found) or write the version into it")
        return int(text)

    def readable_version(self, purpose: str) -> int:
        """The committed version, for a command that needs one (`purpose`: "evaluate"...)."""
        version = self.current_version()
        if version == 0:
            raise BadInputError(f"{self.directory.url}: no checkpoint to {purpose}"
                                f"{self._no_version_hint()}; run `tessera train` first or fix "
                                "checkpoint_path")
        return version

    def read_config(self) -> dict[str, Any]:
        """The config (as a plain dict) of the committed checkpoint."""
        url = self.directory.url_of(CONFIG_FILE)
        try:
            text = self.directory.read_text(CONFIG_FILE)
        except FileNotFoundError as error:
            raise BadInputError(f"{url}: file not found; is this a checkpoint "
                                "directory?") from error
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            raise FormatError(url, f"invalid JSON ({error})") from error
        if not isinstance(config, dict):
            raise FormatError(url, "expected a JSON object")
        return config

    # Embeddings.

    def has_embeddings(self, entity_type: str, part: int, version: int | None = None) -> bool:
        return self.directory.exists(embeddings_file(entity_type, part,
                                                     self._resolve(version)))

    def write_embeddings(self, version: int, entity_type: str, part: int,
                         embeddings: np.ndarray, optimizer_state: OptimizerState | None = None,
                         metadata: Mapping[str, MetadataValue] | None = None,
                         averaged: Averaged[np.ndarray] | None = None) -> None:
        """Write one partition's embeddings (and optimizer state, and the running mean of
        weight averaging) for a future version."""
        self._check_writable(version)
        values = np.ascontiguousarray(embeddings, dtype=np.float32)
        if values.ndim != 2:
            raise ValueError(f"embeddings must be 2-D [entities, dimension], got {values.shape}")
        with writing_hdf5(self.directory, embeddings_file(entity_type, part, version)) as file:
            _write_metadata(file, metadata)
            _write_dataset(file, EMBEDDINGS_DATASET, values)
            _write_optimizer_state(file, optimizer_state)
            if averaged is not None:
                group = _averaged_group(file, averaged)
                _write_dataset(group, EMBEDDINGS_DATASET,
                               np.ascontiguousarray(averaged.values, dtype=np.float32))

    def read_averaged_embeddings(self, entity_type: str, part: int,
                                 version: int) -> Averaged[np.ndarray] | None:
        """The running mean of weight averaging that a partition's file of `version` holds
        (None: it holds none)."""
        with self._opened(embeddings_file(entity_type, part, version), version) as (file, url):
            group = file.get(AVERAGED_GROUP)
            if group is None:
                return None
            dataset = _embeddings_dataset(group, url, *file[EMBEDDINGS_DATASET].shape)
            values = np.empty(dataset.shape, dtype=np.float32)
            _check_crc32(dataset, url, _read_in_slices(dataset, values), "the averaged embeddings")
            return Averaged(values, *_averaging_counts(group, url))

    def read_embeddings_state(self, entity_type: str, part: int, version: int) -> bytes | None:
        """One partition's optimizer state, as its bytes (None: not saved), its embeddings
        left unread."""
        with self._opened(embeddings_file(entity_type, part, version), version) as (file, url):
            state: bytes | None = _read_optimizer_state(file, url, None)
            return state

    def embeddings_rows(self, entity_type: str, part: int, version: int | None = None) -> int:
        """How many entities one partition's embeddings have (one row each)."""
        version = self._resolve(version)
        with self._opened(embeddings_file(entity_type, part, version), version) as (file, url):
            return int(_embeddings_dataset(file, url, None, None).shape[0])

    @overload
    def read_embeddings(self, entity_type: str, part: int, version: int | None = None, *,
                        num_entities: int | None = None, dimension: int | None = None,
                        out: np.ndarray | None = None,
                        read_state: None = None) -> tuple[np.ndarray, bytes | None]: ...

    @overload
    def read_embeddings(self, entity_type: str, part: int, version: int | None = None, *,
                        num_entities: int | None = None, dimension: int | None = None,
                        out: np.ndarray | None = None,
                        read_state: Callable[[BinaryIO], State]
                        ) -> tuple[np.ndarray, State | None]: ...

    def read_embeddings(self, entity_type: str, part: int, version: int | None = None, *,
                        num_entities: int | None = None, dimension: int | None = None,
                        out: np.ndarray | None = None,
                        read_state: Callable[[BinaryIO], Any] | None = None
                        ) -> tuple[np.ndarray, Any]:
        """One partition's float32 embeddings and optimizer state (None if not saved).

        `num_entities` and `dimension`, when given, are checked against the file; `out` (for
        instance a shared-memory tensor's array) receives the values without another copy.
        The state is its bytes, or what `read_state` reads from it as a binary file.
        """
        version = self._resolve(version)
        name = embeddings_file(entity_type, part, version)
        url = self.directory.url_of(name)
        with self._reading(name, version) as file:
            check_format_version(file, url)
            dataset = _embeddings_dataset(file, url, num_entities, dimension)
            if out is None:
                out = np.empty(dataset.shape, dtype=np.float32)
            elif out.dtype != np.float32 or not out.flags.c_contiguous:
                raise ValueError(f"out must be a C-contiguous float32 array, got {out.dtype}")
            elif out.shape != dataset.shape:
                raise FormatError(url, f"embeddings have shape {dataset.shape}, expected "
                                       f"{out.shape}")
            _check_crc32(dataset, url, _read_in_slices(dataset, out), "the embeddings")
            return out, _read_optimizer_state(file, url, read_state)

    def embedding_blocks(self, entity_type: str, part: int, version: int, *, block_rows: int,
                         num_entities: int | None = None,
                         dimension: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) of one partition's embeddings, `block_rows` rows at a time, the
        file opened once: a reader that needs one block at a time never holds the partition."""
        name = embeddings_file(entity_type, part, version)
        url = self.directory.url_of(name)
        with self._reading(name, version) as file:
            check_format_version(file, url)
            dataset = _embeddings_dataset(file, url, num_entities, dimension)
            rows, columns = dataset.shape
            crc = 0
            for start in range(0, rows, max(1, block_rows)):
                block = np.empty((min(block_rows, rows - start), columns), dtype=np.float32)
                crc = _read_in_slices(dataset, block, start, crc)
                yield start, block
            _check_crc32(dataset, url, crc, "the embeddings")  # before the reader's work counts

    def read_embedding_rows(self, entity_type: str, part: int, version: int, rows: np.ndarray,
                            *, num_entities: int | None = None,
                            dimension: int | None = None) -> np.ndarray:
        """The float32 embeddings of some rows of a partition (in the order given), without
        reading the rest of the file."""
        name = embeddings_file(entity_type, part, version)
        url = self.directory.url_of(name)
        with self._reading(name, version) as file:
            check_format_version(file, url)
            dataset = _embeddings_dataset(file, url, num_entities, dimension)
            unique, inverse = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
            if not len(unique):
                return np.empty((0, dataset.shape[1]), dtype=np.float32)
            values = np.asarray(dataset[unique.tolist()], dtype=np.float32)
            return values[inverse]

    # Model parameters.

    def write_model(self, version: int, params: ModelParameters,
                    optimizer_state: OptimizerState | None = None,
                    metadata: Mapping[str, MetadataValue] | None = None,
                    averaged: Averaged[ModelParameters] | None = None) -> None:
        """Write the shared parameters (relation operators, global embeddings) for a version,
        and the running mean of weight averaging."""
        self._check_writable(version)
        for public_name in params:
            if not public_name or public_name.startswith(f"{MODEL_GROUP}/"):
                raise ValueError(f"parameter name {public_name!r} must be relative to the "
                                 f"'{MODEL_GROUP}' group, e.g. 'relations/0/operator/rhs/...'")
        with writing_hdf5(self.directory, model_file(version)) as file:
            _write_metadata(file, metadata)
            _write_parameters(file, params)
            _write_optimizer_state(file, optimizer_state)
            if averaged is not None:
                _write_parameters(_averaged_group(file, averaged), averaged.values)

    def read_averaged_model(self, version: int) -> Averaged[ModelParameters] | None:
        """The running mean of weight averaging that the model file of `version` holds (None:
        it holds none)."""
        with self._opened(model_file(version), version) as (file, url):
            group = file.get(AVERAGED_GROUP)
            if group is None:
                return None
            return Averaged(_read_parameters(group, url), *_averaging_counts(group, url))

    @contextlib.contextmanager
    def _opened(self, name: str, version: int) -> Iterator[tuple[h5py.File, str]]:
        """A file of `version`, its format version checked, and its URL."""
        url = self.directory.url_of(name)
        with self._reading(name, version) as file:
            check_format_version(file, url)
            yield file, url

    def read_model(self, version: int | None = None) -> tuple[ModelParameters, bytes | None]:
        """The parameters by public name, with their state-dict keys, and the optimizer state
        (a model's is small: read as bytes)."""
        version = self._resolve(version)
        name = model_file(version)
        url = self.directory.url_of(name)
        with self._reading(name, version) as file:
            check_format_version(file, url)
            return _read_parameters(file, url), _read_optimizer_state(file, url, None)

    def read_metadata(self, version: int | None = None, *,
                      entity: tuple[str, int] | None = None) -> dict[str, MetadataValue]:
        """The metadata attributes of the model file, or of one (type, part) embeddings file."""
        version = self._resolve(version)
        name = model_file(version) if entity is None else embeddings_file(*entity, version)
        with self._reading(name, version) as file:
            check_format_version(file, self.directory.url_of(name))
            return {key: _plain(value) for key, value in file.attrs.items()
                    if key != FORMAT_VERSION_ATTR}

    # Committing, preserving, cleaning up.

    def commit(self, version: int, config: Mapping[str, Any], *,
               stats: Iterable[Mapping[str, Any]] = (), preserve_as: int | None = None) -> None:
        """Make `version` the checkpoint: its files must all be written already.

        Writes the journal of what follows the commit (`stats` to append, `preserve_as`: the
        epoch count whose `epoch_N/` copy this version is) and config.json, then
        atomically the version file (from that instant on, and only then, the new version
        counts), then deletes the files of older versions. `finish_commit` does the journal's
        work; a crash before it ends is finished by the next `remove_uncommitted`.
        """
        self._check_writable(version)
        missing = self._missing_files(version, config)
        if missing:  # deleting the older versions below would leave no complete one
            raise FormatError(self.directory.url_of(missing[0]),
                              f"missing, so version {version} cannot be committed "
                              f"({len(missing)} file(s) missing in all)")
        journal = {"version": version, "stats": list(stats), "preserve_as": preserve_as}
        if journal["stats"] or preserve_as is not None:
            self.directory.write_text(JOURNAL_FILE, json.dumps(journal, default=_json_value))
        self.directory.write_text(CONFIG_FILE, json.dumps(redacted(config), indent=4))
        self.directory.write_text(CHECKPOINT_VERSION_FILE, f"{version}\n")
        self._delete_versions(lambda found: found < version, best_effort=True)

    def finish_commit(self, *, after_a_crash: bool = False) -> None:
        """Do what the journal of the committed version asks (append its statistics, preserve
        it), then delete the journal. A journal of a version that was never committed is
        deleted undone. `after_a_crash`: the statistics may be appended already (the crash
        came before the journal's deletion), so they are appended only if they are not the
        last records (reading the whole file, which only a recovery does)."""
        try:
            journal = json.loads(self.directory.read_text(JOURNAL_FILE))
        except FileNotFoundError:
            return
        except json.JSONDecodeError as error:
            raise self._bad_journal(f"invalid JSON ({error})") from error
        if not isinstance(journal, dict) or not isinstance(journal.get("stats", []), list):
            raise self._bad_journal("not a commit journal (an object with 'version', "
                                    "'stats' and 'preserve_as')")
        if journal.get("version") == self.current_version():
            records = journal.get("stats", [])  # as read back from JSON, as read_stats returns
            if records and not (after_a_crash
                                and self.read_stats()[-len(records):] == records):
                self.append_stats(records)
            if journal.get("preserve_as") is not None:
                self.preserve(int(journal["preserve_as"]))
        self.directory.delete(JOURNAL_FILE)

    def _bad_journal(self, why: str) -> FormatError:
        return FormatError(self.directory.url_of(JOURNAL_FILE),
                           f"{why}; delete it (the chunk's statistics and epoch copy are lost, "
                           "the checkpoint is not)")

    def preserve(self, epochs_done: int) -> CheckpointStore:
        """Copy the committed version into `epoch_{epochs_done}/`, a checkpoint of its own."""
        version = self.current_version()
        if version == 0:
            raise ValueError(f"{self.directory.url}: no committed checkpoint to preserve")
        snapshot = self.directory.subdirectory(f"epoch_{epochs_done}")
        # An older snapshot of that name stops counting until the new one is complete.
        snapshot.delete(CHECKPOINT_VERSION_FILE)
        for name in self._files_of_version(version):
            self.directory.copy(name, snapshot)
        self.directory.copy(CONFIG_FILE, snapshot)
        snapshot.write_text(CHECKPOINT_VERSION_FILE, f"{version}\n")
        return CheckpointStore(snapshot)

    def remove_uncommitted(self, config: Mapping[str, Any]) -> None:
        """Delete what an interrupted run left, once the committed version is known complete.

        Call it once at start-up, before any process writes here (holding the lease): a
        version above the committed one was never committed (a checkpoint cut short), one
        below it is a deletion cut short, a `.tmp` file a write cut short; a journal left by
        a commit is finished. When the version file is missing (or says 0) the newest complete
        version is made the committed one again. When the committed
        version itself is incomplete (a partial copy, a hand edit), the other versions may be
        all that is left, so nothing is deleted and the error says which versions are
        complete. `config` is the run's; the checkpoint's own config.json, when there is one,
        says which files a version has.
        """
        committed = self.current_version()
        if committed > 0:
            self._check_committed_complete(committed, config)
        else:
            committed = self._restore_version_file(config)
        self._delete_versions(lambda found: found != committed, best_effort=False)
        for name in self.directory.listdir():
            if name.startswith(".") and name.endswith(".tmp"):  # see Directory.writing
                self.directory.delete(name)
        self.finish_commit(after_a_crash=True)

    # Training statistics.

    def append_stats(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Add records to training_stats.json (JSON lines)."""
        lines = "".join(json.dumps(record, default=_json_value) + "\n" for record in records)
        if not self.directory.is_local:  # object stores cannot append: rewrite the whole file
            self.directory.write_text(STATS_FILE, self._read_stats_text() + lines)
            return
        self.directory.makedirs()
        with open(self.directory.path(STATS_FILE), "a", encoding="utf-8") as file:
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())

    def read_stats(self) -> list[dict[str, Any]]:
        """Every record of training_stats.json, oldest first ([] when there is none)."""
        url = self.directory.url_of(STATS_FILE)
        lines = self._read_stats_text().split("\n")
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                if number == len(lines):  # an append cut short by a crash: drop it
                    logger.warning("%s: ignoring an incomplete last line", url)
                    break
                raise FormatError(url, f"line {number} is not JSON ({error})") from error
        return records

    # Internals.

    def _resolve(self, version: int | None) -> int:
        return self.current_version() if version is None else version

    @contextlib.contextmanager
    def _reading(self, name: str, version: int) -> Iterator[h5py.File]:
        """Open a file of `version`; when it is missing, say why: a commit replaced that
        version while it was read (transient: `read_consistently` reads the new one), the
        version is incomplete, or no version is committed."""
        try:
            with reading_hdf5(self.directory, name) as file:
                yield file
        except BadInputError as error:
            # Missing, or deleted while HDF5 opened it ("can't retrieve stat info"): a file
            # of a version that a newer commit replaced is not bad input.
            newest = self.current_version() if version else 0
            if newest != version:
                raise CheckpointMoved(
                    f"{self.directory.url_of(name)}: version {version} was replaced by version "
                    f"{newest} while it was read (a training run is committing here); run the "
                    "command again") from error
            if not isinstance(error.__cause__, FileNotFoundError):
                raise
            raise self._missing(name, version) from error.__cause__

    def _missing(self, name: str, version: int) -> BadInputError:
        url = self.directory.url_of(name)
        if version == 0:
            hint = self._no_version_hint() or (f" (there is no {CHECKPOINT_VERSION_FILE}, so "
                                               "the unversioned name was tried); check the "
                                               "path, or train a checkpoint there first")
            return BadInputError(f"{url}: file not found{hint}")
        return BadInputError(f"{url}: file not found (checkpoint version {version} is "
                             "incomplete); restore the file, or train again from an epoch_N/ "
                             "copy")

    def _no_version_hint(self) -> str:
        """What to do about versioned files found with no committed version ("": none)."""
        found = sorted({v for v in map(_version_of, self.directory.listdir()) if v},
                       reverse=True)
        if not found:
            return ""
        return (f" (there is no committed version: {CHECKPOINT_VERSION_FILE} is missing or says "
                f"0, but files of version(s) {', '.join(map(str, found))} are here; write the "
                f"newest complete one into {CHECKPOINT_VERSION_FILE}, or run tessera train on "
                "this checkpoint_path, which does so)")

    def _check_writable(self, version: int) -> None:
        committed = self.current_version()
        if version <= committed:
            raise ValueError(f"{self.directory.url}: version {version} is not above the "
                             f"committed version {committed}; writing it would overwrite a "
                             "complete checkpoint")

    def _missing_files(self, version: int, config: Mapping[str, Any],
                       present: set[str] | None = None) -> list[str]:
        """The files of `version` that a checkpoint of `config` needs and the directory lacks."""
        present = set(self.directory.listdir()) if present is None else present
        expected = [model_file(version)] + [
            embeddings_file(entity_type, part, version)
            for entity_type, entity in config.get("entities", {}).items()
            for part in range(entity.get("num_partitions", 1))
        ]
        return [name for name in expected if name not in present]

    def _layout_config(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        """The config that says which files a version here has: the checkpoint's own
        config.json, else (none, or unreadable) the run's."""
        try:
            return self.read_config()
        except BadInputError:
            return config

    def _complete_versions(self, config: Mapping[str, Any], present: set[str],
                           excluded: int = 0) -> list[int]:
        """The versions here with all their files, newest first."""
        found = {_version_of(name) for name in present} - {None, excluded}
        return sorted((version for version in found if version is not None
                       and not self._missing_files(version, config, present)), reverse=True)

    def _restore_version_file(self, config: Mapping[str, Any]) -> int:
        """With no committed version: make the newest complete version (if any) the
        committed one again, and return it (0: none is complete). A lost version file (an
        interrupted sync, a copy of the `*.h5` files alone) must not read as "start from
        scratch and delete the rest"; a crash just before a first commit leaves a complete
        version that resuming from loses nothing either."""
        present = set(self.directory.listdir())
        complete = self._complete_versions(self._layout_config(config), present)
        if not complete:
            return 0
        newest = complete[0]
        if CONFIG_FILE not in present:
            self.directory.write_text(CONFIG_FILE, json.dumps(redacted(config), indent=4))
        self.directory.write_text(CHECKPOINT_VERSION_FILE, f"{newest}\n")
        logger.warning("%s: no committed version, but version %d is complete: resuming from "
                       "it (%s restored)", self.directory.url, newest, CHECKPOINT_VERSION_FILE)
        return newest

    def _check_committed_complete(self, committed: int, config: Mapping[str, Any]) -> None:
        config = self._layout_config(config)
        present = set(self.directory.listdir())
        missing = self._missing_files(committed, config, present)
        if not missing:
            return
        complete = self._complete_versions(config, present, excluded=committed)
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3
                                          else "")
        if complete:
            found = f"complete version(s) here: {', '.join(map(str, complete))}"
            fix = (f"put the missing file(s) back, or write {complete[0]} into "
                   f"{CHECKPOINT_VERSION_FILE} to resume from version {complete[0]}")
        else:
            found = "no other version here is complete"
            fix = (f"put the missing file(s) back, or delete {CHECKPOINT_VERSION_FILE} to "
                   "start from scratch")
        raise FormatError(self.directory.url_of(CHECKPOINT_VERSION_FILE),
                          f"names version {committed}, but its file(s) {shown} are missing; "
                          f"{found}. Nothing was deleted: {fix}")

    def _files_of_version(self, version: int) -> list[str]:
        return [name for name in self.directory.listdir() if _version_of(name) == version]

    def _delete_versions(self, doomed: Callable[[int], bool], *, best_effort: bool) -> None:
        for name in self.directory.listdir():
            found = _version_of(name)
            if found is None or not doomed(found):
                continue
            try:
                self.directory.delete(name)
            except (OSError, TesseraError) as error:
                if not best_effort:
                    raise
                # Harmless garbage: the next commit or remove_uncommitted() retries.
                logger.warning("could not delete old checkpoint file %s: %s",
                               self.directory.url_of(name), error)

    def _read_stats_text(self) -> str:
        try:
            return self.directory.read_text(STATS_FILE)
        except FileNotFoundError:
            return ""


class CheckpointMoved(TransientError):
    """The version a reader was reading was replaced by a newer commit (and deleted)."""


def read_consistently(store: CheckpointStore, purpose: str, read: Callable[[int], State],
                      attempts: int = 3) -> State:
    """`read(version)` of the committed version, all of it from that one version: when a
    training run commits a newer one meanwhile (and deletes the files being read), read the
    newer one from the start, up to `attempts` times (then exit 75: retrying may help)."""
    for _ in range(attempts - 1):
        try:
            return read(store.readable_version(purpose))
        except CheckpointMoved as moved:
            logger.warning("%s; reading the newer version", moved)
    return read(store.readable_version(purpose))


def _version_of(name: str) -> int | None:
    match = _VERSIONED_FILE.fullmatch(name)
    return int(match.group(1)) if match else None


def _embeddings_dataset(file: h5py.Group, url: str, num_entities: int | None,
                        dimension: int | None) -> h5py.Dataset:
    dataset = file.get(EMBEDDINGS_DATASET)
    if not isinstance(dataset, h5py.Dataset):
        raise FormatError(url, f"dataset '{EMBEDDINGS_DATASET}' is missing")
    if dataset.ndim != 2 or dataset.dtype.kind != "f":
        raise FormatError(url, f"'{EMBEDDINGS_DATASET}' must be a 2-D float array, found "
                               f"shape {dataset.shape} of {dataset.dtype}")
    rows, columns = dataset.shape
    expected = (rows if num_entities is None else num_entities,
                columns if dimension is None else dimension)
    shapes = f"'{EMBEDDINGS_DATASET}' has shape {dataset.shape}, expected {expected}"
    if rows != expected[0]:
        raise FormatError(url, f"{shapes} ({expected[0]} entities, as entity_path counts "
                               "them): the entity files and this checkpoint come from "
                               "different imports; use matching entity_path and checkpoint")
    if columns != expected[1]:
        raise FormatError(url, f"{shapes} (dimension {expected[1]}): the checkpoint was "
                               f"trained with dimension {columns}; set dimension {columns} for "
                               "this entity type, or use a checkpoint of this config")
    return dataset


def _read_in_slices(dataset: h5py.Dataset, out: np.ndarray, first_row: int = 0,
                    crc: int = 0) -> int:
    """Read the rows from `first_row` on that fit `out`, in slices of about READ_SLICE_BYTES
    each, straight into `out`; returns `crc` (the CRC-32 of the rows before) carried over
    them, each slice taken while it is in the cache.

    A remote file object serves each read with a buffer of its size, so one read of a whole
    multi-GB partition would hold it twice in memory; slices bound that to a few MB.
    """
    rows, columns = out.shape
    step = max(1, READ_SLICE_BYTES // max(1, columns * out.itemsize))
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        if columns:  # HDF5 rejects empty selections
            dataset.read_direct(out, source_sel=np.s_[first_row + start:first_row + stop],
                                dest_sel=np.s_[start:stop])
            crc = zlib.crc32(out[start:stop].data, crc)
    return crc


def _crc32(values: np.ndarray) -> int:
    """The CRC-32 of an array's values in C order, whatever its layout (a scalar's too)."""
    return zlib.crc32(np.ascontiguousarray(values).data)


def _check_crc32(dataset: h5py.Dataset, url: str, crc: int, what: str) -> None:
    check_crc32(dataset, url, crc, what, "restore the file from a copy, or start again from an "
                                         "earlier checkpoint (epoch_N/)")


def _write_dataset(parent: h5py.Group, name: str, values: np.ndarray) -> None:
    dataset = parent.create_dataset(name, data=values)
    dataset.attrs[CRC32_ATTR] = np.uint32(_crc32(values))


def _write_parameters(parent: h5py.Group, params: ModelParameters) -> None:
    group = parent.create_group(MODEL_GROUP, track_order=True)
    for public_name, (state_dict_key, values) in params.items():
        _write_dataset(group, public_name, np.asarray(values))
        group[public_name].attrs[STATE_DICT_KEY_ATTR] = state_dict_key


def _averaged_group(file: h5py.File, averaged: Averaged[Any]) -> h5py.Group:
    group = file.create_group(AVERAGED_GROUP)
    group.attrs["first_epoch"] = averaged.first_epoch
    group.attrs["count"] = averaged.count
    return group


def _averaging_counts(group: h5py.Group, url: str) -> tuple[int, int]:
    try:
        return int(group.attrs["first_epoch"]), int(group.attrs["count"])
    except (KeyError, TypeError, ValueError) as error:
        raise FormatError(url, f"group '{AVERAGED_GROUP}' lacks its integer 'first_epoch' and "
                               "'count' attributes") from error


def _read_parameters(file: h5py.Group, url: str) -> ModelParameters:
    group = file.get(MODEL_GROUP)
    if group is None:  # a model without shared parameters
        return {}
    params: ModelParameters = {}

    def collect(public_name: str, item: h5py.HLObject) -> None:
        if not isinstance(item, h5py.Dataset):
            return
        if STATE_DICT_KEY_ATTR not in item.attrs:
            raise FormatError(url, f"dataset '{MODEL_GROUP}/{public_name}' has no "
                                   f"'{STATE_DICT_KEY_ATTR}' attribute")
        values = item[()]
        _check_crc32(item, url, _crc32(values), f"the values of '{item.name}'")
        params[public_name] = (str(_plain(item.attrs[STATE_DICT_KEY_ATTR])), values)

    group.visititems(collect)
    return params


def _write_optimizer_state(file: h5py.File, state: OptimizerState | None) -> None:
    if state is None:
        return
    save = state if callable(state) else (lambda target: target.write(state))
    counter = _CountingWriter()
    save(cast(BinaryIO, counter))  # a binary file that only counts
    # Opaque bytes ("V1"), as PBG writes them; a uint8 array reads back the same.
    dataset = file.create_dataset(OPTIMIZER_STATE_DATASET, shape=(counter.count,),
                                  dtype=_OPAQUE_BYTE)
    target = _CountingWriter(DatasetFile(dataset))
    save(cast(BinaryIO, target))
    if target.failure is not None:
        raise target.failure
    if target.count != counter.count:
        raise ValueError(f"the optimizer state was {counter.count} bytes, then {target.count} "
                         "when saved again: a state must save the same bytes each time")
    dataset.attrs[CRC32_ATTR] = np.uint32(target.crc)


class _CountingWriter(io.RawIOBase):
    """A binary file written front to back that keeps how many bytes it took and their CRC-32,
    and passes them on to `target`, if any.

    An OSError of `target` (a full disk under HDF5) is kept in `failure`, the bytes counted as
    taken: torch.save's zip writer, failed in the middle, crashes the process when it is
    destroyed later (a segmentation fault at exit), so it is let finish and the error raised
    after it."""

    def __init__(self, target: BinaryIO | io.RawIOBase | None = None) -> None:
        super().__init__()
        self.target = target
        self.count = 0
        self.crc = 0
        self.failure: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, buffer: Any) -> int:
        data = memoryview(buffer).cast("B")
        size = data.nbytes
        if self.target is not None and self.failure is None:
            try:
                size = self.target.write(data) or 0
            except OSError as error:
                self.failure = error
        self.count += size
        self.crc = zlib.crc32(data[:size], self.crc)
        return size


def _read_optimizer_state(file: h5py.File, url: str,
                          read: Callable[[BinaryIO], Any] | None) -> Any:
    if OPTIMIZER_STATE_DATASET not in file:
        return None
    dataset = file[OPTIMIZER_STATE_DATASET]
    if dataset.ndim != 1 or dataset.dtype.itemsize != 1:
        raise FormatError(url, f"'{OPTIMIZER_STATE_DATASET}' must be a 1-D array of bytes, "
                               f"found shape {dataset.shape} of {dataset.dtype}")
    if read is unread:
        return None
    source = DatasetFile(dataset)
    if CRC32_ATTR in dataset.attrs:  # checked before torch.load, which reads it out of order
        buffer = memoryview(bytearray(min(len(dataset), STATE_CHECK_BYTES)))
        crc = 0
        while count := source.readinto(buffer):
            crc = zlib.crc32(buffer[:count], crc)
        _check_crc32(dataset, url, crc, "the optimizer state's bytes")
        source.seek(0)
    return source.read() if read is None else read(cast(BinaryIO, source))


def _write_metadata(file: h5py.File, metadata: Mapping[str, MetadataValue] | None) -> None:
    for key, value in (metadata or {}).items():
        value = _plain(value)
        if key == FORMAT_VERSION_ATTR or not isinstance(value, (str, int, float)):
            raise ValueError(f"metadata {key!r}: expected a string or a number, got {value!r}")
        file.attrs[key] = value


def _plain(value: Any) -> Any:
    """numpy values and HDF5 byte strings as the Python values they stand for."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def _json_value(value: Any) -> Any:
    """Let json encode numpy values (a loss as np.float32, a count as np.int64)."""
    plain = _plain(value)
    if plain is value:
        raise TypeError(f"{value!r} of type {type(value).__name__} is not JSON serialisable")
    return plain
