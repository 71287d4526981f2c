"""Opening an edge-list file (any fsspec URL, compressed or not) and reading it in blocks.

`read_edge_blocks` yields `EdgeBlock`s of at most `block_edges` rows holding the chosen
columns (0-based indices) as Arrow strings, whatever the format: delimited text (TSV, CSV) or
Parquet. Each block can say where its rows came from ("line 17", "row 17"), so that errors
name a place a user can open; an empty name, or one holding a NUL byte, is refused
(`name_check`), and so is a compressed input cut short or damaged.
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import posixpath
import zlib
from collections.abc import Iterator, Mapping
from typing import IO, Any

import fsspec

from ..errors import BadInputError, FormatError
from ..storage.failures import one_line
from ..storage.retry import translate_errors
from .edge_blocks import Columns, EdgeBlock
from .name_check import checked_names
from .parquet_input import parquet_blocks
from .text_input import DelimitedText

__all__ = ["Columns", "EdgeBlock", "detect_format", "input_size", "read_edge_blocks"]

FORMATS = ("tsv", "csv", "parquet")
EXTENSION_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".parquet": "parquet",
                     ".pq": "parquet"}
DEFAULT_DELIMITERS = {"tsv": "\t", "csv": ","}


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
    """Stream the chosen columns of an edge-list file in blocks of at most `block_edges` rows.

    `skip_rows` header lines are skipped in text formats.
    """
    storage_options = storage_options or {}
    with translate_errors(url, storage_options), \
            _open_input(url, storage_options) as (file, size), _decompression_errors(url):
        if input_format == "parquet":
            blocks = parquet_blocks(url, file, columns, block_edges)
        else:
            text = DelimitedText(url, delimiter or DEFAULT_DELIMITERS[input_format],
                                 quoted=input_format == "csv", columns=columns)
            blocks = text.blocks(file, size, block_edges, skip_rows)
        yield from checked_names(url, columns, blocks)


def input_size(url: str, storage_options: Mapping[str, Any] | None = None) -> int | None:
    """The bytes a reader of `url` consumes: its size, unless it is decompressed as read
    (None: unknown, as for a missing file, which the reader reports)."""
    storage_options = storage_options or {}
    if fsspec.utils.infer_compression(url):
        return None
    with translate_errors(url, storage_options):
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
        try:
            return int(fs.size(path))
        except (FileNotFoundError, IsADirectoryError):
            return None


@contextlib.contextmanager
def _decompression_errors(url: str) -> Iterator[None]:
    """A compressed input cut short or damaged is bad input naming it (not, as its bare
    OSError would say, a storage outage)."""
    if not fsspec.utils.infer_compression(url):
        yield
        return
    try:
        yield
    except (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as error:
        raise _damaged(url, error) from error
    except OSError as error:
        if error.errno is not None:  # a disk error, not the data's
            raise
        raise _damaged(url, error) from error  # bz2's "Invalid data stream"


def _damaged(url: str, error: BaseException) -> FormatError:
    return FormatError(url, f"the compressed data is cut short or damaged ({one_line(error)}); "
                            "copy or compress the file again")


@contextlib.contextmanager
def _open_input(url: str, storage_options: Mapping[str, Any]) -> Iterator[tuple[IO[bytes],
                                                                                int | None]]:
    """The input as a binary file (decompressed if its extension says so), and its size when
    the bytes read map to it (uncompressed)."""
    opener = fsspec.open(url, "rb", compression="infer", **storage_options)
    try:
        info = opener.fs.info(opener.path)
    except FileNotFoundError as error:
        raise BadInputError(f"{url}: input file not found; fix the path") from error
    kind = info.get("type")
    if kind != "file":  # a folder, or a pipe or device, which the readers cannot seek in
        raise BadInputError(f"{url}: is not a regular file ({kind or 'of no known kind'}); "
                            "name an edge list file (save a stream to a file first)")
    try:
        file = opener.open()
        size = None if opener.compression else info.get("size")
    except (FileNotFoundError, IsADirectoryError) as error:
        raise BadInputError(f"{url}: input file not found; fix the path") from error
    with file:
        yield file, size
