"""The first pass: read every input once, turn names into dictionary ids, spill the ids.

Entity names of all types go into one dictionary (the type, known from the edge's relation,
is part of each entry), relation names into another when relation types come from the data;
with relations from the config, relation names are matched against it and an unknown one is
an error naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import FormatError
from ..progress import Task
from .dictionary import HashedNames, NameDictionary
from .edge_blocks import EdgeBlock
from .existing import ExistingDictionary, KnownNames
from .header_check import FirstLineCheck
from .plan import ImportPlan, InputPlan
from .read_ahead import read_ahead
from .read_progress import ReadProgress
from .readers import read_edge_blocks
from .spill import EdgeIds, EdgeIdSpill


@dataclass(frozen=True)
class NameTables:
    """What the first pass learnt."""

    entities: NameDictionary
    relations: NameDictionary | None  # relation types found in the data (dynamic relations)
    edges_read: list[int]  # per input
    known: KnownNames | None = None  # names of the dictionary this import extends


def read_names(plan: ImportPlan, spill: EdgeIdSpill, task: Task, salt: int = 0,
               existing: ExistingDictionary | None = None,
               sizes: Sequence[int | None] | None = None) -> NameTables:
    """Read all inputs, filling the dictionaries (first with the `existing` names) and the
    spill; may raise FingerprintCollision, after which the caller clears the spill and tries
    another salt. `sizes` (bytes of each input, None where unknown) give the task its total."""
    progress = ReadProgress(task, sizes or [None] * len(plan.inputs))
    entities = NameDictionary(salt)
    relations = NameDictionary(salt) if plan.dynamic_relations else None
    known = existing.seed(entities, relations) if existing is not None else None
    known_relations = pa.array(plan.relation_names, pa.large_string())
    edges_read = []
    for index, source in enumerate(plan.inputs):
        count = 0
        first_line = FirstLineCheck()
        blocks = read_edge_blocks(
            source.url, input_format=source.input_format, columns=plan.columns,
            block_edges=plan.options.block_edges, delimiter=plan.options.delimiter,
            skip_rows=plan.options.skip_rows, storage_options=plan.storage_options)
        for block, lhs_names, rhs_names in read_ahead(_hashed_blocks(blocks, salt)):
            if relations is not None:
                rel = _found_relations(block, relations)
            else:
                rel = _declared_relations(block, known_relations, source.url)
            lhs = entities.encode(lhs_names, plan.side_kinds("lhs", rel))
            rhs = entities.encode(rhs_names, plan.side_kinds("rhs", rel))
            spill.append(index, EdgeIds(rel, lhs, rhs))
            first_line.add(block, lhs, rhs, rel if relations is not None else None)
            count += len(block)
            progress.block(index, len(block), block.fraction_read)
        if count == 0:
            raise FormatError(source.url, "no edges: the input is empty (or holds only blank "
                                          "or skipped lines); give at least one edge per input")
        _warn_of_header(plan, source, first_line, task)
        edges_read.append(count)
    entities.stop_lookups()
    pa.default_memory_pool().release_unused()  # Arrow keeps freed parse buffers otherwise
    return NameTables(entities, relations, edges_read, known)


def _hashed_blocks(blocks: Iterator[EdgeBlock],
                   salt: int) -> Iterator[tuple[EdgeBlock, HashedNames, HashedNames]]:
    """Each block with its two name columns hashed: run ahead, this overlaps the hashing of
    the next block with the dictionary lookups of the current one."""
    for block in blocks:
        yield block, HashedNames.of(block.lhs, salt), HashedNames.of(block.rhs, salt)


def _warn_of_header(plan: ImportPlan, source: InputPlan, first_line: FirstLineCheck,
                    task: Task) -> None:
    """One line when a text input's first line looks like a header read as data."""
    if (source.input_format == "parquet" or plan.options.skip_rows > 0
            or not first_line.looks_like_header()):
        return
    values = ", ".join(map(repr, first_line.first_names))
    task.reporter.event(f"import: warning: {source.url}: {first_line.first_location} "
                        f"({values}) was imported as an edge, but none of its names occurs "
                        "again in this input: if it is a header, import again with --header")


def _declared_relations(block: EdgeBlock, known: pa.Array, url: str) -> np.ndarray:
    """Config relation indices of the block's relation names (all 0 without a column)."""
    if block.rel is None:
        return np.zeros(len(block), dtype=np.int64)
    # Few distinct names per block: map those, then spread the result to the rows.
    encoded = pc.dictionary_encode(block.rel)
    indices = encoded.indices.to_numpy()
    found = pc.fill_null(pc.index_in(encoded.dictionary, value_set=known), -1).to_numpy()
    rel = found.astype(np.int64)[indices]
    if (found < 0).any():
        row = int(np.flatnonzero(rel < 0)[0])
        header_hint = ("; if this line is a header, import again with --header"
                       if block.first_row + row == 0 else "")
        raise FormatError(url, f"{block.row_location(row)}: unknown relation "
                               f"{block.rel[row].as_py()!r}; the config declares "
                               f"{', '.join(map(repr, known.to_pylist()))}{header_hint}")
    return rel


def _found_relations(block: EdgeBlock, relations: NameDictionary) -> np.ndarray:
    """Dictionary ids of the block's relation names, adding new ones (dynamic relations)."""
    assert block.rel is not None  # the plan requires a relation column
    encoded = pc.dictionary_encode(block.rel)
    indices = encoded.indices.to_numpy()
    occurrences = np.bincount(indices, minlength=len(encoded.dictionary))
    return relations.encode(encoded.dictionary, weights=occurrences)[indices]
