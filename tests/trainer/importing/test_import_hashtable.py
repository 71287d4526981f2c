"""The array-at-a-time hash table: ids in insertion order, repeats, growth, absent keys."""

from __future__ import annotations

import numpy as np

from tessera.importing.hashtable import KeyTable


def random_keys(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 2**63, count, dtype=np.int64).astype(np.uint64)


def test_added_keys_are_found_with_dense_ids_and_others_are_not():
    table = KeyTable(capacity=16)
    keys = random_keys(1000, seed=0)
    ids, representatives = table.add(keys)
    assert sorted(ids.tolist()) == list(range(1000))
    assert (representatives == np.argsort(ids)).all()  # each new id's only occurrence
    assert (table.find(keys) == ids).all()
    assert (table.find(random_keys(1000, seed=1)) == -1).all()
    assert len(table) == 1000


def test_repeated_keys_share_an_id_and_have_one_representative():
    table = KeyTable(capacity=16)
    distinct = random_keys(50, seed=2)
    keys = np.concatenate([distinct, distinct[::-1], distinct[:7]])
    ids, representatives = table.add(keys)
    assert len(table) == 50
    by_key: dict[int, int] = {}
    for key, key_id in zip(keys.tolist(), ids.tolist()):
        assert by_key.setdefault(key, key_id) == key_id
    assert (ids[representatives] == np.arange(50)).all()
    assert sorted(keys[representatives].tolist()) == sorted(distinct.tolist())


def test_ids_survive_growth_and_later_ids_continue_the_sequence():
    table = KeyTable(capacity=16)  # grows many times below
    first = random_keys(300, seed=3)
    first_ids, _ = table.add(first)
    second = random_keys(5000, seed=4)
    second_ids, _ = table.add(second)
    assert (table.find(first) == first_ids).all()
    assert sorted(second_ids.tolist()) == list(range(300, 5300))
    assert len(table.keys) >= 2 * len(table)  # never more than half full


def test_keys_that_collide_on_their_slot_are_told_apart():
    table = KeyTable(capacity=64)
    # Same low bits, so the same home slot: found by probing past each other.
    keys = (np.arange(1, 41, dtype=np.uint64) << np.uint64(32)) | np.uint64(5)
    ids, _ = table.add(keys[:20])
    assert (table.find(keys[:20]) == ids).all()
    assert (table.find(keys[20:]) == -1).all()
    more_ids, _ = table.add(keys[20:])
    assert (table.find(keys) == np.concatenate([ids, more_ids])).all()
