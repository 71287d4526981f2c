"""Progress of the import's reading pass, with a total so that it can show an ETA.

When the size of every input is known (files read as they are stored, not decompressed), the
pass counts bytes of the inputs read out of their total; otherwise it counts edges, with a
total estimated from the share of the inputs read so far (inputs weighing the same).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..progress import Task


class ReadProgress:
    """Advances the reading task block by block; `edges` is shown next to the bytes."""

    def __init__(self, task: Task, sizes: Sequence[int | None]) -> None:
        self.task = task
        self.sizes = list(sizes)
        self.in_bytes = task.unit == "bytes"
        self.edges = 0

    def block(self, index: int, edges: int, fraction_read: float | None) -> None:
        """`edges` more edges read from input `index`, of which `fraction_read` is consumed."""
        self.edges += edges
        task = self.task
        if self.in_bytes:
            size = self.sizes[index] or 0
            position = sum(s or 0 for s in self.sizes[:index]) + (fraction_read or 0) * size
            task.advance(max(position - task.done, 0), edges=self.edges)
            return
        if fraction_read:
            share = (index + fraction_read) / len(self.sizes)
            task.total = max((task.done + edges) / share, task.done + edges)
        task.advance(edges)


def reading_unit(sizes: Sequence[int | None]) -> tuple[str, float | None]:
    """The reading task's unit and total: bytes when every size is known, else edges."""
    if sizes and all(size is not None for size in sizes):
        return "bytes", float(sum(s or 0 for s in sizes))
    return "edges", None
