"""Parquet edge lists read by record batches, the chosen columns (by index or by name) as
names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import FormatError
from .edge_blocks import Columns, EdgeBlock


def parquet_blocks(url: str, file: IO[bytes], columns: Columns,
                   block_edges: int) -> Iterator[EdgeBlock]:
    """Blocks of at most `block_edges` rows; rows are named "row N" (1-based)."""
    try:
        parquet = pq.ParquetFile(file)
    except (pa.ArrowInvalid, OSError) as error:
        raise FormatError(url, f"not a readable Parquet file ({error})") from error
    names = parquet.schema_arrow.names
    columns = columns.resolved(names, url)
    for index in columns.needed:
        if index >= len(names):
            raise FormatError(url, f"column {index} is needed but the file has {len(names)} "
                                   f"columns ({', '.join(names)})")
    total_rows = parquet.metadata.num_rows
    first_row = 0
    for batch in parquet.iter_batches(batch_size=block_edges,
                                      columns=[names[i] for i in columns.needed]):
        chosen = {index: _as_names(url, batch.column(position), first_row, names[index])
                  for position, index in enumerate(columns.needed)}
        yield EdgeBlock.of_columns(chosen, columns, first_row,
                                   (first_row + batch.num_rows) / total_rows,
                                   _row_location(first_row))
        first_row += batch.num_rows


def _row_location(start: int) -> Callable[[int], str]:
    """Where row `row` of a batch whose first row is the file's row `start` (0-based) is."""
    return lambda row: f"row {start + row + 1}"


def _as_names(url: str, column: pa.Array, first_row: int, name: str) -> pa.Array:
    """A column as large strings; ids stored as integers become their decimal text."""
    if column.null_count:
        row = first_row + int(pc.index(pc.is_null(column), True).as_py()) + 1
        raise FormatError(url, f"row {row}: column {name!r} is null; every edge needs a name "
                               "in each name column: fill it or drop the row")
    try:
        return column.cast(pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise FormatError(url, f"column {name!r} of type {column.type} cannot be read as "
                               f"names ({error})") from error
