"""64-bit fingerprints and exact comparison of many strings at once, without a Python loop.

The importer identifies names by fingerprint in its hash table and assigns hash partitions
with the same function, so the hash must be vectorised, the same in every run, process and
platform (unlike Python's salted `hash`), and well mixed in every bit. A name is read as
little-endian 64-bit words, the last one zero-padded; each word is folded in with a multiply
and MurmurHash3's 64-bit finaliser, and the state starts from the length and a salt, so
that "a" and "a\\0" differ. The dictionary mixes an entity's type in afterwards (`combine`),
so that hashing, which needs no type, can run ahead of it.

A fingerprint only proposes that two names are equal; `names_equal` confirms it byte for
byte, on the same word view.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_U64 = np.uint64
_ALL_BITS = _U64(0xFFFF_FFFF_FFFF_FFFF)
_GOLDEN = _U64(0x9E37_79B9_7F4A_7C15)
_LENGTH_MULTIPLIER = _U64(0xC2B2_AE3D_27D4_EB4F)
_FMIX_1 = _U64(0xFF51_AFD7_ED55_8CCD)
_FMIX_2 = _U64(0xC4CE_B9FE_1A85_EC53)
_SEED = 0x5EED_7E55_E4A0_0001  # so that the empty name does not hash to 0
WORD_BYTES = 8


@dataclass(frozen=True)
class NameBytes:
    """The UTF-8 bytes of some names, readable as little-endian 64-bit words.

    `data` ends with `WORD_BYTES` of zero padding so that a word can be read at any byte
    offset of a name, even the last one's.
    """

    data: np.ndarray  # uint8, padded
    starts: np.ndarray  # int64, byte offset of each name in `data`
    lengths: np.ndarray  # int64, byte length of each name
    first_words: np.ndarray  # uint64, word 0 of each name (kept: every comparison needs it)

    @classmethod
    def from_arrow(cls, names: pa.Array) -> NameBytes:
        """View an Arrow string array (copying its bytes once, into a padded buffer)."""
        if not pa.types.is_large_string(names.type):
            names = names.cast(pa.large_string())
        if names.null_count:
            raise ValueError("names must not be null")
        _, offsets_buffer, data_buffer = names.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=len(names) + 1,
                                offset=names.offset * 8)
        first, last = int(offsets[0]), int(offsets[-1])
        data = np.zeros(last - first + WORD_BYTES, dtype=np.uint8)
        if last > first:
            data[:last - first] = np.frombuffer(data_buffer, dtype=np.uint8,
                                                count=last - first, offset=first)
        starts, lengths = offsets[:-1] - first, np.diff(offsets)
        return cls(data, starts, lengths, _masked_words(data, starts, lengths))

    def __len__(self) -> int:
        return len(self.lengths)

    def word(self, index: int, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Word `index` of the given names, bytes past each name's end zeroed.

        Only names that reach word `index` (or word 0 of any name) may be asked for.
        """
        if index == 0:
            return self.first_words[rows]
        return _masked_words(self.data, self.starts[rows] + WORD_BYTES * index,
                             self.lengths[rows] - WORD_BYTES * index)


def fingerprint(names: NameBytes, salt: int = 0) -> np.ndarray:
    """A 64-bit hash (uint64) of each name; equal (name, salt) give equal hashes."""
    state = names.lengths.astype(np.uint64) * _LENGTH_MULTIPLIER
    state ^= _U64((salt ^ _SEED) & 0xFFFF_FFFF_FFFF_FFFF)
    state ^= names.word(0)
    state *= _GOLDEN
    _finalise(state)
    rows = np.flatnonzero(names.lengths > WORD_BYTES)
    index = 1
    while len(rows):  # only names longer than `index` words take part in this round
        part = state[rows]
        part ^= names.word(index, rows)
        part *= _GOLDEN
        _finalise(part)
        state[rows] = part
        index += 1
        rows = rows[names.lengths[rows] > WORD_BYTES * index]
    return state


def combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """A hash of each pair (left[i], right[i]) of hashes; order matters."""
    state = left * _GOLDEN
    state ^= right
    _finalise(state)
    return state


def names_equal(left: NameBytes, left_rows: np.ndarray | None, right: NameBytes,
                right_rows: np.ndarray) -> np.ndarray:
    """Whether left[left_rows[i]] == right[right_rows[i]], byte for byte, for each i
    (`left_rows` None: every name of `left`, in order)."""
    every = slice(None) if left_rows is None else left_rows
    lengths = left.lengths[every]
    # `take`: the same gathers as `[]`, faster on a block of rows (the dictionary's lookups).
    equal = lengths == right.lengths.take(right_rows)
    equal &= left.first_words[every] == right.first_words.take(right_rows)
    candidates = np.flatnonzero(equal & (lengths > WORD_BYTES))
    left_index = candidates if left_rows is None else left_rows[candidates]
    right_index = right_rows[candidates]
    lengths = lengths[candidates]
    index = 1
    while len(candidates):  # only names still equal and longer than `index` words
        same = left.word(index, left_index) == right.word(index, right_index)
        equal[candidates[~same]] = False
        index += 1
        going_on = same & (lengths > WORD_BYTES * index)
        candidates, left_index = candidates[going_on], left_index[going_on]
        right_index, lengths = right_index[going_on], lengths[going_on]
    return equal


def _masked_words(data: np.ndarray, positions: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The words at byte `positions` of padded `data`, keeping `remaining` bytes (at most 8)."""
    words = np.ndarray(shape=(len(data) - WORD_BYTES + 1,), dtype="<u8", buffer=data,
                       strides=(1,))  # unaligned: one word starting at every byte
    kept_bits = (np.minimum(remaining, WORD_BYTES) * 8).astype(np.uint64)
    # NumPy shifts by 64 to 0, which is the mask of an empty name.
    return words[positions] & (_ALL_BITS >> (_U64(64) - kept_bits))


def _finalise(state: np.ndarray) -> None:
    """MurmurHash3's fmix64, in place: every input bit affects every output bit."""
    state ^= state >> _U64(33)
    state *= _FMIX_1
    state ^= state >> _U64(33)
    state *= _FMIX_2
    state ^= state >> _U64(33)
