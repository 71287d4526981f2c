"""What the readers hand to the importer: blocks of name columns that know their rows' origin."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..errors import FormatError

Column = int | str  # a 0-based index, or a name from the input's header or schema


@dataclass(frozen=True)
class Columns:
    """Which columns hold the left entity, the right entity and the relation: 0-based
    indices, or names that `resolved` turns into the indices of one input."""

    lhs: Column
    rhs: Column
    rel: Column | None = None

    @property
    def by_name(self) -> bool:
        return any(isinstance(column, str) for column in (self.lhs, self.rhs, self.rel))

    @property
    def needed(self) -> list[int]:
        """The indices read (of resolved columns)."""
        chosen = {self.lhs, self.rhs} | ({self.rel} if self.rel is not None else set())
        return sorted(column for column in chosen if isinstance(column, int))

    def resolved(self, header: Sequence[str], url: str) -> Columns:
        """The columns as indices into `header` (the input's column names)."""
        def index(role: str, column: Column | None) -> int | None:
            if not isinstance(column, str):
                return column
            if column not in header:
                raise FormatError(url, f"no column is named {column!r} (the {role} column); "
                                       f"its columns: {', '.join(header) or 'none'}")
            return list(header).index(column)

        lhs, rhs = index("lhs", self.lhs), index("rhs", self.rhs)
        assert lhs is not None and rhs is not None
        return Columns(lhs, rhs, index("rel", self.rel))

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
        assert isinstance(columns.lhs, int) and isinstance(columns.rhs, int)
        return cls(chosen[columns.lhs], chosen[columns.rhs],
                   chosen[columns.rel] if isinstance(columns.rel, int) else None,
                   first_row, fraction_read, row_location)

    def __len__(self) -> int:
        return len(self.lhs)

    def row_location(self, row: int) -> str:
        """Where row `row` of this block is in the file, in words ("line 17")."""
        return self._row_location(row)
