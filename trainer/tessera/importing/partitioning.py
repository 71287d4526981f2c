"""Which partition each entity of a type goes to, and its offset within that partition.

Two ways, both computed from a stable hash of each name so that the result does not depend on
the order in which names appeared in the input:

- random: names are put in hash order, shuffled with a seeded generator and cut into
  `num_partitions` contiguous runs whose sizes differ by at most one (balanced partitions,
  reproducible with the same seed);
- hash: a name's partition is its hash modulo `num_partitions` and its offset its rank by hash
  within the partition, so a name's place is stable across imports of different files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PARTITIONINGS = ("random", "hash")


@dataclass(frozen=True)
class Placement:
    """Entities (indices 0..n-1) laid out in partitions."""

    order: np.ndarray  # entity indices sorted by (partition, offset)
    boundaries: np.ndarray  # partition p holds order[boundaries[p]:boundaries[p + 1]]

    @property
    def counts(self) -> list[int]:
        return np.diff(self.boundaries).tolist()

    def members(self, part: int) -> np.ndarray:
        """The entities of a partition, by offset."""
        return self.order[self.boundaries[part]:self.boundaries[part + 1]]

    def partitions_and_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """The partition and the offset of each entity (int64 arrays indexed by entity)."""
        counts = np.diff(self.boundaries)
        partitions = np.empty(len(self.order), dtype=np.int64)
        offsets = np.empty(len(self.order), dtype=np.int64)
        partitions[self.order] = np.repeat(np.arange(len(counts)), counts)
        offsets[self.order] = np.arange(len(self.order)) - np.repeat(self.boundaries[:-1],
                                                                     counts)
        return partitions, offsets


def place_entities(stable_hashes: np.ndarray, num_partitions: int, method: str,
                   seed: int | Sequence[int] = 0) -> Placement:
    """Lay out entities whose names have these stable hashes (uint64) in partitions."""
    if method == "random":
        return _random_placement(stable_hashes, num_partitions, seed)
    if method == "hash":
        return _hash_placement(stable_hashes, num_partitions)
    raise ValueError(f"unknown partitioning {method!r}; choose one of {PARTITIONINGS}")


def _random_placement(stable_hashes: np.ndarray, num_partitions: int,
                      seed: int | Sequence[int]) -> Placement:
    count = len(stable_hashes)
    canonical = np.argsort(stable_hashes, kind="stable")
    shuffled = canonical[np.random.default_rng(seed).permutation(count)]
    boundaries = np.arange(num_partitions + 1) * count // num_partitions
    return Placement(shuffled, boundaries)


def _hash_placement(stable_hashes: np.ndarray, num_partitions: int) -> Placement:
    partitions = stable_hashes % np.uint64(num_partitions)
    order = np.lexsort((stable_hashes, partitions))
    counts = np.bincount(partitions.astype(np.int64), minlength=num_partitions)
    return Placement(order, np.concatenate([[0], np.cumsum(counts)]))
