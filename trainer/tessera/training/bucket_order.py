"""The orders in which the buckets of one pass are trained (`bucket_order`).

Every order visits each bucket of the lhs x rhs partition grid exactly once. Apart from
`random`, the orders try to make successive buckets share a partition, so that it stays in
memory instead of being swapped out. The layered orders (`inside_out`, `outside_in`) also keep
the initialization property that distributed training relies on: every bucket after the first
touches a partition already touched by an earlier bucket, so a partition is always trained
next to one that already holds trained embeddings.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import torch

from tessera.config.schema import BucketOrderName
from tessera.vocabulary import Bucket, all_buckets

RandomSource = random.Random | torch.Generator
BucketOrder = Callable[[int, int, RandomSource], list[Bucket]]


def _permutation(size: int, generator: RandomSource) -> list[int]:
    """A uniformly random permutation of range(size) drawn from either kind of generator."""
    if isinstance(generator, torch.Generator):
        return torch.randperm(size, generator=generator).tolist()
    permutation = list(range(size))
    generator.shuffle(permutation)
    return permutation


def random_order(num_lhs_partitions: int, num_rhs_partitions: int,
                 generator: RandomSource) -> list[Bucket]:
    """All buckets in a uniformly random order."""
    buckets = all_buckets(num_lhs_partitions, num_rhs_partitions)
    return [buckets[i] for i in _permutation(len(buckets), generator)]


def affinity_order(num_lhs_partitions: int, num_rhs_partitions: int,
                   generator: RandomSource) -> list[Bucket]:
    """Start anywhere, then always move to the remaining bucket most similar to the last one.

    Similarity ranks, in this order: being the transpose of the last bucket (both partitions
    reused, which helps when both sides have the same entity type), sharing a partition on the
    same side (reused whatever the entity types), sharing one on the other side. Ties go to a
    random priority drawn once, so the walk is random but reproducible from the generator.
    """
    candidates = random_order(num_lhs_partitions, num_rhs_partitions, generator)
    lhs = np.array([bucket.lhs for bucket in candidates])
    rhs = np.array([bucket.rhs for bucket in candidates])
    remaining = np.ones(len(candidates), dtype=bool)
    current = 0
    order = []
    for _ in range(len(candidates)):
        order.append(candidates[current])
        remaining[current] = False
        last_lhs, last_rhs = lhs[current], rhs[current]
        same_side = (lhs == last_lhs).astype(int) + (rhs == last_rhs)
        other_side = (lhs == last_rhs).astype(int) + (rhs == last_lhs)
        transpose = (lhs == last_rhs) & (rhs == last_lhs)
        # Any bucket other than the last and its transpose has same_side <= 1 and
        # other_side <= 1, so these weights rank candidates lexicographically.
        score = 9 * transpose + 3 * same_side + other_side
        score = np.where(remaining, score, -1)
        current = int(np.argmax(score))  # first maximum in the random priority order
    return order


def _anchored_order(buckets: Sequence[Bucket], touched_lhs: set[int], touched_rhs: set[int],
                    generator: RandomSource) -> list[Bucket]:
    """A random order of `buckets` in which each touches a partition touched before it.

    `touched_lhs` and `touched_rhs` hold what earlier buckets touched and are updated in place.
    The first bucket of all (nothing touched yet) is free; after that, the next bucket is the
    first one, in a random priority order, that is anchored to what was already touched.
    """
    pending = [buckets[i] for i in _permutation(len(buckets), generator)]
    order = []
    while pending:
        position = next((i for i, bucket in enumerate(pending)
                         if bucket.lhs in touched_lhs or bucket.rhs in touched_rhs), 0)
        bucket = pending.pop(position)
        touched_lhs.add(bucket.lhs)
        touched_rhs.add(bucket.rhs)
        order.append(bucket)
    return order


def _layers(num_lhs_partitions: int, num_rhs_partitions: int) -> list[list[Bucket]]:
    """Layer k holds the buckets whose larger partition index is k (an L-shaped band)."""
    layers: list[list[Bucket]] = [[] for _ in range(max(num_lhs_partitions, num_rhs_partitions))]
    for bucket in all_buckets(num_lhs_partitions, num_rhs_partitions):
        layers[max(bucket.lhs, bucket.rhs)].append(bucket)
    return layers


def _layered_order(layers: list[list[Bucket]], generator: RandomSource) -> list[Bucket]:
    touched_lhs: set[int] = set()
    touched_rhs: set[int] = set()
    return [bucket for layer in layers
            for bucket in _anchored_order(layer, touched_lhs, touched_rhs, generator)]


def inside_out_order(num_lhs_partitions: int, num_rhs_partitions: int,
                     generator: RandomSource) -> list[Bucket]:
    """Layers from the corner (0, 0) outwards, each in a random but anchored order."""
    return _layered_order(_layers(num_lhs_partitions, num_rhs_partitions), generator)


def outside_in_order(num_lhs_partitions: int, num_rhs_partitions: int,
                     generator: RandomSource) -> list[Bucket]:
    """Layers from the outermost band inwards, each in a random but anchored order."""
    return _layered_order(_layers(num_lhs_partitions, num_rhs_partitions)[::-1], generator)


BUCKET_ORDERS: dict[BucketOrderName, BucketOrder] = {
    "random": random_order,
    "affinity": affinity_order,
    "inside_out": inside_out_order,
    "outside_in": outside_in_order,
}


def is_initialization_ordered(order: Sequence[Bucket]) -> bool:
    """Whether every bucket after the first shares a partition, on the same side, with an
    earlier one.

    Comparing sides separately is the strict reading: it stays correct when the left and right
    entity types differ, and implies the property when they are the same type.
    """
    touched_lhs: set[int] = set()
    touched_rhs: set[int] = set()
    for position, bucket in enumerate(order):
        if position > 0 and bucket.lhs not in touched_lhs and bucket.rhs not in touched_rhs:
            return False
        touched_lhs.add(bucket.lhs)
        touched_rhs.add(bucket.rhs)
    return True
