"""Entity counts, entity names and dynamic relation files: PBG's names, exact bytes, errors."""

from __future__ import annotations

import json

import pytest

from tessera.config import parse_config
from tessera.errors import BadInputError, FormatError
from tessera.storage.entities import (
    entity_count_file,
    entity_names_file,
    read_dynamic_relation_count,
    read_entity_count,
    read_entity_counts,
    read_entity_names,
    read_relation_names,
    write_dynamic_relation_count,
    write_entity_count,
    write_entity_names,
    write_relation_names,
)


def test_file_names_are_pbgs():
    assert entity_count_file("user", 3) == "entity_count_user_3.txt"
    assert entity_names_file("user", 0) == "entity_names_user_0.json"


def test_counts_and_names_round_trip_on_every_backend(directory):
    write_entity_count(directory, "user", 1, 57)
    write_entity_names(directory, "user", 1, ["alice", "bob", "zoë"])
    write_dynamic_relation_count(directory, 3)
    write_relation_names(directory, ["follows", "likes", "blocks"])

    assert read_entity_count(directory, "user", 1) == 57
    assert read_entity_names(directory, "user", 1) == ["alice", "bob", "zoë"]
    assert read_dynamic_relation_count(directory) == 3
    assert read_relation_names(directory) == ["follows", "likes", "blocks"]
    # PBG reads these files too: one integer and a newline, a plain JSON list.
    assert directory.read_text("entity_count_user_1.txt") == "57\n"
    assert directory.read_text("dynamic_rel_count.txt") == "3\n"
    assert json.loads(directory.read_text("entity_names_user_1.json")) == ["alice", "bob", "zoë"]
    assert json.loads(directory.read_text("dynamic_rel_names.json"))[2] == "blocks"


def test_read_entity_counts_covers_every_type_and_partition(local_dir):
    config = parse_config({
        "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
        "relations": [{"name": "likes", "lhs": "user", "rhs": "item"}],
        "dimension": 4, "entity_path": local_dir.url, "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
    })
    for entity_type, part, count in (("user", 0, 10), ("user", 1, 11), ("item", 0, 0)):
        write_entity_count(local_dir, entity_type, part, count)
    assert read_entity_counts(local_dir, config) == {"user": [10, 11], "item": [0]}


def test_counts_accept_surrounding_whitespace(local_dir):
    local_dir.write_text("entity_count_user_0.txt", "  42\r\n")
    assert read_entity_count(local_dir, "user", 0) == 42


@pytest.mark.parametrize("text", ["", "abc\n", "-3\n", "4.5\n", "1 2\n", "0x10\n"])
def test_a_count_that_is_not_a_non_negative_integer_is_a_format_error(local_dir, text):
    local_dir.write_text("entity_count_user_0.txt", text)
    with pytest.raises(FormatError, match="non-negative integer") as caught:
        read_entity_count(local_dir, "user", 0)
    assert caught.value.file.endswith("entity_count_user_0.txt")


def test_a_missing_count_file_names_the_file_and_the_fix(local_dir):
    with pytest.raises(BadInputError, match=r"entity_count_user_4\.txt: file not found.*"
                                            r"tessera import"):
        read_entity_count(local_dir, "user", 4)
    with pytest.raises(BadInputError, match=r"dynamic_rel_count\.txt: file not found"):
        read_dynamic_relation_count(local_dir)


@pytest.mark.parametrize(("text", "problem"), [
    ('{"a": 1}', "expected a JSON list"),
    ('["a", 7]', "item 1 is 7, expected a string"),
    ('["a", ', "invalid JSON"),
])
def test_malformed_names_are_format_errors(local_dir, text, problem):
    local_dir.write_text("entity_names_user_0.json", text)
    with pytest.raises(FormatError, match=problem) as caught:
        read_entity_names(local_dir, "user", 0)
    assert caught.value.file.endswith("entity_names_user_0.json")


def test_a_negative_count_is_refused_before_anything_is_written(local_dir):
    with pytest.raises(ValueError, match="negative"):
        write_entity_count(local_dir, "user", 0, -1)
    assert local_dir.listdir() == []


@pytest.mark.parametrize("count", [0, 1, 4, 5, 11])
def test_names_written_in_pieces_are_json_dumps_text(local_dir, monkeypatch, count):
    # The names are encoded a few at a time; the file must still be one JSON list, the same
    # bytes as encoding them at once, whatever the piece boundaries.
    monkeypatch.setattr("tessera.storage.entities.NAMES_PER_PIECE", 4)
    names = [f'n"{index}\\é' for index in range(count)]
    write_entity_names(local_dir, "user", 0, names)
    text = local_dir.read_text("entity_names_user_0.json")
    assert text == json.dumps(names, ensure_ascii=False)
    assert read_entity_names(local_dir, "user", 0) == names
