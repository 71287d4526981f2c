"""`tessera export`: a checkpoint's embeddings (named) and relation parameters, for other tools.

Embeddings are written one partition at a time, so exporting needs the memory of one
partition, not of the whole entity type. A featurized type exports its feature embeddings
(`feature_embeddings_{type}`) and, computed from them, its entities' (`embeddings_{type}`).
The output files are published all together or not at all.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import torch

from .config import ConfigSchema
from .errors import BadInputError, ConfigError
from .model.featurized_entities import featurized_entity_embeddings
from .model.reciprocal import model_relation_names
from .progress import Reporter, Task
from .publishing import staged_directory
from .querying.names import partition_names
from .storage.checkpoint import CheckpointStore, read_consistently, unread
from .storage.entities import (
    read_entity_counts,
    read_relation_names,
)
from .storage.entity_features import (
    EntityFeatures,
    entity_features_file,
    has_entity_features,
    read_entity_features,
)
from .storage.fs import Directory
from .storage.hdf5 import new_hdf5_file

TSV = pa_csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
# What a name may not contain in each text format, and why (a TSV field has no quoting:
# quotes and backslashes are plain text there, as `tessera import` reads them).
UNWRITABLE_IN = {
    "tsv": ("[\t\n\r]", "a tab or a line break, which a TSV row cannot hold"),
    "npy": ("[\n\r]", "a line break, which a names file of one name a line cannot hold"),
}
RELATION_PARAMETERS_FILE = "relation_parameters.tsv"
ENTITY_BLOCK = 100_000  # entities written (featurized ones computed) at a time


def export_checkpoint(config: ConfigSchema, output: str, reporter: Reporter, *,
                      output_format: str = "tsv", entity_types: Sequence[str] | None = None,
                      overwrite: bool = False) -> list[str]:
    """Write the latest checkpoint to `output`; returns the URLs of the files written.

    All files appear together or none does (see publishing.staged_directory); files of the
    same names already in `output` are refused unless `overwrite`.
    """
    store = CheckpointStore.from_config(config)
    store.readable_version("export")  # before any work: a checkpoint is there
    types = list(entity_types or config.entities)
    for entity in types:
        if entity not in config.entities:
            raise ConfigError("--entity-types", f"unknown entity type '{entity}'; the config "
                              f"has {', '.join(config.entities)}")
    entity_dir = Directory.from_config(config.entity_path, config)
    counts = read_entity_counts(entity_dir, config)
    target = Directory.from_config(output, config)
    featurized = {entity: has_entity_features(entity_dir, entity)
                  for entity in types if config.entities[entity].featurized}
    names = [name for entity in types
             for name in _files_of(entity, output_format, featurized.get(entity))]
    names.append(RELATION_PARAMETERS_FILE)
    total = sum(sum(counts[entity]) for entity in types)

    def export(version: int) -> None:
        with staged_directory(target, names, overwrite=overwrite) as staging, \
                reporter.task("export", total=total, unit="entities") as task:
            for entity in types:
                partitions = _partitions(store, version, entity_dir, entity, counts[entity],
                                         config.entity_dimension(entity), task)
                if entity in featurized:
                    _export_featurized(config, staging, entity_dir, entity, partitions,
                                       output_format, featurized[entity], reporter)
                    continue
                _write_embeddings(staging, embedding_files(entity, output_format),
                                  sum(counts[entity]), partitions, output_format)
                reporter.event("exported embeddings", entity_type=entity,
                               entities=sum(counts[entity]))
            _write_relation_parameters(config, store, version, entity_dir, staging)

    read_consistently(store, "export", export)
    written = [target.url_of(name) for name in names]
    reporter.event("export published", files=written)
    return written


def embedding_files(entity: str, fmt: str) -> list[str]:
    """The files an entity type's embeddings are exported to, in one format."""
    if fmt == "npy":
        return [f"embeddings_{entity}.npy", f"names_{entity}.txt"]
    return [f"embeddings_{entity}.{fmt}"]


def feature_files(entity: str, fmt: str) -> list[str]:
    """The files a featurized type's feature embeddings are exported to, in one format."""
    return [f"feature_{name}" for name in embedding_files(entity, fmt)]


def _files_of(entity: str, fmt: str, has_entities: bool | None) -> list[str]:
    """An entity type's output files; `has_entities`: None if the type is not featurized, else
    whether its entities are known (then they get embedding files besides the features')."""
    if has_entities is None:
        return embedding_files(entity, fmt)
    return (embedding_files(entity, fmt) if has_entities else []) + feature_files(entity, fmt)


def _export_featurized(config: ConfigSchema, target: Directory, entity_dir: Directory,
                       entity: str, partitions: Iterator[tuple[list[str], np.ndarray]],
                       fmt: str, has_entities: bool, reporter: Reporter) -> None:
    """The feature embeddings, and each entity's (the mean of its features', as the model
    computes it) when the import recorded the entities."""
    feature_names, feature_rows = next(partitions)  # featurized types are unpartitioned
    _write_embeddings(target, feature_files(entity, fmt), len(feature_rows),
                      iter([(feature_names, feature_rows)]), fmt)
    if not has_entities:
        reporter.event("exported feature embeddings only", entity_type=entity,
                       features=len(feature_rows), missing=entity_features_file(entity))
        return
    entities = read_entity_features(entity_dir, entity, len(feature_rows))
    _write_embeddings(target, embedding_files(entity, fmt), len(entities),
                      _entity_blocks(entities, torch.from_numpy(feature_rows), config.max_norm),
                      fmt)
    reporter.event("exported embeddings", entity_type=entity, entities=len(entities),
                   features=len(feature_rows))


def _entity_blocks(entities: EntityFeatures, feature_rows: torch.Tensor,
                   max_norm: float | None) -> Iterator[tuple[list[str], np.ndarray]]:
    """(names, embeddings) of featurized entities, a block of them at a time."""
    for first in range(0, len(entities), ENTITY_BLOCK):
        block = np.arange(first, min(first + ENTITY_BLOCK, len(entities)))
        offsets, data = entities.features_of(block)
        embeddings = featurized_entity_embeddings(feature_rows, offsets, data, max_norm)
        yield entities.names[first:first + len(block)], embeddings.numpy()


def _partitions(store: CheckpointStore, version: int, entity_dir: Directory, entity: str,
                counts: list[int], dimension: int,
                task: Task) -> Iterator[tuple[list[str], np.ndarray]]:
    """(names, embeddings) of each partition in turn, a block of rows at a time (so the live
    line moves while a partition of millions is written); offsets stand in for missing names.

    Each partition's shape is checked against its entity count and the config's dimension.
    """
    for part, count in enumerate(counts):
        embeddings, _ = store.read_embeddings(entity, part, version, num_entities=count,
                                              dimension=dimension, read_state=unread)
        names = partition_names(entity_dir, entity, part, count)
        for first in range(0, count, ENTITY_BLOCK):
            block = embeddings[first:first + ENTITY_BLOCK]
            yield names[first:first + len(block)], block
            task.advance(len(block), entity_type=entity)


def _write_embeddings(target: Directory, files: list[str], total: int,
                      partitions: Iterator[tuple[list[str], np.ndarray]], fmt: str) -> None:
    if fmt == "tsv":
        with target.writing(files[0]) as path, open(path, "wb") as file:
            for names, embeddings in partitions:
                check_names_writable(names, fmt, f"{files[0]}: entity")
                _write_tsv_rows(file, names, embeddings)
        return
    if fmt == "h5":
        with target.writing(files[0]) as path, new_hdf5_file(path) as file:
            for names, embeddings in partitions:
                _append(file, "embeddings", embeddings.astype(np.float32))
                _append(file, "names", np.array(names, dtype=h5py.string_dtype()))
        return
    # The .npy is written partition by partition, never held whole; with plain writes, not
    # through a memory map, whose pages a full disk cannot back (the process dies of SIGBUS).
    with target.writing(files[0]) as path, target.writing(files[1]) as names_path, \
            open(path, "wb") as array_file, open(names_path, "w", encoding="utf-8") as names_file:
        for index, (names, embeddings) in enumerate(partitions):
            if index == 0:
                np.lib.format.write_array_header_1_0(array_file, {
                    "descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                    "fortran_order": False, "shape": (total, embeddings.shape[1])})
            check_names_writable(names, fmt, f"{files[1]}: entity")
            array_file.write(np.ascontiguousarray(embeddings, dtype="<f4").data)
            names_file.writelines(f"{n}\n" for n in names)


def check_names_writable(names: Sequence[str], fmt: str, what: str) -> None:
    """Refuse, naming the first, a name that the text format `fmt` would split in two."""
    pattern, problem = UNWRITABLE_IN[fmt]
    found = pc.match_substring_regex(pa.array(names, type=pa.string()), pattern)
    if not pc.any(found).as_py():
        return
    name = names[pc.index(found, True).as_py()]
    shown = repr(name) if len(name) <= 60 else f"{name[:60]!r}..."
    raise BadInputError(f"{what} {shown} has {problem}; export with --format h5 (names as "
                        "HDF5 strings)")


def _write_tsv_rows(file: BinaryIO, names: Sequence[str], embeddings: np.ndarray) -> None:
    """`name<TAB>v1<TAB>v2...` lines, names as they are. pyarrow writes whole rows unless a
    name has a quote, which its CSV writer would quote or refuse: then it formats the values
    and the names are put before them here, row by row (slower)."""
    name_column = pa.array(names, type=pa.string())
    columns = [pa.array(column) for column in embeddings.T]
    if not pc.any(pc.match_substring(name_column, '"')).as_py():
        _write_tsv(file, [name_column, *columns])
        return
    values = io.BytesIO()
    _write_tsv(values, columns)
    file.writelines(name.encode() + b"\t" + line + b"\n"
                    for name, line in zip(names, values.getvalue().split(b"\n")))


def _write_tsv(file: BinaryIO, columns: list[pa.Array]) -> None:
    table = pa.Table.from_arrays(columns, names=[str(i) for i in range(len(columns))])
    pa_csv.write_csv(table, file, TSV)


def _append(file: h5py.File, dataset: str, values: np.ndarray) -> None:
    if dataset not in file:
        file.create_dataset(dataset, data=values, maxshape=(None, *values.shape[1:]),
                            chunks=True)
        return
    existing = file[dataset]
    start = len(existing)
    existing.resize(start + len(values), axis=0)
    existing[start:] = values


def _write_relation_parameters(config: ConfigSchema, store: CheckpointStore, version: int,
                               entity_dir: Directory, target: Directory) -> None:
    """One row per parameter: owner (relation name or entity type), side, name, values; with
    reciprocal relations, r's inverse is named `{r}_inverse`."""
    if config.dynamic_relations:
        relation_names = read_relation_names(entity_dir)
    else:
        relation_names = [relation.name for relation in config.relations]
    relation_names = model_relation_names(config, relation_names)
    check_names_writable(relation_names, "tsv", f"{RELATION_PARAMETERS_FILE}: relation")
    params, _ = store.read_model(version)
    with target.writing(RELATION_PARAMETERS_FILE) as path, \
            open(path, "w", encoding="utf-8") as file:
        for public_name, (_, values) in sorted(params.items()):
            for owner, side, parameter, row in _parameter_rows(public_name, values,
                                                               relation_names):
                file.write("\t".join([owner, side, parameter, *map(repr, row.tolist())]) + "\n")


def _parameter_rows(public_name: str, values: np.ndarray,
                    relation_names: list[str]) -> Iterator[tuple[str, str, str, np.ndarray]]:
    parts = public_name.split("/")
    if parts[0] == "relations":  # relations/{idx}/operator/{side}/{param}
        _, idx, _, side, parameter = parts
        if values.ndim >= 2 and len(values) == len(relation_names) and len(relation_names) > 1:
            for relation_name, row in zip(relation_names, values):  # dynamic: one row each
                yield relation_name, side, parameter, np.ravel(row)
        else:
            yield relation_names[int(idx)], side, parameter, np.ravel(values)
    else:  # entities/{type}/global_embedding
        yield parts[1], "-", parts[2], np.ravel(values)
