"""Name dictionaries: every distinct name seen so far, with a dense id, a kind and a count.

One dictionary holds the entities of all types (the type is the name's "kind": the same name
in two types is two entries), another the relation types, so that each side of an edge
becomes one integer id whatever its type. Names are found by fingerprint in a `KeyTable` and
then compared byte for byte with the stored name: if two different names ever share a
fingerprint, `FingerprintCollision` is raised and the importer starts over with another salt,
so a collision can cost time but never merge two entities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import BadInputError
from .fingerprint import WORD_BYTES, NameBytes, combine, fingerprint, names_equal
from .hashtable import KeyTable


class FingerprintCollision(Exception):
    """Two different names got the same fingerprint under the dictionary's salt."""


class _GrowingArray:
    """A NumPy array appended to in amortised constant time (capacity doubles)."""

    def __init__(self, dtype: type, spare: int = 0) -> None:
        self._values: np.ndarray = np.zeros(16 + spare, dtype=dtype)
        self._spare = spare  # zeroed slack kept past the end (the word padding of name bytes)
        self.size = 0

    @property
    def values(self) -> np.ndarray:
        return self._values[:self.size]

    @property
    def padded(self) -> np.ndarray:
        return self._values[:self.size + self._spare]

    def extend(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end + self._spare > len(self._values):
            grown = np.zeros(max(2 * len(self._values), end + self._spare),
                             dtype=self._values.dtype)
            grown[:self.size] = self.values
            self._values = grown
        self._values[self.size:end] = values
        self.size = end


@dataclass(frozen=True)
class HashedNames:
    """Names with their bytes and salted fingerprints: the share of encoding that needs no
    dictionary, so that it can be done ahead, in the reading thread, while the main thread
    looks up the previous block."""

    names: pa.Array
    block: NameBytes
    fingerprints: np.ndarray  # uint64, under `salt`
    salt: int

    @classmethod
    def of(cls, names: pa.Array, salt: int) -> HashedNames:
        block = NameBytes.from_arrow(names)
        return cls(names, block, fingerprint(block, salt), salt)

    def __len__(self) -> int:
        return len(self.names)


class NameDictionary:
    """Distinct (kind, name) pairs with ids 0, 1, 2... and how often each occurred."""

    def __init__(self, salt: int = 0) -> None:
        self.salt = salt
        self._table = KeyTable()
        self._bytes = _GrowingArray(np.uint8, spare=WORD_BYTES)
        self._starts = _GrowingArray(np.int64)
        self._lengths = _GrowingArray(np.int64)
        self._first_words = _GrowingArray(np.uint64)
        self._kinds = _GrowingArray(np.int32)
        self._counts = _GrowingArray(np.int64)
        self._kinds_present: set[int] = set()

    def __len__(self) -> int:
        return self._kinds.size

    @property
    def kinds(self) -> np.ndarray:
        return self._kinds.values

    @property
    def counts(self) -> np.ndarray:
        """Occurrences of each id, as counted by `encode`."""
        return self._counts.values

    def encode(self, names: pa.Array | HashedNames, kinds: np.ndarray | int = 0,
               weights: np.ndarray | None = None) -> np.ndarray:
        """The id of each name (int64), adding new names; counts grow by `weights` (or 1)."""
        hashed = self._hashed(names)
        block, names = hashed.block, hashed.names
        keys = self._keys(hashed, kinds)
        ids = self._table.find(keys)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            try:
                new_ids, representatives = self._table.add(keys[missing])
            except OverflowError as error:
                raise BadInputError(f"too many distinct names ({error})") from error
            ids[missing] = new_ids
            self._store(names, missing[representatives], kinds)
        self._check_equal(block, ids, kinds)
        # In place: a bincount would make (and add) an array the size of the dictionary.
        np.add.at(self._counts.values, ids,
                  1 if weights is None else np.asarray(weights, dtype=np.int64))
        return ids

    def find(self, names: pa.Array | HashedNames, kinds: np.ndarray | int = 0) -> np.ndarray:
        """The id of each name (int64), or -1 for names not in the dictionary."""
        hashed = self._hashed(names)
        block = hashed.block
        ids = self._table.find(self._keys(hashed, kinds))
        known = np.flatnonzero(ids >= 0)
        ids[known[~self._equal(block, known, ids[known], _at(kinds, known))]] = -1
        return ids

    def stop_lookups(self) -> None:
        """Free the lookup table once no name will be encoded or found any more (names,
        kinds and counts stay)."""
        self._table = KeyTable(capacity=16)

    def names(self, ids: np.ndarray | None = None) -> pa.LargeStringArray:
        """The names of `ids` (all, in id order, by default)."""
        offsets = np.append(self._starts.values, self._bytes.size)
        everything = pa.LargeStringArray.from_buffers(
            len(self), pa.py_buffer(offsets), pa.py_buffer(self._bytes.values))
        return everything if ids is None else everything.take(pa.array(ids))

    def stable_hashes(self) -> np.ndarray:
        """A hash of each name that depends on the name only (not on salt or kind)."""
        return fingerprint(self._stored(), salt=0)

    def _hashed(self, names: pa.Array | HashedNames) -> HashedNames:
        if not isinstance(names, HashedNames):
            return HashedNames.of(names, self.salt)
        if names.salt != self.salt:
            raise ValueError(f"names hashed under salt {names.salt}, not {self.salt}")
        return names

    def _keys(self, hashed: HashedNames, kinds: np.ndarray | int) -> np.ndarray:
        """Table keys: the name's fingerprint mixed with its kind (the same name in two
        entity types is two entries)."""
        keys = combine(hashed.fingerprints, np.asarray(kinds).astype(np.uint64))
        keys[keys == 0] = 1  # 0 marks an empty slot; the byte comparison guards the merge
        return keys

    def _store(self, names: pa.Array, rows: np.ndarray, kinds: np.ndarray | int) -> None:
        """Append the names at `rows` (whose kinds are `kinds`) as the next ids."""
        chosen = NameBytes.from_arrow(names.take(pa.array(rows)))
        self._starts.extend(self._bytes.size + chosen.starts)
        self._bytes.extend(chosen.data[:len(chosen.data) - WORD_BYTES])
        self._lengths.extend(chosen.lengths)
        self._first_words.extend(chosen.first_words)
        new_kinds = np.broadcast_to(_at(kinds, rows), len(rows))
        self._kinds.extend(new_kinds)
        self._kinds_present.update(np.unique(new_kinds).tolist())
        self._counts.extend(np.zeros(len(rows), dtype=np.int64))

    def _stored(self) -> NameBytes:
        return NameBytes(self._bytes.padded, self._starts.values, self._lengths.values,
                         self._first_words.values)

    def _equal(self, block: NameBytes, rows: np.ndarray | None, ids: np.ndarray,
               kinds: np.ndarray | int) -> np.ndarray:
        equal = names_equal(block, rows, self._stored(), ids)
        if np.ndim(kinds) or self._kinds_present != {kinds}:  # else every entry is that kind
            equal &= self.kinds[ids] == kinds
        return equal

    def _check_equal(self, block: NameBytes, ids: np.ndarray, kinds: np.ndarray | int) -> None:
        if not self._equal(block, None, ids, kinds).all():
            raise FingerprintCollision(f"two names share a fingerprint under salt {self.salt}")


def _at(kinds: np.ndarray | int, rows: np.ndarray) -> np.ndarray | int:
    """The kinds of `rows`, where `kinds` is one kind for all rows or one per row."""
    return kinds if np.ndim(kinds) == 0 else np.asarray(kinds)[rows]
