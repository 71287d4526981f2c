"""A trained checkpoint opened for queries: embeddings by name and nearest neighbours.

`tessera.load(...)` returns a `TrainedModel`; `tessera neighbors` uses the same object. The
model file (relation operators, global embeddings) is read once; embeddings and names are read
from the checkpoint and entity files when a query needs them, a partition (or a block of one)
at a time, so that a query on a graph of any size needs the memory of one block.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config import ConfigSchema, parse_config, read_config_dict
from ..data.graph_data import GraphData
from ..errors import BadInputError
from ..model import EmbeddingModel
from ..model.model_io import load_model
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore
from ..storage.entities import (
    DYNAMIC_RELATION_NAMES_FILE,
    is_published,
    read_relation_names,
)
from .names import EntityRow, locate, names_of, partition_names
from .scoring import SIDES, Comparison, ModelScoring, RelationSide
from .search import Hit, block_rows_for, search


@dataclass(frozen=True)
class Neighbor:
    """An entity found near a query, with the model's score (higher is nearer)."""

    name: str
    entity_type: str
    score: float


def load(config: str | os.PathLike[str] | Mapping[str, Any] | ConfigSchema,
         reporter: Reporter | None = None, **overrides: Any) -> TrainedModel:
    """Open the latest checkpoint of a config (a file, a mapping or a parsed config); keyword
    arguments override its top-level keys (`checkpoint_path=...`)."""
    if isinstance(config, ConfigSchema):
        raw = config.to_dict()
    elif isinstance(config, Mapping):
        raw = dict(config)
    else:
        raw = read_config_dict(os.fspath(config))
    raw.update(overrides)
    return TrainedModel(parse_config(raw), reporter)


class TrainedModel:
    """The latest checkpoint of a config, for lookups and nearest-neighbour queries."""

    def __init__(self, config: ConfigSchema, reporter: Reporter | None = None) -> None:
        self.config = config
        self.reporter = reporter or Reporter("quiet")
        self.store = CheckpointStore.from_config(config)
        self.version = self.store.readable_version("query")
        self._data = GraphData(config)
        self.entity_counts = self._data.entity_counts
        self.relation_names = self._read_relation_names()
        model = EmbeddingModel(config, len(self.relation_names))
        load_model(self.store, self.version, model, None)
        model.eval()
        self._scoring = ModelScoring(config, model)

    @property
    def entity_types(self) -> list[str]:
        return list(self.config.entities)

    def entity_names(self, entity_type: str) -> list[str]:
        """Every name of an entity type, in partition and offset order (held in memory)."""
        counts = self._counts(entity_type)
        return [name for part, count in enumerate(counts)
                for name in partition_names(self._data.entity_dir, entity_type, part, count)]

    def embedding(self, name: str, entity_type: str | None = None) -> torch.Tensor:
        """An entity's row as the checkpoint stores it (what `tessera export` writes)."""
        row = self._locate([name], entity_type)[name]
        return self._rows([row])[0]

    def neighbors(self, name: str, k: int = 10, *, entity_type: str | None = None,
                  relation: str | None = None, side: str = "rhs",
                  block_rows: int | None = None) -> list[Neighbor]:
        """The k entities nearest to `name`, best first; see `neighbors_of_each`."""
        return self.neighbors_of_each([name], k, entity_type=entity_type, relation=relation,
                                      side=side, block_rows=block_rows)[name]

    def neighbors_of_each(self, names: Sequence[str], k: int = 10, *,
                          entity_type: str | None = None, relation: str | None = None,
                          side: str = "rhs",
                          block_rows: int | None = None) -> dict[str, list[Neighbor]]:
        """For each name, the k best-scored entities, best first, in one pass over them.

        Without `relation`: entities of the name's type by the comparator, the name itself
        left out. With it: the `side` ("rhs": right-hand sides of (name, relation, ?); "lhs":
        left-hand sides of (?, relation, name)) as the model ranks them. `block_rows` caps the
        rows read and scored at once (default: bounded by the number of names).
        """
        if k < 1:
            raise BadInputError(f"k must be at least 1, got {k}")
        if block_rows is not None and block_rows < 1:
            raise BadInputError(f"block_rows must be at least 1, got {block_rows}")
        relation_side = None if relation is None else self._relation_side(relation, side)
        if relation_side is not None and entity_type is None:
            entity_type = self._scoring.side_types(relation_side.index)[
                "lhs" if relation_side.side == "rhs" else "rhs"]
        unique = list(dict.fromkeys(names))
        rows = self._locate(unique, entity_type)
        groups: dict[str, list[str]] = {}
        for name in unique:
            groups.setdefault(rows[name].entity_type, []).append(name)
        comparisons = [(group, self._comparison(kind, [rows[n] for n in group], relation_side))
                       for kind, group in groups.items()]
        total = sum(sum(self._counts(c.candidate_type)) for _, c in comparisons)
        found: dict[str, list[Hit]] = {}
        with self.reporter.task("neighbors", total=total, unit="entities") as task:
            for group, comparison in comparisons:
                excluded = [rows[n] if relation_side is None else None for n in group]
                kind = comparison.candidate_type
                rows_per_block = block_rows_for(len(group), self.config.entity_dimension(kind),
                                                block_rows)
                hits = search(self._blocks(kind, rows_per_block), self._scoring, comparison, k,
                              excluded, task)
                found.update(zip(group, hits))
        hit_names = names_of(self._data.entity_dir, self.entity_counts,
                             {hit.row for hits in found.values() for hit in hits})
        return {name: [Neighbor(hit_names[hit.row], hit.row.entity_type, hit.score)
                       for hit in found[name]] for name in names}

    def _comparison(self, kind: str, rows: list[EntityRow],
                    relation: RelationSide | None) -> Comparison:
        query_rows = self._rows(rows)
        if relation is None:
            return self._scoring.similarity(kind, query_rows)
        return self._scoring.relation(relation, kind, query_rows)

    def _counts(self, entity_type: str) -> list[int]:
        if entity_type not in self.entity_counts:
            raise BadInputError(f"unknown entity type '{entity_type}'; the config has "
                                f"{', '.join(self.entity_counts)}")
        if self.config.entities[entity_type].featurized:
            raise BadInputError(f"entity type '{entity_type}' is featurized: its table rows are "
                                "features, not entities, so it has no entity embeddings to query")
        return self.entity_counts[entity_type]

    def _locate(self, names: Sequence[str], entity_type: str | None) -> dict[str, EntityRow]:
        if entity_type is not None:
            self._counts(entity_type)
        counts = {kind: counts for kind, counts in self.entity_counts.items()
                  if not self.config.entities[kind].featurized}
        return locate(self._data.entity_dir, counts, names, entity_type)

    def _rows(self, rows: Sequence[EntityRow]) -> torch.Tensor:
        """The stored rows of some entities, in the order given, each partition read once."""
        result = torch.empty((len(rows), max(
            (self.config.entity_dimension(row.entity_type) for row in rows), default=0)))
        by_partition: dict[tuple[str, int], list[int]] = {}
        for position, row in enumerate(rows):
            by_partition.setdefault((row.entity_type, row.part), []).append(position)
        for (kind, part), positions in by_partition.items():
            offsets = np.array([rows[p].offset for p in positions])
            values = self.store.read_embedding_rows(
                kind, part, self.version, offsets, num_entities=self.entity_counts[kind][part],
                dimension=self.config.entity_dimension(kind))
            result[positions] = torch.from_numpy(values)
        return result

    def _blocks(self, entity_type: str, block_rows: int) -> Iterator[tuple[int, int,
                                                                          np.ndarray]]:
        """(partition, first offset, rows) of an entity type's embeddings, block by block."""
        for part, count in enumerate(self._counts(entity_type)):
            for start, rows in self.store.embedding_blocks(
                    entity_type, part, self.version, block_rows=block_rows, num_entities=count,
                    dimension=self.config.entity_dimension(entity_type)):
                yield part, start, rows

    def _relation_side(self, relation: str, side: str) -> RelationSide:
        if side not in SIDES:
            raise BadInputError(f"side must be one of {', '.join(SIDES)}, got {side!r}")
        if relation not in self.relation_names:
            shown = ", ".join(self.relation_names[:20])
            more = len(self.relation_names) - 20
            raise BadInputError(f"unknown relation {relation!r}; the relations are {shown}"
                                f"{f' (and {more} more)' if more > 0 else ''}")
        return RelationSide(self.relation_names.index(relation), side)

    def _read_relation_names(self) -> list[str]:
        if not self.config.dynamic_relations:
            return [relation.name for relation in self.config.relations]
        if is_published(self._data.entity_dir, DYNAMIC_RELATION_NAMES_FILE):
            return read_relation_names(self._data.entity_dir)
        return [str(index) for index in range(self._data.num_relations)]
