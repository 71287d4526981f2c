"""What the readers hand to the importer: blocks of name columns that know their rows' origin."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Columns:
    """Which 0-based columns hold the left entity, the right entity and the relation."""

    lhs: int
    rhs: int
    rel: int | None = None

    @property
    def needed(self) -> list[int]:
        return sorted({self.lhs, self.rhs} | ({self.rel} if self.rel is not None else set()))

    def roles(self) -> str:
        """The columns in words, for messages: "lhs=0, rhs=2, rel=1"."""
        roles = [f"lhs={self.lhs}", f"rhs={self.rhs}"]
        if self.rel is not None:
            roles.append(f"rel={self.rel}")
        return ", ".join(roles)


@dataclass(frozen=True)
class EdgeBlock:
    """Consecutive rows of one input: name columns and where each row came from."""

    lhs: pa.Array  # large_string
    rhs: pa.Array
    rel: pa.Array | None
    first_row: int  # 0-based index of this block's first row among the input's edges
    fraction_read: float | None  # share of the input consumed so far (None: unknown)
    _row_location: Callable[[int], str]

    @classmethod
    def of_columns(cls, chosen: Mapping[int, pa.Array], columns: Columns, first_row: int,
                   fraction_read: float | None,
                   row_location: Callable[[int], str]) -> EdgeBlock:
        """A block from the needed columns, by column index."""
        return cls(chosen[columns.lhs], chosen[columns.rhs],
                   chosen[columns.rel] if columns.rel is not None else None,
                   first_row, fraction_read, row_location)

    def __len__(self) -> int:
        return len(self.lhs)

    def row_location(self, row: int) -> str:
        """Where row `row` of this block is in the file, in words ("line 17")."""
        return self._row_location(row)
