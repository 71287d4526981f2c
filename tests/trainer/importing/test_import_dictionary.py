"""Name dictionaries: ids, kinds, counts, stored names, and collisions caught, not merged."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.importing import dictionary as dictionary_module
from tessera.importing.dictionary import FingerprintCollision, HashedNames, NameDictionary


def strings(*names: str) -> pa.Array:
    return pa.array(list(names), pa.large_string())


def test_encode_gives_dense_ids_counts_and_names_back():
    names = NameDictionary()
    first = names.encode(strings("alice", "bob", "alice", "a-rather-long-name-indeed"))
    second = names.encode(strings("bob", "carol", "a-rather-long-name-indeed"))
    assert first[0] == first[2] and len(set(first.tolist())) == 3
    assert second[0] == first[1] and second[2] == first[3]
    assert len(names) == 4
    by_name = dict(zip(names.names().to_pylist(), names.counts.tolist()))
    assert by_name == {"alice": 2, "bob": 2, "carol": 1, "a-rather-long-name-indeed": 2}
    assert names.names(second).to_pylist() == ["bob", "carol", "a-rather-long-name-indeed"]


def test_the_same_name_of_two_kinds_is_two_entries():
    names = NameDictionary()
    ids = names.encode(strings("x", "x", "y"), kinds=np.array([0, 1, 0]))
    assert ids[0] != ids[1]
    assert names.kinds[ids].tolist() == [0, 1, 0]
    assert names.encode(strings("x"), kinds=1)[0] == ids[1]


def test_weights_count_occurrences_of_a_block_dictionary():
    names = NameDictionary()
    names.encode(strings("follows", "likes"), weights=np.array([5, 2]))
    names.encode(strings("likes"), weights=np.array([3]))
    assert dict(zip(names.names().to_pylist(), names.counts.tolist())) == {"follows": 5,
                                                                          "likes": 5}


def test_find_does_not_add_and_reports_unknown_names():
    names = NameDictionary()
    follows, likes = names.encode(strings("follows", "likes")).tolist()
    assert names.find(strings("likes", "blocks", "follows")).tolist() == [likes, -1, follows]
    assert len(names) == 2


def test_stable_hashes_depend_on_the_name_only():
    salted = NameDictionary(salt=3)
    salted.encode(strings("b", "a"), kinds=1)
    plain = NameDictionary()
    plain.encode(strings("a", "b", "c"))

    def hash_by_name(names: NameDictionary) -> dict[str, int]:
        return dict(zip(names.names().to_pylist(), names.stable_hashes().tolist()))

    salted_hashes, plain_hashes = hash_by_name(salted), hash_by_name(plain)
    assert salted_hashes == {"a": plain_hashes["a"], "b": plain_hashes["b"]}


def test_two_names_with_one_fingerprint_raise_instead_of_merging(monkeypatch):
    def constant_fingerprint(names, salt=0):
        return np.full(len(names), 42, dtype=np.uint64)

    monkeypatch.setattr(dictionary_module, "fingerprint", constant_fingerprint)
    names = NameDictionary()
    names.encode(strings("same", "same"))  # one name: no collision
    with pytest.raises(FingerprintCollision):
        names.encode(strings("other"))
    # Within one block too.
    with pytest.raises(FingerprintCollision):
        NameDictionary().encode(strings("one", "two"))


def test_names_hashed_ahead_encode_as_the_names_themselves():
    blocks = [strings("x", "y", "x"), strings("y", "z"), strings("w", "x")]
    plain, ahead = NameDictionary(salt=3), NameDictionary(salt=3)
    for block, kind in zip(blocks, [0, 1, 0]):
        assert (plain.encode(block, kind) == ahead.encode(HashedNames.of(block, 3), kind)).all()
    assert ahead.names().to_pylist() == plain.names().to_pylist()
    assert (ahead.counts == plain.counts).all() and (ahead.kinds == plain.kinds).all()
    assert (ahead.find(HashedNames.of(strings("z", "v"), 3), 1) == plain.find(
        strings("z", "v"), 1)).all()
    with pytest.raises(ValueError, match="salt 0"):  # hashed for another dictionary
        ahead.encode(HashedNames.of(strings("x"), 0))
