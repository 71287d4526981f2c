"""Fingerprints of names: stable values, equal names equal, different names different; exact
byte comparison of names of any length."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.importing.fingerprint import NameBytes, fingerprint, names_equal

TRICKY = ["", "a", "a\0", "ab", "abcdefg", "abcdefgh", "abcdefghi", "abcdefgh\0",
          "x" * 16, "x" * 17, "x" * 99 + "y", "x" * 100, "zoë", "東京", "a\tb"]


def name_bytes(names: list[str]) -> NameBytes:
    return NameBytes.from_arrow(pa.array(names, pa.large_string()))


def test_known_values_do_not_change():
    # Hash partitioning places entities by this hash: it must be the same in every release,
    # process and platform.
    hashes = fingerprint(name_bytes(["", "tessera", "x" * 20]))
    assert hashes.dtype == np.uint64
    assert hashes.tolist() == [10374725776778777516, 16202713128884433425,
                               4818198638193835483]


def test_distinct_names_get_distinct_fingerprints_and_equal_names_equal_ones():
    hashes = fingerprint(name_bytes(TRICKY + TRICKY[::-1])).tolist()
    assert len(set(hashes[:len(TRICKY)])) == len(TRICKY)
    assert hashes[:len(TRICKY)] == hashes[len(TRICKY):][::-1]


def test_fingerprint_ignores_where_the_names_sit_in_arrow_buffers():
    names = pa.array(["pad", "pad2"] + TRICKY, pa.large_string())
    sliced = NameBytes.from_arrow(names.slice(2))
    as_plain_strings = NameBytes.from_arrow(pa.array(TRICKY, pa.string()))
    assert fingerprint(sliced).tolist() == fingerprint(name_bytes(TRICKY)).tolist()
    assert fingerprint(as_plain_strings).tolist() == fingerprint(name_bytes(TRICKY)).tolist()


def test_salt_changes_every_fingerprint():
    names = name_bytes(TRICKY)
    plain = fingerprint(names)
    assert (fingerprint(names, salt=1) != plain).all()


def test_bits_are_well_mixed():
    hashes = fingerprint(name_bytes([f"n{i}" for i in range(4096)]))
    bits = (hashes[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    # Every bit is set in about half of the hashes of these near-identical names.
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.05)
    assert len(np.unique(hashes % np.uint64(8))) == 8


def test_names_equal_compares_every_byte():
    left = name_bytes(TRICKY)
    right = name_bytes(TRICKY[::-1])
    n = len(TRICKY)
    same = names_equal(left, None, right, np.arange(n)[::-1].copy())
    assert same.all()
    shifted = names_equal(left, np.arange(n), right, (np.arange(n)[::-1] + 1) % n)
    assert not shifted.any()


@pytest.mark.parametrize(("first", "second"), [
    ("a", "a\0"), ("abcdefgh", "abcdefgh\0"), ("x" * 99 + "y", "x" * 100),
    ("x" * 16, "x" * 17), ("", "\0"),
])
def test_names_differing_only_in_length_or_late_bytes_are_unequal(first, second):
    names = name_bytes([first, second, first])
    assert names_equal(names, np.array([0, 0]), names, np.array([1, 2])).tolist() == [False,
                                                                                     True]
