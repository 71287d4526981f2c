"""Names an import refuses: an empty one, and one holding a NUL byte.

An empty field (two delimiters in a row, a line that ends in one) would otherwise import an
entity (or relation type) named '', and every such line would be an edge to that one entity;
a NUL byte is no part of any real name, and ends names early in the C tools that read the
exported files. Both mean the data is not what the user thinks, so the import stops at the
first such line, naming it. The check costs one pass over each block's bytes: the slower
search for the row runs only when that pass finds something.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import FormatError
from .edge_blocks import Columns, EdgeBlock


def checked_names(url: str, columns: Columns,
                  blocks: Iterator[EdgeBlock]) -> Iterator[EdgeBlock]:
    """The blocks, after checking that none of their names is empty or holds a NUL byte."""
    for block in blocks:
        for role, names in (("lhs", block.lhs), ("rhs", block.rhs), ("rel", block.rel)):
            if names is None or not len(names):
                continue
            found = _first_bad_name(names)
            if found is not None:
                row, problem = found
                column = getattr(columns, role)
                raise FormatError(url, f"{block.row_location(row)}: {problem} in column "
                                       f"{column} ({role}); every field of a name column must "
                                       "be a name: fix or drop the line")
        yield block


def _first_bad_name(names: pa.Array) -> tuple[int, str] | None:
    """(row, what is wrong) of the first bad name, or None."""
    if pc.min(pc.binary_length(names)).as_py() == 0:
        return int(pc.index(pc.equal(pc.binary_length(names), 0), True).as_py()), "empty name"
    if _may_hold_nul(names):
        holding = pc.match_substring(names, "\x00")
        if pc.any(holding).as_py():
            return int(pc.index(holding, True).as_py()), "NUL byte (\\0) in a name"
    return None


def _may_hold_nul(names: pa.Array) -> bool:
    """Whether the bytes of the array's names hold a NUL (one memchr over a copy of them)."""
    _, offsets, data = names.buffers()
    if data is None:
        return False
    width = np.int64 if pa.types.is_large_string(names.type) else np.int32
    bounds = np.frombuffer(offsets, dtype=width)[[names.offset, names.offset + len(names)]]
    start, end = int(bounds[0]), int(bounds[1])
    return data.slice(start, end - start).to_pybytes().find(b"\x00") >= 0
