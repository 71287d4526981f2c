"""The edges between the two passes, as dictionary ids in a local temporary file.

The first pass turns every edge into three int32 ids (relation, left and right name); only
once all names are known can they be given partitions and offsets, which the second pass does
by reading these ids back. Keeping them on local disk instead of reading the inputs again
makes the second pass cheap (no parsing, no hashing, no second download of a remote input)
and keeps memory independent of the number of edges: the file costs 12 bytes an edge.
The file has no name (or loses it at once) and mode 0600: it goes with the process however
that ends, a kill included, and no other user reads the edges meanwhile.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from ..os_errors import local_errors_named

ID_DTYPE = np.dtype("<i4")  # 4 bytes an id, as the offsets in `blocks` assume


@dataclass(frozen=True)
class EdgeIds:
    """Edges as dictionary ids: relation type, left name, right name (int64 arrays)."""

    rel: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray

    def __len__(self) -> int:
        return len(self.rel)


class EdgeIdSpill:
    """Appends blocks of edge ids per input, then reads each input's blocks back in order."""

    def __init__(self, directory: str | None = None) -> None:
        folder = directory or tempfile.gettempdir()
        # A full disk names the folder, and how to choose another: the file itself has no name.
        self._where = f"{folder} (the import's temporary edge ids; TMPDIR names another folder)"
        with local_errors_named(self._where):
            self._file = tempfile.TemporaryFile(prefix="tessera-import-", suffix=".ids",
                                                dir=folder)
        self._blocks: list[tuple[int, int, int]] = []  # (input index, byte offset, edges)

    def __enter__(self) -> EdgeIdSpill:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def clear(self) -> None:
        """Forget everything written (the first pass starts over)."""
        self._file.seek(0)
        self._file.truncate()
        self._blocks.clear()

    def append(self, input_index: int, edges: EdgeIds) -> None:
        self._blocks.append((input_index, self._file.tell(), len(edges)))
        with local_errors_named(self._where):
            for ids in (edges.rel, edges.lhs, edges.rhs):
                self._file.write(np.ascontiguousarray(ids, dtype=ID_DTYPE).data)  # no copy

    def num_edges(self, input_index: int) -> int:
        return sum(count for index, _, count in self._blocks if index == input_index)

    def blocks(self, input_index: int, max_edges: int | None = None) -> Iterator[EdgeIds]:
        """The edges appended for one input, in order, in blocks of at most `max_edges`."""
        with local_errors_named(self._where):
            self._file.flush()
        handle = self._file.fileno()
        for index, offset, count in self._blocks:
            if index != input_index:
                continue
            step = max_edges or count
            for start in range(0, count, step):
                size = min(step, count - start)
                yield EdgeIds(*(_read_ids(handle, offset + (part * count + start) * 4, size)
                                for part in range(3)))


def _read_ids(handle: int, offset: int, count: int) -> np.ndarray:
    """`count` ids at `offset`, read by position: the writer's file offset stays put."""
    ids = np.empty(count, ID_DTYPE)
    view = ids.data.cast("B")
    done = 0
    while done < len(view):
        read = os.preadv(handle, [view[done:]], offset + done)
        if read == 0:
            raise EOFError(f"edge id spill file: {len(view) - done} bytes missing")
        done += read
    return ids.astype(np.int64)
