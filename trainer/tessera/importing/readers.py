"""Edge-list files read as blocks of name columns: TSV/CSV through pyarrow.csv, Parquet by batches.

A reader yields `EdgeBlock`s of at most `block_edges` rows holding the chosen columns (0-based
indices) as Arrow strings, and can say where any of its rows came from ("line 17" of a text
file, "row 17" of a Parquet file), so that an error names the line a user can open.

Text is cut into chunks at line boundaries here and each chunk is parsed on its own: Arrow's
streaming CSV reader buffers dozens of blocks ahead, which would make memory follow the block
size times that depth, while a chunk at a time keeps one chunk in memory and knows exactly
how many bytes and lines it has consumed. Inputs may be compressed (by file extension).
"""

from __future__ import annotations

import contextlib
import posixpath
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ..errors import BadInputError, FormatError
from ..storage.fs import translate_errors

FORMATS = ("tsv", "csv", "parquet")
EXTENSION_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".parquet": "parquet",
                     ".pq": "parquet"}
DEFAULT_DELIMITERS = {"tsv": "\t", "csv": ","}
# A text chunk holds about `block_edges` lines, estimated from the first bytes of the file,
# within these bounds (a line longer than a chunk makes that chunk grow until it fits).
MIN_CHUNK_BYTES = 64 * 2**10
MAX_CHUNK_BYTES = 256 * 2**20
SAMPLE_BYTES = 2**20
READ_AHEAD = True


@dataclass(frozen=True)
class Columns:
    """Which 0-based columns hold the left entity, the right entity and the relation."""

    lhs: int
    rhs: int
    rel: int | None = None

    @property
    def needed(self) -> list[int]:
        return sorted({self.lhs, self.rhs} | ({self.rel} if self.rel is not None else set()))


@dataclass(frozen=True)
class EdgeBlock:
    """Consecutive rows of one input: name columns and where each row came from."""

    lhs: pa.Array  # large_string
    rhs: pa.Array
    rel: pa.Array | None
    first_row: int  # 0-based index of this block's first row among the input's edges
    fraction_read: float | None  # share of the input consumed so far (None: unknown)
    _row_location: Callable[[int], str]

    def __len__(self) -> int:
        return len(self.lhs)

    def row_location(self, row: int) -> str:
        """Where row `row` of this block is in the file, in words ("line 17")."""
        return self._row_location(row)


def detect_format(url: str, input_format: str | None) -> str:
    """The format to read `url` as: the one given, else from its extension."""
    if input_format is not None:
        if input_format not in FORMATS:
            raise BadInputError(f"unknown input format {input_format!r}; choose one of "
                                f"{', '.join(FORMATS)}")
        return input_format
    name = posixpath.basename(url.rstrip("/")).lower()
    if fsspec.utils.infer_compression(name):
        name = posixpath.splitext(name)[0]
    extension = posixpath.splitext(name)[1]
    if extension not in EXTENSION_FORMATS:
        raise BadInputError(f"{url}: cannot tell the format from the extension "
                            f"{extension or '(none)'!r}; pass the format (tsv, csv or parquet)")
    return EXTENSION_FORMATS[extension]


def read_edge_blocks(url: str, *, input_format: str, columns: Columns, block_edges: int,
                     delimiter: str | None = None, skip_rows: int = 0,
                     storage_options: Mapping[str, Any] | None = None) -> Iterator[EdgeBlock]:
    """Stream the chosen columns of an edge-list file in blocks of at most `block_edges` rows."""
    with translate_errors(url), _open_input(url, storage_options or {}) as (file, size):
        if input_format == "parquet":
            yield from _parquet_blocks(url, file, columns, block_edges)
        else:
            text = _TextFormat(url, delimiter or DEFAULT_DELIMITERS[input_format],
                               quoted=input_format == "csv", columns=columns)
            yield from text.blocks(file, size, block_edges, skip_rows)


@contextlib.contextmanager
def _open_input(url: str, storage_options: Mapping[str, Any]) -> Iterator[tuple[IO[bytes],
                                                                                int | None]]:
    """The input as a binary file (decompressed if its extension says so), and its size when
    the bytes read map to it (uncompressed)."""
    opener = fsspec.open(url, "rb", compression="infer", **storage_options)
    try:
        file = opener.open()
        size = None if opener.compression else opener.fs.size(opener.path)
    except (FileNotFoundError, IsADirectoryError) as error:
        raise BadInputError(f"{url}: input file not found") from error
    with file:
        yield file, size


def _parquet_blocks(url: str, file: IO[bytes], columns: Columns,
                    block_edges: int) -> Iterator[EdgeBlock]:
    try:
        parquet = pq.ParquetFile(file)
    except (pa.ArrowInvalid, OSError) as error:
        raise FormatError(url, f"not a readable Parquet file ({error})") from error
    names = parquet.schema_arrow.names
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
        first_row += batch.num_rows
        yield _block(chosen, columns, first_row - batch.num_rows,
                     first_row / total_rows if total_rows else 1.0,
                     lambda row, start=first_row - batch.num_rows: f"row {start + row + 1}")


def _as_names(url: str, column: pa.Array, first_row: int, name: str) -> pa.Array:
    """A Parquet column as large strings; ids stored as integers become their decimal text."""
    if column.null_count:
        row = first_row + int(pc.index(pc.is_null(column), True).as_py()) + 1
        raise FormatError(url, f"row {row}: column {name!r} is null")
    try:
        return column.cast(pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise FormatError(url, f"column {name!r} of type {column.type} cannot be read as "
                               f"names ({error})") from error


def _block(chosen: Mapping[int, pa.Array], columns: Columns, first_row: int,
           fraction_read: float | None, row_location: Callable[[int], str]) -> EdgeBlock:
    return EdgeBlock(chosen[columns.lhs], chosen[columns.rhs],
                     chosen[columns.rel] if columns.rel is not None else None,
                     first_row, fraction_read, row_location)


class _TextFormat:
    """Parses chunks of a delimited text file (no header) into the chosen columns."""

    def __init__(self, url: str, delimiter: str, *, quoted: bool, columns: Columns) -> None:
        self.url = url
        self.columns = columns
        self.parse_options = dict(delimiter=delimiter, quote_char='"' if quoted else False,
                                  newlines_in_values=False, ignore_empty_lines=True)
        self.column_names: list[str] = []

    def blocks(self, file: IO[bytes], size: int | None, block_edges: int,
               skip_rows: int) -> Iterator[EdgeBlock]:
        first_row = 0
        parsed = ((chunk, self._parse(chunk))
                  for chunk in _line_chunks(file, block_edges, skip_rows))
        for chunk, table in (_read_ahead(parsed) if READ_AHEAD else parsed):
            chosen = {index: table.column(f"f{index}").combine_chunks()
                      for index in self.columns.needed}
            fraction = min(chunk.end_offset / size, 1.0) if size else None
            for start in range(0, table.num_rows, block_edges):
                piece = {index: column.slice(start, block_edges)
                         for index, column in chosen.items()}
                yield _block(piece, self.columns, first_row + start, fraction,
                             lambda row, chunk=chunk, start=start: chunk.location(start + row))
            first_row += table.num_rows

    def _parse(self, chunk: _Chunk) -> pa.Table:
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
            return pa_csv.read_csv(
                pa.BufferReader(chunk.data),
                read_options=pa_csv.ReadOptions(column_names=self.column_names,
                                                use_threads=False, block_size=len(chunk.data) + 1),
                parse_options=pa_csv.ParseOptions(**self.parse_options,
                                                  invalid_row_handler=on_invalid_row),
                convert_options=pa_csv.ConvertOptions(
                    include_columns=needed, column_types={n: pa.large_string() for n in needed}))
        except pa.ArrowInvalid as error:
            if invalid_rows:
                raise self._bad_row_error(chunk) from None
            raise FormatError(self.url, f"{chunk.span()}: cannot parse ({error})") from None

    def _first_line_columns(self, first_line: bytes, chunk: _Chunk) -> list[str]:
        """Column names f0, f1... for as many columns as the first line has."""
        table = pa_csv.read_csv(pa.BufferReader(first_line + b"\n"),
                                read_options=pa_csv.ReadOptions(autogenerate_column_names=True),
                                parse_options=pa_csv.ParseOptions(**self.parse_options))
        count = table.num_columns
        if count <= max(self.columns.needed):
            raise FormatError(self.url, f"{chunk.location(0)}: found {count} columns, but "
                                        f"column {max(self.columns.needed)} is needed "
                                        f"({self._column_roles()})")
        return [f"f{index}" for index in range(count)]

    def _bad_row_error(self, chunk: _Chunk) -> FormatError:
        """Name the first line whose column count is off (parsing again, serially, to learn
        its number: parallel parsing does not report it)."""
        found: list[Any] = []

        def first_invalid(row: Any) -> str:
            found.append(row)
            return "error"

        with contextlib.suppress(pa.ArrowInvalid):
            pa_csv.read_csv(pa.BufferReader(chunk.data),
                            read_options=pa_csv.ReadOptions(column_names=self.column_names,
                                                            use_threads=False),
                            parse_options=pa_csv.ParseOptions(**self.parse_options,
                                                              invalid_row_handler=first_invalid))
        row = found[0]
        where = chunk.location(row.number - 1)
        if row.actual_columns <= max(self.columns.needed):
            return FormatError(self.url, f"{where}: found {row.actual_columns} columns, but "
                                         f"column {max(self.columns.needed)} is needed "
                                         f"({self._column_roles()})")
        return FormatError(self.url, f"{where}: found {row.actual_columns} columns, but the "
                                     f"first line has {row.expected_columns}; every line must "
                                     f"have the same number of columns")

    def _column_roles(self) -> str:
        roles = [f"lhs={self.columns.lhs}", f"rhs={self.columns.rhs}"]
        if self.columns.rel is not None:
            roles.append(f"rel={self.columns.rel}")
        return ", ".join(roles)


@dataclass(frozen=True)
class _Chunk:
    """Whole lines of a text file, starting at line `first_line` (1-based)."""

    data: bytes
    first_line: int
    end_offset: int  # bytes of the file consumed up to the end of this chunk

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
        last_line = self.first_line + self.data.count(b"\n")
        return f"lines {self.first_line}-{last_line}"

    def first_nonempty_line(self) -> bytes:
        start = 0
        while start < len(self.data):
            end = self.data.find(b"\n", start)
            end = len(self.data) if end < 0 else end
            if self.data[start:end].strip(b"\r"):
                return self.data[start:end]
            start = end + 1
        return b""


def _line_chunks(file: IO[bytes], block_edges: int, skip_rows: int) -> Iterator[_Chunk]:
    """The file as chunks of whole lines, about `block_edges` lines each."""
    pending = file.read(SAMPLE_BYTES)
    consumed = len(pending)
    line = 1
    while line <= skip_rows:  # header lines
        end = pending.find(b"\n")
        if end < 0:
            more = file.read(SAMPLE_BYTES)
            if not more:
                return
            consumed += len(more)
            pending += more
            continue
        pending = pending[end + 1:]
        line += 1
    chunk_bytes = _chunk_bytes(pending, block_edges)
    while True:
        if len(pending) < chunk_bytes or b"\n" not in pending:
            more = file.read(max(chunk_bytes - len(pending), SAMPLE_BYTES))
            if more:  # (a line longer than a chunk makes the chunk grow until it ends)
                consumed += len(more)
                pending += more
                continue
            if pending:
                yield _Chunk(pending, line, consumed)
            return
        cut = pending.rfind(b"\n") + 1
        chunk = _Chunk(pending[:cut], line, consumed - (len(pending) - cut))
        line += chunk.data.count(b"\n")
        pending = pending[cut:]
        yield chunk


def _read_ahead(items: Iterator[Any]) -> Iterator[Any]:
    """The same items, each produced in a background thread while the previous one is used.

    Reading and parsing (Arrow releases the GIL) then overlap with the caller's NumPy work;
    one item at most waits in between, so memory holds two chunks, not more.
    """
    slot: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(slot, ("item", item), stop):
                    return
            _put(slot, ("end", None), stop)
        except BaseException as error:  # handed to the consumer, which raises it
            _put(slot, ("error", error), stop)

    producer = threading.Thread(target=produce, name="tessera-import-reader", daemon=True)
    producer.start()
    try:
        while True:
            kind, value = slot.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        producer.join()


def _put(slot: queue.Queue[tuple[str, Any]], entry: tuple[str, Any],
         stop: threading.Event) -> bool:
    """Put `entry` once there is room; False if the consumer has stopped meanwhile."""
    while not stop.is_set():
        try:
            slot.put(entry, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _chunk_bytes(sample: bytes, block_edges: int) -> int:
    lines = sample.count(b"\n") or 1
    estimate = block_edges * max(len(sample) // lines, 1)
    return min(max(estimate, MIN_CHUNK_BYTES), MAX_CHUNK_BYTES)
