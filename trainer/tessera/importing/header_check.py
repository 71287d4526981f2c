"""Spotting a header row read as data: a first line whose names occur nowhere else in its input.

A text edge list with a header (`head<TAB>relation<TAB>tail`) imports the header as one more
edge between two made-up entities. Real first lines name entities that have other edges, so a
first line none of whose names recurs in the whole input is most likely a header; the importer
then warns and suggests `--header`. The check compares dictionary ids, so it costs a few
integer comparisons per edge, and nothing once one of the names has recurred.
"""

from __future__ import annotations

import numpy as np

from .edge_blocks import EdgeBlock


class FirstLineCheck:
    """Watches one input's edges, as dictionary ids, for a first line that never recurs."""

    def __init__(self) -> None:
        self.first_names: list[str] = []  # the first line's values, for the warning
        self.first_location = ""
        self._entities = np.zeros(0, np.int64)  # ids of the first line's lhs and rhs
        self._relation: int | None = None  # id of its relation type (dynamic relations only)
        self._later_edges = 0
        self._recurred = False

    def add(self, block: EdgeBlock, lhs: np.ndarray, rhs: np.ndarray,
            relations: np.ndarray | None) -> None:
        """Feed the next block: its names and their ids (`relations`: dictionary ids of the
        relation types found in the data, None when relations come from the config)."""
        if self._recurred or len(block) == 0:
            return
        if not self.first_names:
            self.first_names = [column[0].as_py() for column in
                                (block.lhs, block.rel, block.rhs) if column is not None]
            self.first_location = block.row_location(0)
            self._entities = np.array([lhs[0], rhs[0]])
            self._relation = None if relations is None else int(relations[0])
            lhs, rhs = lhs[1:], rhs[1:]
            relations = None if relations is None else relations[1:]
        self._later_edges += len(lhs)
        self._recurred = bool(np.isin(lhs, self._entities).any()
                              or np.isin(rhs, self._entities).any()
                              or (relations is not None and (relations == self._relation).any()))

    def looks_like_header(self) -> bool:
        """Whether other lines followed the first and none of them used any of its names."""
        return self._later_edges > 0 and not self._recurred
