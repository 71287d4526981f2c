"""Bucket orders: each visits the grid once, and keeps the locality it promises."""

from __future__ import annotations

import random
import typing
from collections import Counter
from itertools import pairwise

import pytest
import torch

from tessera.config.schema import BucketOrderName
from tessera.training.bucket_order import BUCKET_ORDERS, is_initialization_ordered
from tessera.vocabulary import Bucket, all_buckets

LAYOUTS = [(1, 1), (1, 4), (4, 1), (4, 4), (3, 3), (2, 5), (5, 2)]
SEEDS = range(20)


def test_registry_names_match_the_config_schema() -> None:
    assert set(BUCKET_ORDERS) == set(typing.get_args(BucketOrderName))


@pytest.mark.parametrize("name", sorted(BUCKET_ORDERS))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_bucket_visited_exactly_once(name: str, layout: tuple[int, int]) -> None:
    for seed in SEEDS:
        order = BUCKET_ORDERS[name](*layout, random.Random(seed))
        assert Counter(order) == Counter(all_buckets(*layout))


@pytest.mark.parametrize("name", sorted(BUCKET_ORDERS))
def test_reproducible_from_either_kind_of_generator(name: str) -> None:
    order = BUCKET_ORDERS[name]
    assert order(4, 4, random.Random(7)) == order(4, 4, random.Random(7))
    assert (order(4, 4, torch.Generator().manual_seed(7))
            == order(4, 4, torch.Generator().manual_seed(7)))
    distinct = {tuple(order(4, 4, random.Random(seed))) for seed in SEEDS}
    assert len(distinct) > 1  # the generator does drive the order


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inside_out_grows_layer_by_layer(layout: tuple[int, int]) -> None:
    for seed in SEEDS:
        layers = [max(b.lhs, b.rhs) for b in BUCKET_ORDERS["inside_out"](*layout,
                                                                          random.Random(seed))]
        assert layers == sorted(layers)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_outside_in_shrinks_layer_by_layer(layout: tuple[int, int]) -> None:
    for seed in SEEDS:
        layers = [max(b.lhs, b.rhs) for b in BUCKET_ORDERS["outside_in"](*layout,
                                                                          random.Random(seed))]
        assert layers == sorted(layers, reverse=True)


@pytest.mark.parametrize("name", ["inside_out", "outside_in"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layered_orders_keep_the_initialization_property(name: str,
                                                         layout: tuple[int, int]) -> None:
    for seed in SEEDS:
        assert is_initialization_ordered(BUCKET_ORDERS[name](*layout, random.Random(seed)))


def test_layers_are_shuffled_within() -> None:
    # Layer 2 of a 3x3 grid has five buckets; the diagonal one may never come first in it.
    third_layers = {tuple(BUCKET_ORDERS["inside_out"](3, 3, random.Random(seed))[4:])
                    for seed in range(50)}
    assert len(third_layers) > 5
    assert all(layer[0] != Bucket(2, 2) for layer in third_layers)


def test_initialization_check_compares_sides_separately() -> None:
    assert is_initialization_ordered([Bucket(0, 0), Bucket(0, 1), Bucket(1, 1), Bucket(1, 0)])
    assert not is_initialization_ordered([Bucket(0, 0), Bucket(1, 1)])
    # Same partition numbers, but lhs 1 and rhs 0 were never touched on their own side.
    assert not is_initialization_ordered([Bucket(0, 1), Bucket(1, 0)])
    assert is_initialization_ordered([Bucket(2, 3)])
    assert is_initialization_ordered([])


def test_random_order_breaks_the_initialization_property_sometimes() -> None:
    # Guards the check above against being vacuous on real orders.
    results = {is_initialization_ordered(BUCKET_ORDERS["random"](4, 4, random.Random(seed)))
               for seed in SEEDS}
    assert results == {True, False}


@pytest.mark.parametrize("layout", [(4, 4), (3, 3), (2, 5)])
def test_affinity_moves_to_the_most_similar_bucket(layout: tuple[int, int]) -> None:
    for seed in SEEDS:
        order = BUCKET_ORDERS["affinity"](*layout, random.Random(seed))
        for position in range(1, len(order)):
            last, chosen, remaining = order[position - 1], order[position], order[position:]
            if last.transposed() in remaining and last.transposed() != last:
                assert chosen == last.transposed()
            elif any(b.lhs == last.lhs or b.rhs == last.rhs for b in remaining):
                assert chosen.lhs == last.lhs or chosen.rhs == last.rhs


def test_affinity_reuses_far_more_partitions_than_random() -> None:
    def shared_steps(order: list[Bucket]) -> int:
        return sum(bool({a.lhs, a.rhs} & {b.lhs, b.rhs}) for a, b in pairwise(order))

    affinity = [shared_steps(BUCKET_ORDERS["affinity"](4, 4, random.Random(s))) for s in SEEDS]
    shuffled = [shared_steps(BUCKET_ORDERS["random"](4, 4, random.Random(s))) for s in SEEDS]
    assert min(affinity) >= 14  # at most one jump among the 15 steps of a 4x4 walk
    assert sum(affinity) > sum(shuffled) + 2 * len(SEEDS)
