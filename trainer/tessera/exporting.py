"""`tessera export`: a checkpoint's embeddings (named) and relation parameters, for other tools.

Embeddings are written one partition at a time, so exporting needs the memory of one
partition, not of the whole entity type. Each output file is published atomically.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from .config import ConfigSchema
from .errors import BadInputError, ConfigError
from .progress import Reporter
from .storage.checkpoint import CheckpointStore
from .storage.entities import (
    entity_names_file,
    read_entity_counts,
    read_entity_names,
    read_relation_names,
)
from .storage.fs import Directory

TSV = pa_csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")


def export_checkpoint(config: ConfigSchema, output: str, reporter: Reporter, *,
                      output_format: str = "tsv",
                      entity_types: Sequence[str] | None = None) -> list[str]:
    """Write the latest checkpoint to `output`; returns the URLs of the files written."""
    store = CheckpointStore(Directory.from_config(config.checkpoint_path, config))
    version = store.current_version()
    if version == 0:
        raise BadInputError(f"{config.checkpoint_path}: no checkpoint to export; run "
                            "`tessera train` first or fix checkpoint_path")
    entity_dir = Directory.from_config(config.entity_path, config)
    counts = read_entity_counts(entity_dir, config)
    target = Directory.from_config(output, config)
    written = []
    for entity in entity_types or list(config.entities):
        if entity not in config.entities:
            raise ConfigError("--entity-types", f"unknown entity type '{entity}'; the config "
                              f"has {', '.join(config.entities)}")
        partitions = _partitions(store, version, entity_dir, entity, len(counts[entity]))
        name = _write_embeddings(target, entity, sum(counts[entity]), partitions, output_format)
        written.append(target.url_of(name))
        reporter.event("exported embeddings", entity_type=entity, entities=sum(counts[entity]),
                       file=target.url_of(name))
    written.append(target.url_of(_write_relation_parameters(config, store, version, entity_dir,
                                                            target)))
    reporter.event("exported relation parameters", file=written[-1])
    return written


def _partitions(store: CheckpointStore, version: int, entity_dir: Directory, entity: str,
                num_parts: int) -> Iterator[tuple[list[str], np.ndarray]]:
    """(names, embeddings) of each partition in turn; offsets stand in for missing names."""
    for part in range(num_parts):
        embeddings, _ = store.read_embeddings(entity, part, version)
        if entity_dir.exists(entity_names_file(entity, part)):
            names = read_entity_names(entity_dir, entity, part)
        else:
            names = [f"{part}:{offset}" for offset in range(len(embeddings))]
        yield names, embeddings


def _write_embeddings(target: Directory, entity: str, total: int,
                      partitions: Iterator[tuple[list[str], np.ndarray]], fmt: str) -> str:
    if fmt == "tsv":
        name = f"embeddings_{entity}.tsv"
        with target.writing(name) as path, open(path, "wb") as file:
            for names, embeddings in partitions:
                columns = [pa.array(names)] + [pa.array(column) for column in embeddings.T]
                table = pa.Table.from_arrays(columns, names=[str(i) for i in range(len(columns))])
                pa_csv.write_csv(table, file, TSV)
        return name
    if fmt == "h5":
        name = f"embeddings_{entity}.h5"
        with target.writing(name) as path, h5py.File(path, "w") as file:
            for names, embeddings in partitions:
                _append(file, "embeddings", embeddings.astype(np.float32))
                _append(file, "names", np.array(names, dtype=h5py.string_dtype()))
        return name
    name = f"embeddings_{entity}.npy"
    with target.writing(name) as path, target.writing(f"names_{entity}.txt") as names_path, \
            open(names_path, "w", encoding="utf-8") as names_file:
        array = None
        start = 0
        for names, embeddings in partitions:
            if array is None:  # the .npy is filled partition by partition, never held whole
                array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                                  shape=(total, embeddings.shape[1]))
            array[start:start + len(embeddings)] = embeddings
            start += len(embeddings)
            names_file.writelines(f"{n}\n" for n in names)
        if array is not None:
            array.flush()
            del array
    return name


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
                               entity_dir: Directory, target: Directory) -> str:
    """One row per parameter: owner (relation name or entity type), side, name, values."""
    if config.dynamic_relations:
        relation_names = read_relation_names(entity_dir)
    else:
        relation_names = [relation.name for relation in config.relations]
    params, _ = store.read_model(version)
    name = "relation_parameters.tsv"
    with target.writing(name) as path, open(path, "w", encoding="utf-8") as file:
        for public_name, (_, values) in sorted(params.items()):
            for owner, side, parameter, row in _parameter_rows(public_name, values,
                                                               relation_names):
                file.write("\t".join([owner, side, parameter, *map(repr, row.tolist())]) + "\n")
    return name


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
