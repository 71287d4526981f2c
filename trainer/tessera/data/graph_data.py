"""Where a run's data lives and what it holds: entity counts, relation count, edge buckets.

This module turns bucket files into validated `EdgeList`s. Validation is per relation type,
because one bucket file mixes relations whose sides may be different entity types.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from ..config import ConfigSchema
from ..edgelist import EdgeList, EntityList
from ..errors import BadInputError, ConfigError, FormatError
from ..storage.checkpoint import CheckpointStore
from ..storage.edges import bucket_file, read_bucket, read_bucket_size
from ..storage.entities import read_dynamic_relation_count, read_entity_counts
from ..storage.fs import Directory
from ..vocabulary import Bucket, PartitionKey, all_buckets, chunk_range


@dataclass
class GraphData:
    """The entity counts and edge directories of one config."""

    config: ConfigSchema

    @cached_property
    def entity_dir(self) -> Directory:
        return Directory.from_config(self.config.entity_path, self.config)

    @cached_property
    def edge_dirs(self) -> list[Directory]:
        return [Directory.from_config(path, self.config) for path in self.config.edge_paths]

    @cached_property
    def replay_dirs(self) -> list[Directory]:
        """The old edge sets mixed into every bucket (`replay_paths`, as the trainer resolved
        it from the init_path checkpoint)."""
        return [Directory.from_config(path, self.config)
                for path in self.config.replay_paths or []]

    @cached_property
    def entity_counts(self) -> dict[str, list[int]]:
        return read_entity_counts(self.entity_dir, self.config)

    def check_unchanged(self) -> None:
        """Refuse to commit a checkpoint when entity_path was imported into since this run
        read it: the new buckets name entities the run's tables may not hold, so what it
        trained since may mix two imports; the last checkpoint still matches the old data."""
        now = read_entity_counts(self.entity_dir, self.config)
        for entity, counts in self.entity_counts.items():
            if now.get(entity) != counts:
                raise BadInputError(
                    f"{self.entity_dir.url}: an import changed the entities while this run "
                    f"trained ({entity}: {counts} entities per partition, now "
                    f"{now.get(entity)}); it stopped before committing, so the last checkpoint "
                    "matches the data it started on. Train on the new data from that "
                    "checkpoint with init_path, and import while no run trains on entity_path")

    @cached_property
    def known_rows(self) -> dict[PartitionKey, int] | None:
        """Rows per partition that the `init_path` checkpoint holds (entities it was trained
        on); None without init_path, or when no partition has grown since."""
        init = CheckpointStore.init_from_config(self.config)
        if init is None:
            return None
        version = init.current_version()
        rows = {(entity, part): init.embeddings_rows(entity, part, version)
                for entity, counts in self.entity_counts.items()
                for part in range(len(counts))}
        grown = any(rows[(entity, part)] < count for entity, counts in self.entity_counts.items()
                    for part, count in enumerate(counts))
        return rows if grown else None

    def between_known(self, bucket: Bucket, edges: EdgeList) -> torch.Tensor:
        """Which of a bucket's edges join two entities the `init_path` checkpoint has (all,
        when nothing grew)."""
        known = self.known_rows
        if known is None:
            return torch.ones(len(edges), dtype=torch.bool)
        lhs_keys, rhs_keys = self.partition_keys(bucket)
        return (_known_side(edges.lhs, edges.rel, [known[key] for key in lhs_keys])
                & _known_side(edges.rhs, edges.rel, [known[key] for key in rhs_keys]))

    @cached_property
    def num_relations(self) -> int:
        """Relation types: the config's, or with dynamic relations the imported count."""
        if self.config.dynamic_relations:
            return read_dynamic_relation_count(self.entity_dir)
        return len(self.config.relations)

    def relation_types(self, side: str) -> list[str]:
        """The entity type on `side` of each relation type (dynamic ones share relation 0's)."""
        relations = self.config.relations
        if self.config.dynamic_relations:
            return [getattr(relations[0], side)] * self.num_relations
        return [getattr(relation, side) for relation in relations]

    def bucket_grid(self) -> list[Bucket]:
        return all_buckets(*self.config.partition_grid())

    @cached_property
    def bucket_sizes(self) -> list[dict[Bucket, int]]:
        """Edges per bucket of each edge set, read once (each read opens a possibly remote
        file)."""
        return [{b: read_bucket_size(directory, b.lhs, b.rhs) for b in self.bucket_grid()}
                for directory in self.edge_dirs]

    def max_bucket_size(self) -> int:
        return max((size for sizes in self.bucket_sizes for size in sizes.values()), default=0)

    @cached_property
    def replay_sizes(self) -> list[dict[Bucket, int]]:
        """Edges per bucket of each replay path, read once."""
        return [{b: read_bucket_size(directory, b.lhs, b.rhs) for b in self.bucket_grid()}
                for directory in self.replay_dirs]

    def read_edges(self, edge_path_idx: int, bucket: Bucket, start: int = 0,
                   stop: int | None = None) -> EdgeList:
        """Edges [start, stop) of a bucket, checked against the entity counts."""
        return self._read(self.edge_dirs[edge_path_idx], bucket, start, stop)

    def read_replay(self, bucket: Bucket, part: int, num_parts: int) -> EdgeList | None:
        """Part `part` of `num_parts` contiguous parts of the bucket's replayed edges, from
        every replay path (None: nothing is replayed)."""
        if not self.replay_dirs:
            return None
        return EdgeList.cat([
            self._read(directory, bucket, *chunk_range(sizes[bucket], part, num_parts))
            for directory, sizes in zip(self.replay_dirs, self.replay_sizes)])

    def _read(self, directory: Directory, bucket: Bucket, start: int,
              stop: int | None) -> EdgeList:
        edges = read_bucket(directory, bucket.lhs, bucket.rhs, start, stop,
                            num_relations=self.num_relations)
        file = directory.url_of(bucket_file(bucket.lhs, bucket.rhs))
        sides = []
        for side, part in (("lhs", bucket.lhs), ("rhs", bucket.rhs)):
            ids, offsets, data = (getattr(edges, side), getattr(edges, f"{side}_offsets"),
                                  getattr(edges, f"{side}_data"))
            if offsets is None:
                self._check_ranges(file, side, part, edges.rel, ids)
                sides.append(EntityList.from_ids(torch.from_numpy(ids)))
            else:  # featurized: every feature id must be a row of the feature table
                owners = np.repeat(edges.rel, np.diff(offsets))
                self._check_ranges(file, f"{side} feature", part, owners, data)
                sides.append(EntityList.from_features(torch.from_numpy(offsets),
                                                      torch.from_numpy(data)))
        return EdgeList(rel=torch.from_numpy(edges.rel), lhs=sides[0], rhs=sides[1])

    def read_chunk(self, edge_path_idx: int, bucket: Bucket, chunk_idx: int,
                   num_chunks: int) -> EdgeList:
        """One of the `num_chunks` contiguous chunks of a bucket (seed 003's edge chunks)."""
        size = self.bucket_sizes[edge_path_idx][bucket]
        return self.read_edges(edge_path_idx, bucket, *chunk_range(size, chunk_idx, num_chunks))

    def partition_of(self, entity: str, part: int) -> int:
        """The partition of `entity` in a bucket side numbered `part`: unpartitioned types
        always live in partition 0."""
        return part if self.config.entities[entity].num_partitions > 1 else 0

    def partition_keys(self, bucket: Bucket) -> tuple[list[PartitionKey], list[PartitionKey]]:
        """For each relation type, the partitions of its left and right sides in `bucket`."""
        return ([(t, self.partition_of(t, bucket.lhs)) for t in self.relation_types("lhs")],
                [(t, self.partition_of(t, bucket.rhs)) for t in self.relation_types("rhs")])

    def partition_size(self, entity: str, part: int) -> int:
        return self.entity_counts[entity][self.partition_of(entity, part)]

    def _check_ranges(self, file: str, what: str, part: int, rel: np.ndarray,
                      ids: np.ndarray) -> None:
        side = what.split()[0]
        types = self.relation_types(side)
        limits = np.array([self.partition_size(t, part) for t in types])
        if len(ids) == 0 or ((limits == limits[0]).all() and ids.min() >= 0
                             and ids.max() < limits[0]):
            return  # one bound for every relation type: no bucket-sized temporaries
        bad = np.flatnonzero((ids < 0) | (ids >= limits[rel]))
        if len(bad):
            self.check_unchanged()  # the likelier cause, mid-run: an import since the start
            row = int(bad[0])
            raise FormatError(file, f"{what} id {ids[row]} at position {row} (relation "
                              f"{rel[row]}) is out of range for entity type "
                              f"'{types[rel[row]]}' partition {part}, which has "
                              f"{limits[rel[row]]} rows; re-import the data or fix entity_path")


def _known_side(side: EntityList, rel: torch.Tensor, known_rows: list[int]) -> torch.Tensor:
    """Which edges have a known entity on this side (`known_rows`: per relation type). A
    featurized side counts as known: its rows are features, not entities."""
    if side.is_featurized:
        return torch.ones(len(side), dtype=torch.bool)
    return side.ids < torch.tensor(known_rows, dtype=torch.long)[rel]


def check_has_edges(data: GraphData) -> None:
    """Refuse an edge set whose buckets are all empty: training on it would do nothing and
    "succeed", and its metrics would be averages over nothing."""
    for path, sizes in zip(data.config.edge_paths, data.bucket_sizes):
        if not any(sizes.values()):
            raise FormatError(path, f"no edges in this edge set (all {len(sizes)} of its "
                                    "buckets are empty); import edges into it with `tessera "
                                    "import`, or leave it out of edge_paths")


def check_flag_edge_sets(config: ConfigSchema, flag: str, paths: list[str]) -> None:
    """Refuse, naming the command-line `flag` that gave it, a path holding no edge set (or
    an empty one): found before the work, not as a bad `edge_paths` after it."""
    for path in paths:
        try:
            check_has_edges(GraphData(dataclasses.replace(config, edge_paths=[path])))
        except BadInputError as error:
            raise ConfigError(flag, str(error)) from None


def check_edge_paths(config: ConfigSchema) -> None:
    if not config.edge_paths:
        raise ConfigError("edge_paths", "no edge sets to train on; give at least one edge path")
