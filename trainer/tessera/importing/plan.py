"""What an import will do, resolved from the config, the inputs and the options.

Everything that can be wrong before reading any data (how many inputs, which columns, which
format, which relation and entity types) is checked here, and each error names the config key
or the option to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config.schema import ConfigSchema
from ..errors import BadInputError, ConfigError
from ..storage.fs import Directory
from .edge_blocks import Columns
from .featurized_plan import check_featurized
from .options import ImportOptions
from .partitioning import PARTITIONINGS
from .readers import detect_format


@dataclass(frozen=True)
class InputPlan:
    """One input file and the edge directory its buckets go to."""

    url: str
    input_format: str
    edge_dir: Directory


@dataclass(frozen=True)
class ImportPlan:
    """The resolved import. Entity types are numbered ("kinds") in config order."""

    inputs: list[InputPlan]
    entity_dir: Directory
    entity_types: list[str]
    type_partitions: list[int]  # num_partitions of each entity type
    relation_names: list[str]  # the config's relations (the template with dynamic relations)
    dynamic_relations: bool
    lhs_kinds: np.ndarray  # entity type of each config relation's left side
    rhs_kinds: np.ndarray
    grid: tuple[int, int]  # (lhs, rhs) partitions of the bucket grid
    columns: Columns
    options: ImportOptions
    storage_options: dict

    def side_kinds(self, side: str, relations: np.ndarray) -> np.ndarray | int:
        """The entity type of one side of each edge, given its relation (config index)."""
        kinds = self.lhs_kinds if side == "lhs" else self.rhs_kinds
        if self.dynamic_relations or (kinds == kinds[0]).all():
            return int(kinds[0])  # one type for every edge: no per-edge array needed
        return kinds[relations]

    def spread_sides(self, side: str) -> np.ndarray:
        """For each config relation, whether that side's edges are spread over the grid at
        random: its entity type is unpartitioned while the grid is partitioned on that side."""
        kinds = self.lhs_kinds if side == "lhs" else self.rhs_kinds
        grid_parts = self.grid[0] if side == "lhs" else self.grid[1]
        return np.array([self.type_partitions[kind] == 1 and grid_parts > 1 for kind in kinds])

    @property
    def buckets(self) -> list[tuple[int, int]]:
        return [(lhs, rhs) for lhs in range(self.grid[0]) for rhs in range(self.grid[1])]


def plan_import(config: ConfigSchema, inputs: Sequence[str],
                options: ImportOptions) -> ImportPlan:
    """Check the request and resolve it; raises ConfigError or BadInputError."""
    _check_inputs(config, inputs)
    _check_options(options)
    _check_relations(config, options)
    entity_types = list(config.entities)
    kind_of = {name: kind for kind, name in enumerate(entity_types)}
    relations = config.relations[:1] if config.dynamic_relations else config.relations
    check_featurized(config, relations, options)
    return ImportPlan(
        inputs=[InputPlan(url, detect_format(url, options.input_format),
                          Directory.from_config(edge_path, config))
                for url, edge_path in zip(inputs, config.edge_paths)],
        entity_dir=Directory.from_config(config.entity_path, config),
        entity_types=entity_types,
        type_partitions=[config.entities[name].num_partitions for name in entity_types],
        relation_names=[relation.name for relation in relations],
        dynamic_relations=config.dynamic_relations,
        lhs_kinds=np.array([kind_of[relation.lhs] for relation in relations]),
        rhs_kinds=np.array([kind_of[relation.rhs] for relation in relations]),
        grid=config.partition_grid(),
        columns=Columns(options.lhs_col, options.rhs_col, options.rel_col),
        options=options,
        storage_options=dict(config.storage_options),
    )


def _check_inputs(config: ConfigSchema, inputs: Sequence[str]) -> None:
    if len(inputs) != len(config.edge_paths):
        raise ConfigError("edge_paths", f"{len(config.edge_paths)} edge path(s) but "
                          f"{len(inputs)} input(s) were given; give one input per entry of "
                          "edge_paths, in the same order")


def _check_options(options: ImportOptions) -> None:
    for flag in ("lhs_col", "rhs_col", "rel_col"):
        value = getattr(options, flag)
        if isinstance(value, int) and value < 0:
            raise BadInputError(f"{flag} must be a 0-based column index, got {value}")
    if options.rel_col is not None and options.rel_col in (options.lhs_col, options.rhs_col):
        raise BadInputError(f"rel_col ({options.rel_col}) must differ from lhs_col and rhs_col")
    if options.partitioning not in PARTITIONINGS:
        raise BadInputError(f"unknown partitioning {options.partitioning!r}; choose one of "
                            f"{', '.join(PARTITIONINGS)}")
    for flag in ("entity_min_count", "relation_type_min_count", "block_edges"):
        if getattr(options, flag) < 1:
            raise BadInputError(f"{flag} must be at least 1, got {getattr(options, flag)}")
    for flag in ("skip_rows", "seed"):
        if getattr(options, flag) < 0:
            raise BadInputError(f"{flag} must not be negative, got {getattr(options, flag)}")
    if options.delimiter is not None and len(options.delimiter) != 1:
        raise BadInputError(f"delimiter must be one character, got {options.delimiter!r}")


def _check_relations(config: ConfigSchema, options: ImportOptions) -> None:
    if options.rel_col is not None:
        return
    if config.dynamic_relations:
        raise ConfigError("dynamic_relations", "with dynamic relations the relation types come "
                          "from the data: give the relation column (rel_col)")
    if len(config.relations) != 1:
        raise ConfigError("relations", f"{len(config.relations)} relations are declared but no "
                          "relation column (rel_col) was given; give it, or declare one relation")
