"""Delimited text edge lists (TSV, CSV) cut into chunks of whole lines, each parsed by Arrow.

Arrow's streaming CSV reader buffers dozens of blocks ahead, so its memory follows the block
size times that depth; parsing one chunk of whole lines at a time keeps a chunk or two in
memory and tells exactly how many bytes and lines have been consumed, which gives progress and
the line number of any bad row. Lines have no header (unless skipped) and every line must have
the same number of columns as the first; empty lines are ignored.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from ..errors import FormatError
from .edge_blocks import Columns, EdgeBlock

# A chunk holds about `block_edges` lines, estimated from the first bytes of the file, within
# these bounds (a line longer than a chunk makes that chunk grow until the line ends).
MIN_CHUNK_BYTES = 64 * 2**10
MAX_CHUNK_BYTES = 256 * 2**20
SAMPLE_BYTES = 2**20


@dataclass(frozen=True)
class LineChunk:
    """Whole lines of a text file, starting at line `first_line` (1-based)."""

    data: bytes
    first_line: int
    end_offset: int  # bytes of the file consumed up to the end of this chunk

    def locator(self, start: int) -> Callable[[int], str]:
        """`location` of the rows of a block whose row 0 is this chunk's row `start`."""
        return lambda row: self.location(start + row)

    def location(self, row: int) -> str:
        """The line of non-empty row `row` (0-based) of this chunk, as the parser counts rows."""
        seen = -1
        for number, line in enumerate(self.data.split(b"\n"), start=self.first_line):
            if line.strip(b"\r"):
                seen += 1
                if seen == row:
                    return f"line {number}"
        return f"line {self.first_line}+"

    def span(self) -> str:
        last_line = self.first_line + self.data.rstrip(b"\n").count(b"\n")
        return f"lines {self.first_line}-{last_line}"

    def first_non_utf8(self) -> str | None:
        """Where the first byte that is not UTF-8 text is ('line 7, byte 3 (0xff)'); None
        if every line is text."""
        for number, line in enumerate(self.data.split(b"\n"), start=self.first_line):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return f"line {number}, byte {error.start + 1} (0x{line[error.start]:02x})"
        return None

    def first_nonempty_line(self) -> bytes:
        start = 0
        while start < len(self.data):
            end = self.data.find(b"\n", start)
            end = len(self.data) if end < 0 else end
            if self.data[start:end].strip(b"\r"):
                return self.data[start:end]
            start = end + 1
        return b""


class DelimitedText:
    """Reads the chosen columns of one delimited text file."""

    def __init__(self, url: str, delimiter: str, *, quoted: bool, columns: Columns) -> None:
        self.url = url
        self.columns = columns
        self.delimiter = delimiter
        self.quoted = quoted
        self.column_names: list[str] = []  # f0, f1... as many as the first line has

    def blocks(self, file: IO[bytes], size: int | None, block_edges: int,
               skip_rows: int = 0) -> Iterator[EdgeBlock]:
        """Blocks of at most `block_edges` rows; `size` (None: unknown) gives the progress."""
        first_row = 0
        header: list[bytes] = []
        parsed = ((chunk, self._parse(chunk, header))
                  for chunk in line_chunks(file, block_edges, skip_rows, header))
        for chunk, table in parsed:
            chosen = {index: _one_array(table.column(f"f{index}"))
                      for index in self.columns.needed}
            fraction = min(chunk.end_offset / size, 1.0) if size else None
            for start in range(0, table.num_rows, block_edges):
                piece = {index: column.slice(start, block_edges)
                         for index, column in chosen.items()}
                yield EdgeBlock.of_columns(piece, self.columns, first_row + start, fraction,
                                           chunk.locator(start))
            first_row += table.num_rows

    def _parse(self, chunk: LineChunk, header: list[bytes]) -> pa.Table:
        if self.columns.by_name:  # the last line skipped names the columns
            self.columns = self.columns.resolved(self._header(header), self.url)
        needed = [f"f{index}" for index in self.columns.needed]
        if not self.column_names:
            first_line = chunk.first_nonempty_line()
            if not first_line:  # only empty lines so far
                return pa.table({name: pa.array([], pa.large_string()) for name in needed})
            self.column_names = self._first_line_columns(first_line, chunk)
        invalid_rows: list[Any] = []

        def on_invalid_row(row: Any) -> str:
            invalid_rows.append(row)
            return "error"

        try:
            # Serial parsing numbers rows; the importer overlaps it with its own work by
            # reading blocks ahead in a thread of their own.
            return pa_csv.read_csv(
                pa.BufferReader(chunk.data),
                read_options=pa_csv.ReadOptions(column_names=self.column_names,
                                                use_threads=False,
                                                block_size=len(chunk.data) + 1),
                parse_options=self._parse_options(on_invalid_row),
                convert_options=pa_csv.ConvertOptions(
                    include_columns=needed, column_types=dict.fromkeys(needed,
                                                                       pa.large_string())))
        except pa.ArrowInvalid as error:
            if invalid_rows:
                raise self._bad_row_error(chunk, invalid_rows[0]) from None
            not_text = chunk.first_non_utf8() if "UTF8" in str(error) else None
            if not_text:
                raise FormatError(self.url, f"{not_text}: not UTF-8 text; convert the file to "
                                            "UTF-8 (e.g. iconv -t UTF-8)") from None
            raise FormatError(self.url, f"{chunk.span()}: cannot parse ({error})") from None

    def _parse_options(self, on_invalid_row: Callable[[Any], str] | None = None
                       ) -> pa_csv.ParseOptions:
        return pa_csv.ParseOptions(delimiter=self.delimiter,
                                   quote_char='"' if self.quoted else False,
                                   newlines_in_values=False, ignore_empty_lines=True,
                                   invalid_row_handler=on_invalid_row)

    def _header(self, skipped: list[bytes]) -> list[str]:
        """The column names: the fields of the last line skipped, as written."""
        if not skipped:
            raise FormatError(self.url, f"columns are given by name ({self.columns.roles()}), "
                                        "but no header line names them: pass --header")
        line = skipped[-1].decode("utf-8", errors="replace")
        if self.quoted:
            return next(csv.reader([line], delimiter=self.delimiter), [])
        return next(csv.reader([line], delimiter=self.delimiter, quoting=csv.QUOTE_NONE), [])

    def _first_line_columns(self, first_line: bytes, chunk: LineChunk) -> list[str]:
        table = pa_csv.read_csv(pa.BufferReader(first_line + b"\n"),
                                read_options=pa_csv.ReadOptions(autogenerate_column_names=True),
                                parse_options=self._parse_options())
        self._check_enough_columns(table.num_columns, chunk.location(0))
        return [f"f{index}" for index in range(table.num_columns)]

    def _check_enough_columns(self, count: int, where: str) -> None:
        if count <= max(self.columns.needed):
            raise FormatError(self.url, f"{where}: found {count} columns, but column "
                                        f"{max(self.columns.needed)} is needed "
                                        f"({self.columns.roles()})")

    def _bad_row_error(self, chunk: LineChunk, row: Any) -> FormatError:
        where = chunk.location(row.number - 1)
        self._check_enough_columns(row.actual_columns, where)
        return FormatError(self.url, f"{where}: found {row.actual_columns} columns, but the "
                                     f"first line has {row.expected_columns}; every line must "
                                     "have the same number of columns")


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array; a chunk is used as it is (`combine_chunks` would copy it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def line_chunks(file: IO[bytes], block_edges: int, skip_rows: int = 0,
                skipped: list[bytes] | None = None) -> Iterator[LineChunk]:
    """The file after `skip_rows` header lines, as chunks of about `block_edges` lines; the
    lines skipped are added to `skipped` (before the first chunk comes)."""
    pending = file.read(SAMPLE_BYTES)
    consumed = len(pending)
    line = 1
    while line <= skip_rows:
        end = pending.find(b"\n")
        if end < 0:
            more = file.read(SAMPLE_BYTES)
            if not more:
                return
            consumed += len(more)
            pending += more
            continue
        if skipped is not None:
            skipped.append(pending[:end].rstrip(b"\r"))
        pending = pending[end + 1:]
        line += 1
    chunk_bytes = _chunk_bytes(pending, block_edges)
    while True:
        if len(pending) < chunk_bytes or b"\n" not in pending:
            more = file.read(max(chunk_bytes - len(pending), SAMPLE_BYTES))
            if more:
                consumed += len(more)
                pending += more
                continue
            if pending:  # the last line, without a newline
                yield LineChunk(pending, line, consumed)
            return
        cut = pending.rfind(b"\n") + 1
        chunk = LineChunk(pending[:cut], line, consumed - (len(pending) - cut))
        line += chunk.data.count(b"\n")
        pending = pending[cut:]
        yield chunk


def _chunk_bytes(sample: bytes, block_edges: int) -> int:
    lines = sample.count(b"\n") or 1
    estimate = block_edges * max(len(sample) // lines, 1)
    return min(max(estimate, MIN_CHUNK_BYTES), MAX_CHUNK_BYTES)
