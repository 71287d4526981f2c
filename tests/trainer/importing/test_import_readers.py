"""Edge-list readers: TSV/CSV/Parquet columns in bounded blocks, and errors that name the line."""

from __future__ import annotations

import gzip
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tessera.errors import BadInputError, FormatError
from tessera.importing.read_ahead import read_ahead
from tessera.importing.readers import Columns, detect_format, read_edge_blocks

TWO_COLUMNS = Columns(0, 1)


def rows_of(path, input_format="tsv", columns=TWO_COLUMNS, block_edges=1000, **options):
    """All (lhs, rhs[, rel]) rows and the blocks they came in."""
    blocks = list(read_edge_blocks(str(path), input_format=input_format, columns=columns,
                                   block_edges=block_edges, **options))
    rows = []
    for block in blocks:
        rels = block.rel.to_pylist() if block.rel is not None else [None] * len(block)
        rows += [(lhs, rhs, rel) if rel is not None else (lhs, rhs)
                 for lhs, rhs, rel in zip(block.lhs.to_pylist(), block.rhs.to_pylist(), rels)]
    return rows, blocks


def test_tsv_columns_by_index_with_crlf_and_empty_lines(tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_bytes(b"alice\tfollows\tbob\t0.5\r\n\nbob\tlikes\tcarol\t1\n\n"
                     b"007\tfollows\t1e3\t2")  # no final newline; names stay text
    rows, blocks = rows_of(path, columns=Columns(lhs=2, rhs=0, rel=1))
    assert rows == [("bob", "alice", "follows"), ("carol", "bob", "likes"),
                    ("1e3", "007", "follows")]
    block = blocks[0]
    assert [block.row_location(i) for i in range(3)] == ["line 1", "line 3", "line 5"]
    assert block.fraction_read == 1.0


def test_csv_quotes_and_custom_delimiters(tmp_path):
    csv_path = tmp_path / "edges.csv"
    csv_path.write_text('"Smith, J.",knows,"O\'Brien"\nplain,knows,"say ""hi"""\n')
    rows, _ = rows_of(csv_path, "csv", Columns(0, 2, 1))
    assert rows == [("Smith, J.", "O'Brien", "knows"), ("plain", 'say "hi"', "knows")]
    pipe_path = tmp_path / "edges.txt"
    pipe_path.write_text("a|b\nc|d\n")
    assert rows_of(pipe_path, "tsv", delimiter="|")[0] == [("a", "b"), ("c", "d")]


def test_blocks_are_bounded_and_rows_numbered_across_them(tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text("".join(f"n{i}\tm{i}\n" for i in range(2500)))
    rows, blocks = rows_of(path, block_edges=300)
    assert rows == [(f"n{i}", f"m{i}") for i in range(2500)]
    assert max(len(block) for block in blocks) <= 300
    assert [block.first_row for block in blocks] == [sum(len(b) for b in blocks[:i])
                                                     for i in range(len(blocks))]
    assert blocks[-1].row_location(len(blocks[-1]) - 1) == "line 2500"
    fractions = [block.fraction_read for block in blocks]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_header_rows_are_skipped_and_counted_in_line_numbers(tmp_path):
    path = tmp_path / "edges.csv"
    path.write_text("source,target\na,b\nc,d\n")
    rows, blocks = rows_of(path, "csv", skip_rows=1)
    assert rows == [("a", "b"), ("c", "d")]
    assert blocks[0].row_location(1) == "line 3"


def test_gzip_and_lines_longer_than_a_chunk(tmp_path):
    long_name = "x" * 300_000  # longer than the smallest chunk: the chunk grows to fit it
    path = tmp_path / "edges.tsv.gz"
    with gzip.open(path, "wt") as file:
        file.write(f"a\tb\n{long_name}\tc\nd\te\n")
    assert detect_format(str(path), None) == "tsv"
    rows, blocks = rows_of(path)
    assert rows == [("a", "b"), (long_name, "c"), ("d", "e")]
    assert blocks[0].fraction_read is None  # compressed: the share read is unknown


def test_parquet_columns_by_index_and_integer_ids_as_names(tmp_path):
    path = tmp_path / "edges.parquet"
    table = pa.table({"src": [1, 2, 3], "weight": [0.1, 0.2, 0.3], "dst": ["x", "y", "z"]})
    pq.write_table(table, path, row_group_size=2)
    rows, blocks = rows_of(path, "parquet", Columns(0, 2), block_edges=2)
    assert rows == [("1", "x"), ("2", "y"), ("3", "z")]
    assert [len(block) for block in blocks] == [2, 1]
    assert blocks[1].row_location(0) == "row 3"
    assert blocks[-1].fraction_read == 1.0


def test_empty_input_has_no_blocks(tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text("")
    assert rows_of(path) == ([], [])


@pytest.mark.parametrize(("content", "message"), [
    ("a\tb\tc\nd\te\nf\tg\th\n", "line 2: found 2 columns, but column 2 is needed"),
    ("a\tb\n", "line 1: found 2 columns, but column 2 is needed"),
    ("a\tb\tc\n\nd\te\tf\tg\n", "line 3: found 4 columns, but the first line has 3"),
])
def test_bad_lines_are_named(tmp_path, content, message):
    path = tmp_path / "edges.tsv"
    path.write_text(content)
    with pytest.raises(FormatError, match=message) as error:
        rows_of(path, columns=Columns(0, 2, 1), block_edges=1)
    assert str(path) in str(error.value)


def test_bytes_that_are_not_utf8_are_named_by_line_and_byte(tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_bytes(b"a\tr\tb\nc\tr\td\n\ne\tr\t\xe9t\xe9\n")  # Latin-1, not UTF-8
    with pytest.raises(FormatError, match=r"line 4, byte 5 \(0xe9\): not UTF-8 text"):
        rows_of(path, columns=Columns(0, 2, 1))


def test_bad_parquet_inputs_are_named(tmp_path):
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": ["a", None], "dst": ["b", "c"]}), path)
    with pytest.raises(FormatError, match="row 2: column 'src' is null; .*fill it or drop the row"):
        rows_of(path, "parquet")
    with pytest.raises(FormatError, match="column 5 is needed but the file has 2 columns"):
        rows_of(path, "parquet", Columns(0, 5))


def test_missing_files_and_unknown_formats_are_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="input file not found"):
        rows_of(tmp_path / "nowhere.tsv")
    with pytest.raises(BadInputError, match="cannot tell the format"):
        detect_format("edges.json", None)
    with pytest.raises(BadInputError, match="unknown input format"):
        detect_format("edges.tsv", "xlsx")
    assert detect_format("s3://bucket/edges.CSV", None) == "csv"
    assert detect_format("edges.dat", "parquet") == "parquet"


def test_read_ahead_keeps_order_raises_errors_and_stops_with_its_consumer():
    assert list(read_ahead(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise ValueError("bad chunk")

    with pytest.raises(ValueError, match="bad chunk"):
        list(read_ahead(failing()))
    produced = []

    def endless():
        while True:
            produced.append(len(produced))
            yield produced[-1]

    threads_before = threading.active_count()
    items = read_ahead(endless())
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()  # the consumer stops: so does the producer, one item ahead at most
    assert threading.active_count() == threads_before
    assert len(produced) <= 5


def test_read_ahead_closes_a_generator_its_consumer_left():
    # A generator left half way holds its file (and its own reading thread) until closed.
    closed = []

    def holding_a_file():
        try:
            yield from range(100)
        finally:
            closed.append(True)

    items = read_ahead(holding_a_file())
    assert next(items) == 0
    items.close()
    assert closed == [True]


def test_columns_by_name_from_a_header_or_a_parquet_schema(tmp_path):
    csv_path = tmp_path / "edges.csv"
    csv_path.write_text('weight,"to, node",from,kind\n1,b,a,likes\n2,c,b,knows\n')
    named = Columns(lhs="from", rhs="to, node", rel="kind")
    expected = [("a", "b", "likes"), ("b", "c", "knows")]
    assert rows_of(csv_path, "csv", named, skip_rows=1)[0] == expected
    parquet_path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"weight": [1, 2], "to, node": ["b", "c"], "from": ["a", "b"],
                             "kind": ["likes", "knows"]}), parquet_path)
    assert rows_of(parquet_path, "parquet", named)[0] == expected
    # Names and indices mix; a name missing from the header says which ones there are.
    assert rows_of(csv_path, "csv", Columns("from", 1), skip_rows=1)[0] == [("a", "b"),
                                                                             ("b", "c")]
    with pytest.raises(FormatError, match=r"no column is named 'src' \(the lhs column\); its "
                                          r"columns: weight, to, node, from, kind"):
        rows_of(csv_path, "csv", Columns("src", 1), skip_rows=1)
    with pytest.raises(FormatError, match="no column is named 'dst'.*weight, to, node, from"):
        rows_of(parquet_path, "parquet", Columns("from", "dst"))
    with pytest.raises(FormatError, match="no header line names them: pass --header"):
        rows_of(csv_path, "csv", named)
