"""How to read edge lists: columns, format, partitioning, thresholds (`tessera import` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ImportOptions:
    """Options of one import; the defaults read `lhs<TAB>rhs` lines of the first relation.

    Column indices are 0-based, as PBG's `--lhs-col`, `--rel-col` and `--rhs-col`; a column
    can also be named, as the header line of a text input (`--header`) or a Parquet schema
    names it.
    """

    lhs_col: int | str = 0
    rhs_col: int | str = 1
    # None: every edge is of relation 0, and the config must declare exactly one relation.
    rel_col: int | str | None = None
    # "tsv", "csv" or "parquet"; None: from the file extension (.tsv/.txt, .csv, .parquet),
    # ignoring a compression suffix such as .gz.
    input_format: str | None = None
    delimiter: str | None = None  # of text formats; default tab (tsv) or comma (csv)
    skip_rows: int = 0  # header lines at the top of each text input
    partitioning: str = "random"  # "random" (balanced, seeded) or "hash" (of the name)
    seed: int = 0
    entity_min_count: int = 1  # entities seen fewer times are dropped, with their edges
    relation_type_min_count: int = 1  # with dynamic relations, rarer relation types likewise
    # Edges read and processed at a time: memory grows with it, and with the blocks in flight
    # (one encoded, one read and hashed ahead, one waiting). 2^18 imports as fast as 2^19 and
    # needs less memory (10M edges, 1M nodes: ~390 MB peak instead of ~540 MB).
    block_edges: int = 1 << 18
    # False: a dictionary already in entity_path is extended (known ids kept); True: it is
    # replaced by a new one built from the inputs alone.
    replace_dictionary: bool = False
    work_dir: str | None = None  # local directory for the temporary edge ids (default: TMPDIR)
    # Featurized entity type -> its features file (`entity<TAB>feature` rows; see
    # features_input), read with the same format, delimiter and skipped rows as the edges.
    entity_features: dict[str, str] = field(default_factory=dict)
