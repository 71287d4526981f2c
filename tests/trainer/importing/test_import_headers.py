"""Inputs that hold no edges, and header rows: refused, skipped with --header, or warned of."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from importing_support import imported_edges

from tessera.errors import EXIT_BAD_INPUT, FormatError
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter

QUIET = Reporter("quiet")
HEADER = "head\trelation\ttail\n"
TRIANGLE = "a\tlink\tb\nb\tlink\tc\nc\tlink\ta\n"


def warnings_of(log: io.StringIO) -> list[str]:
    return [record["event"] for record in map(json.loads, log.getvalue().splitlines())
            if record.get("event", "").startswith("import: warning")]


@pytest.mark.parametrize(("text", "skip_rows"), [("", 0), ("\n\n", 0), (HEADER, 1)],
                         ids=["empty", "blank-lines", "header-only"])
def test_an_input_without_edges_is_refused_by_name(make_config, tmp_path, text, skip_rows):
    path = tmp_path / "edges.tsv"
    path.write_text(text)
    with pytest.raises(FormatError, match=f"{path}: no edges: the input is empty"):
        import_edges(make_config(), [str(path)], ImportOptions(skip_rows=skip_rows), QUIET)
    assert not (tmp_path / "out").exists()


def test_an_empty_parquet_input_is_refused_too(make_config, tmp_path):
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"lhs": pa.array([], pa.string()),
                             "rhs": pa.array([], pa.string())}), path)
    with pytest.raises(FormatError, match="edges.parquet: no edges"):
        import_edges(make_config(), [str(path)], ImportOptions(), QUIET)


def test_a_header_row_is_imported_with_a_warning_naming_file_line_and_values(make_config,
                                                                              tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text(HEADER.replace("relation", "link") + TRIANGLE)
    config = make_config()
    log = io.StringIO()
    import_edges(config, [str(path)], ImportOptions(rhs_col=2), Reporter("json", log))
    [warning] = warnings_of(log)
    assert f"{path}: line 1 ('head', 'tail')" in warning and "--header" in warning
    assert imported_edges(config)["link", "head", "tail"] == 1  # data, as the user asked


def test_with_a_header_flag_the_first_line_is_skipped_silently(make_config, tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text(HEADER + TRIANGLE)
    config = make_config()
    log = io.StringIO()
    import_edges(config, [str(path)], ImportOptions(rel_col=1, rhs_col=2, skip_rows=1),
                 Reporter("json", log))
    assert warnings_of(log) == []
    assert imported_edges(config) == Counter({("link", "a", "b"): 1, ("link", "b", "c"): 1,
                                              ("link", "c", "a"): 1})


def test_a_first_line_whose_names_recur_is_not_suspected(make_config, tmp_path):
    path = tmp_path / "edges.tsv"
    # Its names recur only in a later block, and only on the other side.
    path.write_text("x\tlink\ty\n" + TRIANGLE * 3 + "y\tlink\tz\n")
    log = io.StringIO()
    import_edges(make_config(), [str(path)], ImportOptions(rel_col=1, rhs_col=2,
                                                           block_edges=2),
                 Reporter("json", log))
    assert warnings_of(log) == []


def test_a_header_of_dynamic_relations_is_suspected_in_every_block(make_config, tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text(HEADER + TRIANGLE * 3)
    log = io.StringIO()
    import_edges(make_config(dynamic_relations=True), [str(path)],
                 ImportOptions(rel_col=1, rhs_col=2, block_edges=2), Reporter("json", log))
    [warning] = warnings_of(log)
    assert "line 1 ('head', 'relation', 'tail')" in warning


def test_a_header_naming_an_unknown_relation_suggests_the_header_flag(make_config, tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text(HEADER + TRIANGLE)
    with pytest.raises(FormatError, match="line 1: unknown relation 'relation'.*--header"):
        import_edges(make_config(), [str(path)], ImportOptions(rel_col=1, rhs_col=2), QUIET)


def test_the_command_skips_a_header_and_refuses_an_empty_input(make_config, tmp_path):
    config = make_config()
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config.to_dict()))
    edges = tmp_path / "edges.tsv"
    edges.write_text(HEADER + TRIANGLE)
    command = [sys.executable, "-m", "tessera", "import", str(config_file), str(edges),
               "--rel-col", "1", "--rhs-col", "2", "--log-format", "json"]
    imported = subprocess.run([*command, "--header"], capture_output=True, text=True,
                              timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert sum(imported_edges(config).values()) == 3

    # Columns by their names in the header (a weight column first, unused).
    by_name = [*command[:6], "--header", "--lhs-col", "head", "--rel-col", "relation",
               "--rhs-col", "tail", "--log-format", "json"]
    edges.write_text("weight\t" + HEADER + "".join(f"1\t{line}\n"
                                                 for line in TRIANGLE.splitlines()))
    imported = subprocess.run(by_name, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert sum(imported_edges(config).values()) == 3

    edges.write_text("")
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == EXIT_BAD_INPUT
    assert refused.stderr.splitlines() == [
        f"tessera import: error: {edges}: no edges: the input is empty (or holds only blank "
        "or skipped lines); give at least one edge per input"]
