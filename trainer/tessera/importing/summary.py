"""What an import did: edges per input, entities per type and partition, time taken."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InputSummary:
    """One input file and the edge directory it was written to."""

    url: str
    edge_path: str
    edges_read: int  # data rows of the input
    edges_written: int  # edges in its buckets

    @property
    def edges_dropped(self) -> int:
        """Edges left out because an entity or relation type was below its min count."""
        return self.edges_read - self.edges_written


@dataclass(frozen=True)
class ImportSummary:
    inputs: list[InputSummary]
    entity_counts: dict[str, list[int]]  # entities of each type in each of its partitions
    entities_dropped: dict[str, int]  # entities of each type below entity_min_count
    relation_types: int  # relation types the buckets use (with dynamic relations: found)
    relation_types_dropped: int  # dynamic relation types below relation_type_min_count
    seconds: float  # wall time of the whole import
    dictionary_extended: bool = False  # entity_path held a dictionary, which was extended
    entities_new: dict[str, int] = dataclasses.field(default_factory=dict)  # not known before
    relation_types_new: int = 0  # relation types not known before (all, in a new dictionary)

    @property
    def edges_read(self) -> int:
        return sum(entry.edges_read for entry in self.inputs)

    @property
    def edges_written(self) -> int:
        return sum(entry.edges_written for entry in self.inputs)

    @property
    def edges_dropped(self) -> int:
        return self.edges_read - self.edges_written

    @property
    def edges_per_second(self) -> float:
        return self.edges_read / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, totals included."""
        return {
            **dataclasses.asdict(self),
            "inputs": [{**dataclasses.asdict(entry), "edges_dropped": entry.edges_dropped}
                       for entry in self.inputs],
            "edges_read": self.edges_read,
            "edges_written": self.edges_written,
            "edges_dropped": self.edges_dropped,
            "edges_per_second": round(self.edges_per_second, 1),
        }
