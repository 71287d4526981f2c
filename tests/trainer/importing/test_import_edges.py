"""`import_edges` end to end: what goes in comes out, placed as configured, or nothing at all."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from importing_support import FOLLOWS_AND_LIKES, entity_names, grid, imported_edges

from tessera.errors import BadInputError, ConfigError, FormatError
from tessera.importing import ImportOptions, bucket_pass, dictionary, import_edges, writer
from tessera.progress import Reporter
from tessera.storage import edges as edge_files
from tessera.storage import entities as entity_files
from tessera.storage.fs import Directory

QUIET = Reporter("quiet")


def social_graph(count: int = 400, seed: int = 0) -> list[tuple[str, str, str]]:
    """(lhs, relation, rhs) rows: users follow users and like items, with repeats."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        user = f"user{rng.randrange(60)}"
        if rng.random() < 0.6:
            rows.append((user, "follows", f"user{rng.randrange(60)}"))
        else:
            rows.append((user, "likes", f"item{rng.randrange(25)}"))
    return rows


def write_tsv(path, rows) -> str:
    path.write_text("".join("\t".join(row) + "\n" for row in rows))
    return str(path)


def as_multiset(rows) -> Counter:
    return Counter((rel, lhs, rhs) for lhs, rel, rhs in rows)


def user_item_config(make_config, root=None, **overrides):
    """Users in three partitions, items unpartitioned: follows user->user, likes user->item."""
    return make_config(root, entities={"user": {"num_partitions": 3},
                                       "item": {"num_partitions": 1}},
                       relations=FOLLOWS_AND_LIKES, **overrides)


def test_tsv_edges_come_back_exactly_in_every_bucket(make_config, tmp_path):
    rows = social_graph()
    config = user_item_config(make_config)
    summary = import_edges(config, [write_tsv(tmp_path / "edges.tsv", rows)],
                           ImportOptions(rel_col=1, rhs_col=2), QUIET)
    assert imported_edges(config) == as_multiset(rows)
    edge_dir = Directory(config.edge_paths[0])
    assert sorted(edge_dir.listdir()) == sorted(edge_files.bucket_file(lhs, rhs)
                                                for lhs in range(3) for rhs in range(3))
    names = entity_names(config)
    assert sorted(sum((names["user", part] for part in range(3)), [])) == sorted(
        {row[0] for row in rows} | {row[2] for row in rows if row[1] == "follows"})
    assert [len(names["user", part]) for part in range(3)] == summary.entity_counts["user"]
    assert max(summary.entity_counts["user"]) - min(summary.entity_counts["user"]) <= 1
    assert (summary.edges_read, summary.edges_written, summary.edges_dropped) == (400, 400, 0)


def test_an_unpartitioned_side_is_spread_over_the_grid(make_config, tmp_path):
    rows = social_graph()
    config = user_item_config(make_config)
    import_edges(config, [write_tsv(tmp_path / "edges.tsv", rows)],
                 ImportOptions(rel_col=1, rhs_col=2), QUIET)
    edge_dir = Directory(config.edge_paths[0])
    likes_per_rhs_part = [
        sum(int((edge_files.read_bucket(edge_dir, lhs, rhs).rel == 1).sum()) for lhs in range(3))
        for rhs in range(3)]
    # Items live in one partition, yet their edges use all three bucket columns.
    assert sum(likes_per_rhs_part) == sum(1 for row in rows if row[1] == "likes")
    assert min(likes_per_rhs_part) > 0


def test_csv_and_parquet_inputs_give_the_same_edges(make_config, tmp_path):
    rows = social_graph(seed=1)
    csv_path = tmp_path / "edges.csv"
    csv_path.write_text("".join(f'"{lhs}",{rel},{rhs}\n' for lhs, rel, rhs in rows))
    parquet_path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"rel": [r[1] for r in rows], "src": [r[0] for r in rows],
                             "dst": [r[2] for r in rows]}), parquet_path, row_group_size=64)
    from_csv = user_item_config(make_config, str(tmp_path / "csv"))
    import_edges(from_csv, [str(csv_path)], ImportOptions(rel_col=1, rhs_col=2), QUIET)
    from_parquet = user_item_config(make_config, str(tmp_path / "parquet"))
    import_edges(from_parquet, [str(parquet_path)],
                 ImportOptions(lhs_col=1, rhs_col=2, rel_col=0, block_edges=50), QUIET)
    assert imported_edges(from_csv) == imported_edges(from_parquet) == as_multiset(rows)


def test_without_a_relation_column_every_edge_is_of_the_one_relation(make_config, tmp_path):
    rows = [(f"n{i % 7}", f"n{(i * 3) % 11}") for i in range(50)]
    path = tmp_path / "edges.tsv"
    path.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in rows))
    config = make_config(entities={"node": {"num_partitions": 2}})
    import_edges(config, [str(path)], ImportOptions(), QUIET)
    assert imported_edges(config) == Counter(("link", lhs, rhs) for lhs, rhs in rows)


def test_dynamic_relations_come_from_the_data(make_config, tmp_path):
    rows = [(f"n{i % 9}", f"rel{i % 4}", f"n{i % 5}") for i in range(40)] + [("n1", "rare", "n2")]
    config = make_config(relations=[{"name": "any", "lhs": "node", "rhs": "node",
                                     "operator": "translation"}],
                         dynamic_relations=True)
    summary = import_edges(config, [write_tsv(tmp_path / "edges.tsv", rows)],
                           ImportOptions(rel_col=1, rhs_col=2, relation_type_min_count=2),
                           QUIET)
    entity_dir = Directory(config.entity_path)
    assert entity_dir.read_text("dynamic_rel_count.txt") == "4\n"
    assert json.loads(entity_dir.read_text("dynamic_rel_names.json")) == [
        "rel0", "rel1", "rel2", "rel3"]  # in name order; "rare" occurs once and is dropped
    assert imported_edges(config) == as_multiset(rows[:-1])
    assert (summary.relation_types, summary.relation_types_dropped) == (4, 1)
    assert summary.edges_dropped == 1


def test_hash_partitioning_does_not_depend_on_the_input_order(make_config, tmp_path):
    rows = social_graph(seed=2)
    shuffled = rows[:]
    random.Random(5).shuffle(shuffled)
    first = user_item_config(make_config, str(tmp_path / "a"))
    second = user_item_config(make_config, str(tmp_path / "b"))
    options = ImportOptions(rel_col=1, rhs_col=2, partitioning="hash")
    import_edges(first, [write_tsv(tmp_path / "a.tsv", rows)], options, QUIET)
    import_edges(second, [write_tsv(tmp_path / "b.tsv", shuffled)], options, QUIET)
    assert entity_names(first) == entity_names(second)
    assert imported_edges(first) == imported_edges(second) == as_multiset(rows)
    for lhs in range(3):
        for rhs in range(3):
            first_bucket = edge_files.read_bucket(Directory(first.edge_paths[0]), lhs, rhs)
            second_bucket = edge_files.read_bucket(Directory(second.edge_paths[0]), lhs, rhs)
            assert sorted(zip(first_bucket.rel, first_bucket.lhs, first_bucket.rhs)) == sorted(
                zip(second_bucket.rel, second_bucket.lhs, second_bucket.rhs))


def test_random_partitioning_is_reproducible_with_its_seed(make_config, tmp_path):
    path = write_tsv(tmp_path / "edges.tsv", social_graph(seed=3))
    placements = []
    for run, seed in enumerate([11, 11, 12]):
        config = user_item_config(make_config, str(tmp_path / f"run{run}"))
        import_edges(config, [path], ImportOptions(rel_col=1, rhs_col=2, seed=seed), QUIET)
        placements.append(entity_names(config))
    assert placements[0] == placements[1]
    assert placements[0] != placements[2]


def test_several_inputs_share_one_dictionary(make_config, tmp_path):
    train = [("a", "b"), ("b", "c"), ("c", "a")]
    test = [("a", "d"), ("d", "b")]
    paths = []
    for name, rows in (("train", train), ("test", test)):
        path = tmp_path / f"{name}.tsv"
        path.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in rows))
        paths.append(str(path))
    config = make_config(entities={"node": {"num_partitions": 2}}, num_edge_paths=2)
    summary = import_edges(config, paths, ImportOptions(), QUIET)
    assert imported_edges(config, 0) == Counter(("link", lhs, rhs) for lhs, rhs in train)
    assert imported_edges(config, 1) == Counter(("link", lhs, rhs) for lhs, rhs in test)
    assert sum(summary.entity_counts["node"]) == 4
    assert [entry.edges_read for entry in summary.inputs] == [3, 2]


def test_rare_entities_are_dropped_with_their_edges(make_config, tmp_path):
    rows = [("a", "b"), ("b", "a"), ("a", "c"), ("b", "d"), ("d", "a")]
    path = tmp_path / "edges.tsv"
    path.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in rows))
    config = make_config()
    summary = import_edges(config, [str(path)], ImportOptions(entity_min_count=2), QUIET)
    # c occurs once: it and its edge go; d occurs twice and stays.
    assert imported_edges(config) == Counter(("link", lhs, rhs) for lhs, rhs in rows
                                             if "c" not in (lhs, rhs))
    assert sorted(entity_names(config)["node", 0]) == ["a", "b", "d"]
    assert summary.entities_dropped == {"node": 1}
    assert summary.edges_dropped == 1


def test_unknown_relation_names_file_line_and_publishes_nothing(make_config, tmp_path):
    rows = social_graph(count=30) + [("user1", "hates", "user2")]
    path = write_tsv(tmp_path / "edges.tsv", rows)
    config = user_item_config(make_config)
    with pytest.raises(FormatError) as error:
        import_edges(config, [path], ImportOptions(rel_col=1, rhs_col=2, block_edges=8), QUIET)
    message = str(error.value)
    assert path in message and "line 31" in message and "'hates'" in message
    assert "'follows', 'likes'" in message
    assert not (tmp_path / "out").exists()


def test_a_short_line_is_named_and_nothing_is_published(make_config, tmp_path):
    path = tmp_path / "edges.tsv"
    path.write_text("a\tlink\tb\n\nb\tlink\n")
    config = make_config()
    with pytest.raises(FormatError, match="edges.tsv: line 3: found 2 columns"):
        import_edges(config, [str(path)], ImportOptions(rel_col=1, rhs_col=2), QUIET)
    assert not (tmp_path / "out").exists()


def test_inputs_must_match_edge_paths(make_config, tmp_path):
    config = make_config(num_edge_paths=2)
    with pytest.raises(ConfigError, match="edge_paths: 2 edge path"):
        import_edges(config, [str(tmp_path / "only.tsv")], ImportOptions(), QUIET)


def test_configs_the_importer_cannot_serve_are_rejected_by_key(make_config, tmp_path):
    path = [str(tmp_path / "edges.tsv")]
    two_relations = user_item_config(make_config)
    with pytest.raises(ConfigError, match="^relations: 2 relations"):
        import_edges(two_relations, path, ImportOptions(), QUIET)
    dynamic = make_config(dynamic_relations=True)
    with pytest.raises(ConfigError, match="^dynamic_relations:"):
        import_edges(dynamic, path, ImportOptions(), QUIET)
    featurized = make_config(entities={"node": {"num_partitions": 1, "featurized": True}})
    with pytest.raises(BadInputError, match="^entity type 'node' is featurized: give its "
                                            "features with --features node=FILE"):
        import_edges(featurized, path, ImportOptions(), QUIET)


def test_a_failure_while_writing_buckets_deletes_what_was_published(make_config, tmp_path,
                                                                    monkeypatch):
    paths = [write_tsv(tmp_path / f"in{i}.tsv", social_graph(seed=i)) for i in range(2)]
    config = user_item_config(make_config, num_edge_paths=2)
    Directory(config.entity_path).write_text("notes.txt", "kept")
    original_append = edge_files.BucketWriter.append

    def failing_append(self, rel, lhs, rhs, **features):
        if "edges1" in self.directory.url:
            raise OSError("disk full")
        original_append(self, rel, lhs, rhs, **features)

    monkeypatch.setattr(edge_files.BucketWriter, "append", failing_append)
    with pytest.raises(OSError, match="disk full"):
        import_edges(config, paths, ImportOptions(rel_col=1, rhs_col=2), QUIET)
    # Entity files and the first input's buckets had been published: all are gone again.
    assert Directory(config.entity_path).listdir() == ["notes.txt"]
    assert Directory(config.edge_paths[0]).listdir() == []
    assert Directory(config.edge_paths[1]).listdir() == []


def test_memory_is_bounded_by_the_block_size(make_config, tmp_path, monkeypatch):
    """Every array of edges or names the importer handles has at most `block_edges` rows,
    and at most MAX_OPEN_BUCKETS bucket writers are open at once, whatever the input size."""
    rows = [(f"n{(i * 7919) % 1000}", f"n{(i * 104729) % 997}") for i in range(5000)]
    path = tmp_path / "edges.tsv"
    path.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in rows))
    sizes: Counter = Counter()
    open_writers = [0, 0]  # now, most ever

    def recording(name, function):
        def wrapper(self, first, *rest, **keywords):
            sizes[name] = max(sizes[name], len(first))
            return function(self, first, *rest, **keywords)
        return wrapper

    monkeypatch.setattr(dictionary.NameDictionary, "encode",
                        recording("names", dictionary.NameDictionary.encode))
    monkeypatch.setattr(edge_files.BucketWriter, "append",
                        recording("bucket appends", edge_files.BucketWriter.append))
    original_enter, original_exit = writer.BucketWriters.__enter__, writer.BucketWriters.__exit__

    def enter(self):
        open_writers[0] += len(self.buckets)
        open_writers[1] = max(open_writers)
        return original_enter(self)

    def exit_(self, *error):
        open_writers[0] -= len(self.buckets)
        return original_exit(self, *error)

    monkeypatch.setattr(writer.BucketWriters, "__enter__", enter)
    monkeypatch.setattr(writer.BucketWriters, "__exit__", exit_)
    monkeypatch.setattr(bucket_pass, "MAX_OPEN_BUCKETS", 8)
    config = make_config(entities={"node": {"num_partitions": 4}})
    import_edges(config, [str(path)], ImportOptions(block_edges=64), QUIET)
    assert imported_edges(config) == Counter(("link", lhs, rhs) for lhs, rhs in rows)
    assert 0 < sizes["names"] <= 64 and 0 < sizes["bucket appends"] <= 64
    assert open_writers[1] == 8  # 16 buckets written in two rounds of 8


def test_a_fingerprint_collision_is_retried_with_another_salt(make_config, tmp_path,
                                                              monkeypatch):
    real_fingerprint = dictionary.fingerprint

    def colliding_without_salt(names, salt=0):
        if salt == 0:
            return np.zeros(len(names), dtype=np.uint64)
        return real_fingerprint(names, salt)

    monkeypatch.setattr(dictionary, "fingerprint", colliding_without_salt)
    rows = [("a", "b"), ("b", "c"), ("c", "a")]
    path = tmp_path / "edges.tsv"
    path.write_text("".join(f"{lhs}\t{rhs}\n" for lhs, rhs in rows))
    config = make_config()
    log = io.StringIO()
    import_edges(config, [str(path)], ImportOptions(), Reporter("json", log))
    assert imported_edges(config) == Counter(("link", lhs, rhs) for lhs, rhs in rows)
    assert "share a fingerprint" in log.getvalue()


def test_progress_and_summary_are_reported_as_json_lines(make_config, tmp_path):
    path = write_tsv(tmp_path / "edges.tsv", social_graph())
    log = io.StringIO()
    import_edges(user_item_config(make_config), [path], ImportOptions(rel_col=1, rhs_col=2),
                 Reporter("json", log))
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    done = [record for record in records if record.get("event") == "import done"]
    assert done and done[0]["edges_read"] == 400 and done[0]["edges_written"] == 400
    reading = [record for record in records if record.get("progress") == "import: reading"]
    size = (tmp_path / "edges.tsv").stat().st_size
    assert reading[0]["total"] == size  # bytes of the input, known before reading
    (reading_done,) = [record for record in records
                       if record.get("event") == "import: reading done"]
    assert reading_done["bytes"] == size and reading_done["edges"] == 400


def test_reading_progress_of_a_compressed_input_counts_edges(make_config, tmp_path):
    """A decompressed input's size in bytes is not known: edges are counted instead, with
    a total estimated from the share of the file read."""
    text = "".join(f"{lhs}\t{rel}\t{rhs}\n" for lhs, rel, rhs in social_graph())
    path = tmp_path / "edges.tsv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    log = io.StringIO()
    import_edges(user_item_config(make_config), [str(path)],
                 ImportOptions(rel_col=1, rhs_col=2), Reporter("json", log))
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    (reading_done,) = [record for record in records
                       if record.get("event") == "import: reading done"]
    assert reading_done["edges"] == 400 and "bytes" not in reading_done


def test_a_bucket_that_fails_to_publish_among_others_leaves_no_file(make_config, tmp_path,
                                                                     monkeypatch):
    # Buckets are closed and published several at once: one failing among them must still
    # leave neither buckets nor temporary files, and raise its own error.
    path = write_tsv(tmp_path / "edges.tsv", social_graph())
    config = user_item_config(make_config)
    real_replace = os.replace

    def replace(source, target):
        if str(target).endswith("edges_1_0.h5"):
            raise OSError("no space left on device")
        real_replace(source, target)

    monkeypatch.setattr("tessera.storage.fs.os.replace", replace)
    with pytest.raises(OSError, match="no space left"):
        import_edges(config, [path], ImportOptions(rel_col=1, rhs_col=2), QUIET)
    assert os.listdir(config.edge_paths[0]) == []
    assert Directory(config.entity_path).listdir() == []


def test_a_failure_while_staging_entity_files_undoes_the_buckets(make_config, tmp_path,
                                                                   monkeypatch):
    # The entity files are staged by another thread while the buckets are written: its
    # failure reaches the caller, and the buckets already published are deleted.
    path = write_tsv(tmp_path / "edges.tsv", social_graph())
    config = user_item_config(make_config)
    real_write = entity_files.write_names_file

    def failing_write(directory, name, names):
        if name == "entity_names_user_2.json":
            raise OSError("no space left on device")
        real_write(directory, name, names)

    monkeypatch.setattr(entity_files, "write_names_file", failing_write)
    with pytest.raises(OSError, match="no space left"):
        import_edges(config, [path], ImportOptions(rel_col=1, rhs_col=2), QUIET)
    assert os.listdir(config.edge_paths[0]) == []
    assert Directory(config.entity_path).listdir() == []


def test_inputs_and_outputs_on_s3(make_config, tmp_path, s3_dir):
    rows = social_graph(count=100)
    local = write_tsv(tmp_path / "edges.tsv", rows)
    inputs = Directory(s3_dir.url + "/in", s3_dir.storage_options)
    with inputs.writing("edges.tsv") as temp_path, open(local, "rb") as source:
        with open(temp_path, "wb") as sink:
            sink.write(source.read())
    config = user_item_config(make_config, s3_dir.url + "/out",
                              storage_options=s3_dir.storage_options)
    log = io.StringIO()
    import_edges(config, [inputs.url_of("edges.tsv")], ImportOptions(rel_col=1, rhs_col=2),
                 Reporter("json", log))
    assert imported_edges(config) == as_multiset(rows)
    reading = [record for record in map(json.loads, log.getvalue().splitlines())
               if record.get("progress") == "import: reading"]
    assert reading[0]["total"] == (tmp_path / "edges.tsv").stat().st_size
    assert grid(config) == (3, 3)


def test_the_temporary_edge_ids_are_removed_after_success_and_failure(make_config, tmp_path):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    good = write_tsv(tmp_path / "good.tsv", social_graph(count=50))
    import_edges(user_item_config(make_config), [good],
                 ImportOptions(rel_col=1, rhs_col=2, work_dir=str(work_dir)), QUIET)
    assert list(work_dir.iterdir()) == []
    bad = write_tsv(tmp_path / "bad.tsv", [("user1", "hates", "user2")])
    with pytest.raises(FormatError):
        import_edges(user_item_config(make_config, str(tmp_path / "other")), [bad],
                     ImportOptions(rel_col=1, rhs_col=2, work_dir=str(work_dir)), QUIET)
    assert list(work_dir.iterdir()) == []


@pytest.mark.parametrize(("options", "message"), [
    (ImportOptions(lhs_col=-1), "lhs_col must be a 0-based column index"),
    (ImportOptions(rel_col=0), "rel_col \\(0\\) must differ from lhs_col and rhs_col"),
    (ImportOptions(partitioning="metis"), "unknown partitioning 'metis'"),
    (ImportOptions(block_edges=0), "block_edges must be at least 1"),
    (ImportOptions(entity_min_count=0), "entity_min_count must be at least 1"),
    (ImportOptions(delimiter="::"), "delimiter must be one character"),
    (ImportOptions(seed=-3), "seed must not be negative"),
    (ImportOptions(input_format="xlsx"), "unknown input format 'xlsx'"),
])
def test_bad_options_are_rejected_before_reading(make_config, tmp_path, options, message):
    with pytest.raises(BadInputError, match=message):
        import_edges(make_config(), [str(tmp_path / "missing.tsv")], options, QUIET)
