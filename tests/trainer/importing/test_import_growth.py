"""Importing into an entity folder that holds a dictionary: known ids kept, new ones appended,
on local disk and S3, and the old dictionary intact whatever stops the import."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys

import numpy as np
import pytest
from importing_support import FOLLOWS_AND_LIKES, entity_names, imported_edges
from support.kills import wait_for
from test_import_edges import as_multiset, social_graph, write_tsv

from tessera.errors import BadInputError
from tessera.importing import ImportOptions, import_edges
from tessera.importing.dictionary_update import (
    STAGING_FOLDER,
    DictionaryUpdate,
    complete_publication,
)
from tessera.importing.growth import fill_smallest_first
from tessera.importing.lease import LEASE_FILE
from tessera.progress import Reporter
from tessera.storage.entities import read_relation_names
from tessera.storage.fs import Directory

QUIET = Reporter("quiet")
RELATION_COLUMN = ImportOptions(rel_col=1, rhs_col=2)
SEEDED = ImportOptions(rel_col=1, rhs_col=2, seed=3)


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """Where the imports write: a local folder, or a prefix on the test S3 server."""
    if request.param == "local":
        return str(tmp_path / "out"), {}
    location = request.getfixturevalue("s3_dir")
    return location.url, location.storage_options


def two_imports_config(make_config, root, **overrides):
    """Users in three partitions, items in one; two edge paths, one per import."""
    url, storage_options = root
    return make_config(url, entities={"user": {"num_partitions": 3},
                                      "item": {"num_partitions": 1}},
                       relations=FOLLOWS_AND_LIKES, num_edge_paths=2,
                       storage_options=storage_options, **overrides)


def first_and_second(config):
    """The config of the first import (edge path 0) and of the second (edge path 1)."""
    return (dataclasses.replace(config, edge_paths=config.edge_paths[:1]),
            dataclasses.replace(config, edge_paths=config.edge_paths[1:]))


def grown_rows(seed: int = 1):
    """A later graph: some known users and items, and users and items never seen."""
    rows = social_graph(300, seed=seed)
    return [(lhs.replace("user5", "newuser5"), rel, rhs.replace("item1", "newitem1"))
            for lhs, rel, rhs in rows]


def test_known_entities_keep_their_places_and_new_ones_are_appended(make_config, root,
                                                                    tmp_path):
    first, second = first_and_second(two_imports_config(make_config, root))
    old_rows, new_rows = social_graph(400), grown_rows()
    import_edges(first, [write_tsv(tmp_path / "old.tsv", old_rows)], SEEDED,
                 QUIET)
    before = entity_names(first)

    summary = import_edges(second, [write_tsv(tmp_path / "new.tsv", new_rows)],
                           SEEDED, QUIET)

    after = entity_names(second)
    for key, names in before.items():
        assert after[key][:len(names)] == names  # every known entity where it was
    known = set().union(*before.values())
    added = set().union(*after.values()) - known
    mentioned = {row[0] for row in new_rows} | {row[2] for row in new_rows}
    assert added == mentioned - known and added
    assert all(name.startswith("new") for name in added)
    assert summary.dictionary_extended
    assert summary.entities_new == {
        "user": sum(name.startswith("newuser") for name in added),
        "item": sum(name.startswith("newitem") for name in added)}
    assert summary.entity_counts["user"] == [len(after["user", part]) for part in range(3)]
    # New users filled the smallest partitions first: the partitions stay even.
    assert max(summary.entity_counts["user"]) - min(summary.entity_counts["user"]) <= 1
    # The new import's edges use the kept ids; the old one's still read the same.
    assert imported_edges(second) == as_multiset(new_rows)
    assert imported_edges(first) == as_multiset(old_rows)
    assert not Directory(second.entity_path, second.storage_options).exists(STAGING_FOLDER)


def test_dynamic_relation_types_keep_their_ids_and_new_ones_follow(make_config, root,
                                                                   tmp_path):
    config = make_config(root[0], num_edge_paths=2, dynamic_relations=True,
                         storage_options=root[1])
    first, second = first_and_second(config)
    old_rows = [("a", "likes", "b"), ("b", "knows", "c")]
    new_rows = [("c", "zzz", "d"), ("a", "aaa", "c"), ("d", "likes", "a")]
    import_edges(first, [write_tsv(tmp_path / "old.tsv", old_rows)], RELATION_COLUMN, QUIET)
    directory = Directory(config.entity_path, config.storage_options)
    assert read_relation_names(directory) == ["knows", "likes"]

    summary = import_edges(second, [write_tsv(tmp_path / "new.tsv", new_rows)],
                           RELATION_COLUMN, QUIET)

    # Known relation types first, as they were; new ones after them, in name order.
    assert read_relation_names(directory) == ["knows", "likes", "aaa", "zzz"]
    assert (summary.relation_types_new, summary.entities_new) == (2, {"node": 1})
    assert entity_names(second)["node", 0][:3] == entity_names(first)["node", 0][:3]
    assert imported_edges(second) == as_multiset(new_rows)
    assert imported_edges(first) == as_multiset(old_rows)


def test_new_entities_fill_the_smallest_partitions_first():
    assert fill_smallest_first(np.array([5, 2, 4]), 4).tolist() == [0, 3, 1]
    assert fill_smallest_first(np.array([5, 2, 4]), 0).tolist() == [0, 0, 0]
    assert fill_smallest_first(np.array([3, 3]), 5).tolist() == [3, 2]
    assert fill_smallest_first(np.array([9, 0, 1]), 2).tolist() == [0, 2, 0]


def test_hash_partitioning_puts_a_new_name_where_a_fresh_hash_import_would(make_config,
                                                                           tmp_path):
    options = ImportOptions(rel_col=1, rhs_col=2, partitioning="hash")
    config = two_imports_config(make_config, (str(tmp_path / "grown"), {}))
    first, second = first_and_second(config)
    old_rows, new_rows = social_graph(400), grown_rows()
    import_edges(first, [write_tsv(tmp_path / "old.tsv", old_rows)], options, QUIET)
    import_edges(second, [write_tsv(tmp_path / "new.tsv", new_rows)], options, QUIET)
    fresh = two_imports_config(make_config, (str(tmp_path / "fresh"), {}))
    fresh = dataclasses.replace(fresh, edge_paths=fresh.edge_paths[:1])
    import_edges(fresh, [write_tsv(tmp_path / "all.tsv", old_rows + new_rows)], options, QUIET)

    def partition_of(config):
        return {name: key for key, names in entity_names(config).items() for name in names}

    assert partition_of(second) == partition_of(fresh)


def test_replace_dictionary_starts_a_new_one(make_config, tmp_path):
    first, second = first_and_second(two_imports_config(make_config, (str(tmp_path), {})))
    import_edges(first, [write_tsv(tmp_path / "old.tsv", social_graph(400))],
                 SEEDED, QUIET)
    new_rows = [("newuser1", "follows", "newuser2")]
    summary = import_edges(second, [write_tsv(tmp_path / "new.tsv", new_rows)],
                           ImportOptions(rel_col=1, rhs_col=2, replace_dictionary=True), QUIET)
    assert not summary.dictionary_extended
    assert sorted(sum(entity_names(second).values(), [])) == ["newuser1", "newuser2"]


def test_a_changed_partition_count_is_refused_naming_the_folder(make_config, tmp_path):
    first, _ = first_and_second(two_imports_config(make_config, (str(tmp_path), {})))
    import_edges(first, [write_tsv(tmp_path / "old.tsv", social_graph(400))],
                 SEEDED, QUIET)
    regrouped = dataclasses.replace(first, entities={
        **first.entities, "user": dataclasses.replace(first.entities["user"], num_partitions=4)})
    with pytest.raises(BadInputError, match=r"entities\.user\.num_partitions is 4.*"
                                            r"set num_partitions to 3.*--replace-dictionary"):
        import_edges(regrouped, [write_tsv(tmp_path / "new.tsv", grown_rows())],
                     SEEDED, QUIET)


def test_a_failed_import_leaves_the_dictionary_as_it_was(make_config, tmp_path):
    first, second = first_and_second(two_imports_config(make_config, (str(tmp_path), {})))
    import_edges(first, [write_tsv(tmp_path / "old.tsv", social_graph(400))],
                 SEEDED, QUIET)
    before = entity_names(first)
    # The second import's edge path is a file: its buckets cannot be written.
    (tmp_path / "edges1").write_text("in the way\n")
    with pytest.raises(Exception):  # noqa: B017 - whichever error the disk gives
        import_edges(second, [write_tsv(tmp_path / "new.tsv", grown_rows())],
                     SEEDED, QUIET)
    assert entity_names(first) == before
    assert not (tmp_path / "entities" / STAGING_FOLDER).exists()


@pytest.mark.slow
def test_a_killed_import_leaves_the_old_dictionary_and_a_rerun_completes(tmp_path):
    root = tmp_path / "out"
    config = {"entities": {"node": {"num_partitions": 4}},
              "relations": [{"name": "link", "lhs": "node", "rhs": "node"}],
              "dimension": 4, "entity_path": str(root / "entities"),
              "edge_paths": [str(root / "edges")], "checkpoint_path": str(root / "ckpt")}
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    old = write_tsv(tmp_path / "old.tsv", [(f"n{i}", f"n{i + 1}") for i in range(1000)])
    rng = np.random.default_rng(0)
    new = write_tsv(tmp_path / "new.tsv", [(f"n{a}", f"n{b}") for a, b in
                                           rng.integers(0, 300_000, size=(600_000, 2))])

    def tessera_import(edges: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "tessera", "import", str(config_file),
                                 edges, "--quiet"], text=True, stderr=subprocess.PIPE)

    assert tessera_import(old).wait(timeout=60) == 0
    entities = Directory(config["entity_path"])
    before = {name: entities.read_text(name) for name in entities.listdir()}

    process = tessera_import(new)
    staged = entities.subdirectory(STAGING_FOLDER)
    # Killed once the new dictionary is staged, while the buckets are being written.
    assert wait_for(lambda: len(staged.listdir()) == 8, process, timeout=120)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert {name: entities.read_text(name) for name in entities.listdir()
            if name not in (STAGING_FOLDER, LEASE_FILE, f".{LEASE_FILE}.lock")
            } == before  # its lease (and the lock file contenders take it under): taken over

    rerun = tessera_import(new)
    assert rerun.wait(timeout=120) == 0, rerun.stderr.read() if rerun.stderr else ""
    assert STAGING_FOLDER not in entities.listdir()
    for part in range(4):
        old_names = json.loads(before[f"entity_names_node_{part}.json"])
        new_names = json.loads(entities.read_text(f"entity_names_node_{part}.json"))
        assert new_names[:len(old_names)] == old_names and len(new_names) > len(old_names)


@pytest.mark.parametrize("names, problem", [
    (["user1", "user1"], "holds an entity name twice"),
    (["user1"], "holds 1 names, but the partition has 2 entities"),
])
def test_a_damaged_dictionary_is_refused_naming_its_file(make_config, tmp_path, names,
                                                         problem):
    first, second = first_and_second(two_imports_config(make_config, (str(tmp_path), {})))
    import_edges(first, [write_tsv(tmp_path / "old.tsv", social_graph(400))], SEEDED, QUIET)
    entities = tmp_path / "entities"
    (entities / "entity_count_user_1.txt").write_text("2\n")
    (entities / "entity_names_user_1.json").write_text(json.dumps(names))
    with pytest.raises(BadInputError, match=rf"entity_names_user_1\.json: {problem}"):
        import_edges(second, [write_tsv(tmp_path / "new.tsv", grown_rows())], SEEDED, QUIET)


def test_a_failed_move_leaves_the_new_dictionary_committed_for_the_next_import(
        make_config, tmp_path, monkeypatch):
    first, _ = first_and_second(two_imports_config(make_config, (str(tmp_path), {})))
    import_edges(first, [write_tsv(tmp_path / "old.tsv", social_graph(400))], SEEDED, QUIET)
    entities = Directory(str(tmp_path / "entities"))
    known = entity_names(first)
    update = DictionaryUpdate(entities, {"user": [len(known["user", part]) for part in range(3)],
                                         "item": [len(known["item", 0])]}, None)
    grown = {**known, **{("user", part): [*known["user", part], f"newuser{part}"]
                         for part in range(3)}}
    for part in range(3):
        update.stage_partition("user", part, grown["user", part])
    update.commit()
    moves = 0
    real_move = Directory.move

    def third_move_fails(self, name, target):
        nonlocal moves
        moves += 1
        if moves == 3:
            raise OSError("no space left on device")
        real_move(self, name, target)

    monkeypatch.setattr(Directory, "move", third_move_fails)
    with pytest.raises(OSError):
        update.finish()
    monkeypatch.setattr(Directory, "move", real_move)
    assert entity_names(first) == grown  # the committed dictionary, half of it still aside
    assert complete_publication(entities)
    assert STAGING_FOLDER not in entities.listdir()
    assert entity_names(first) == grown
