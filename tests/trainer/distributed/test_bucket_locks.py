"""The lock server's bucket choice, without any networking: no partition is ever held by two
trainers, affinity, PBG's initialisation order, and a lost trainer's locks."""

from __future__ import annotations

import random

import pytest

from tessera.distributed.bucket_locks import BucketLocks
from tessera.vocabulary import Bucket, PartitionKey, all_buckets


def node_keys(bucket: Bucket) -> frozenset[PartitionKey]:
    """One entity type on both sides, as in a homogeneous graph."""
    return frozenset({("node", bucket.lhs), ("node", bucket.rhs)})


def user_item_keys(bucket: Bucket) -> frozenset[PartitionKey]:
    """Different entity types on the two sides: (u, 0) and (i, 0) are different partitions."""
    return frozenset({("user", bucket.lhs), ("item", bucket.rhs)})


def locks_for(num_partitions: int, fresh: bool = False, keys_of=node_keys) -> BucketLocks:
    locks = BucketLocks(keys_of, fresh_start=fresh)
    locks.start(all_buckets(num_partitions, num_partitions))
    return locks


def assert_no_partition_held_twice(locks: BucketLocks) -> None:
    seen: dict[PartitionKey, int] = {}
    for trainer, keys in locks.held.items():
        for key in keys:
            assert key not in seen, f"{key} held by trainers {seen[key]} and {trainer}"
            seen[key] = trainer


@pytest.mark.parametrize("keys_of", [node_keys, user_item_keys])
@pytest.mark.parametrize("seed", range(5))
def test_random_interleavings_never_share_a_partition_and_train_every_bucket_once(
        seed: int, keys_of) -> None:
    rng = random.Random(seed)
    locks = locks_for(4, fresh=True, keys_of=keys_of)
    trained: list[Bucket] = []
    for _ in range(10_000):
        if locks.complete:
            break
        trainer = rng.randrange(3)
        if trainer in locks.active:  # it finishes its bucket and gives some partitions back
            bucket = locks.active[trainer]
            locks.finish(trainer, bucket)
            trained.append(bucket)
            held = sorted(locks.held[trainer])
            locks.release(trainer, rng.sample(held, rng.randrange(len(held) + 1)))
        else:
            grant = locks.acquire(trainer)
            if grant.must_wait:  # as a trainer does: give everything back, ask again later
                locks.release(trainer, list(locks.held.get(trainer, ())))
        assert_no_partition_held_twice(locks)
    assert locks.complete
    assert sorted(trained) == all_buckets(4, 4)
    assert locks.acquire(0).complete


def test_a_bucket_sharing_the_trainers_partitions_is_preferred() -> None:
    locks = locks_for(4)
    first = locks.acquire(0).bucket
    assert first == Bucket(0, 0)  # nothing held yet: the schedule's first bucket
    locks.finish(0, first)
    # Among the free buckets, (0, 1) and (1, 0) share partition 0; the order breaks the tie.
    assert locks.acquire(0).bucket == Bucket(0, 1)
    locks.finish(0, Bucket(0, 1))
    assert locks.acquire(0).bucket == Bucket(1, 0)  # shares both partitions 0 and 1
    locks.finish(0, Bucket(1, 0))
    locks.release(0, [("node", 0)])
    assert locks.acquire(0).bucket == Bucket(1, 1)  # shares partition 1, the only one held


def test_partitions_locked_by_a_trainer_are_off_limits_to_the_others() -> None:
    locks = locks_for(2)
    assert locks.acquire(0).bucket == Bucket(0, 0)
    # Every other bucket of a 2x2 grid touches partition 0 or needs partition 1 with it...
    assert locks.acquire(1).bucket == Bucket(1, 1)
    # ... and now both partitions are taken.
    grant = locks.acquire(2)
    assert grant.bucket is None and grant.must_wait
    locks.finish(0, Bucket(0, 0))
    assert locks.acquire(2).must_wait  # trainer 0 still holds partition 0
    assert locks.release(0, [("node", 0)]) == {("node", 0)}
    assert locks.acquire(2).must_wait  # the remaining buckets also need partition 1
    locks.finish(1, Bucket(1, 1))
    locks.release(1, [("node", 1)])
    assert locks.acquire(2).bucket == Bucket(0, 1)


def test_the_partitions_of_the_bucket_being_trained_cannot_be_released() -> None:
    locks = locks_for(2)
    locks.acquire(0)
    assert locks.release(0, [("node", 0)]) == set()
    assert locks.holder_of(("node", 0)) == 0


def test_a_fresh_start_grows_from_trained_partitions() -> None:
    locks = locks_for(3, fresh=True)
    assert locks.acquire(0).bucket == Bucket(0, 0)
    # Trainer 1 could lock (1, 1), (1, 2), (2, 1) or (2, 2), but none of them touches a
    # trained partition: it must wait although partitions 1 and 2 are free.
    assert locks.acquire(1).must_wait
    locks.finish(0, Bucket(0, 0))
    assert locks.acquire(0).bucket == Bucket(0, 1)
    locks.finish(0, Bucket(0, 1))
    locks.release(0, [("node", 0)])
    assert locks.acquire(1).bucket == Bucket(0, 2)  # partition 0 is trained and free now
    # Without the rule (a resumed run), trainer 1 would have started at once.
    resumed = locks_for(3)
    resumed.acquire(0)
    assert resumed.acquire(1).bucket == Bucket(1, 1)


def test_with_disjoint_sides_the_rule_gives_way_rather_than_deadlock() -> None:
    # user x item: a bucket (u, i) shares nothing with (u', i') for u != u', i != i'.
    locks = BucketLocks(user_item_keys, fresh_start=True)
    locks.start([Bucket(0, 0), Bucket(1, 1)])
    locks.acquire(0)
    locks.finish(0, Bucket(0, 0))
    locks.release(0, [("user", 0), ("item", 0)])
    # (1, 1) touches no trained partition, but nobody holds or trains anything.
    assert locks.acquire(0).bucket == Bucket(1, 1)


def test_a_lost_trainer_frees_its_partitions_and_its_bucket_is_trained_again() -> None:
    locks = locks_for(2)
    assert locks.acquire(0).bucket == Bucket(0, 0)
    assert locks.acquire(1).bucket == Bucket(1, 1)
    bucket, keys = locks.drop_trainer(1)
    assert bucket == Bucket(1, 1) and keys == {("node", 1)}
    assert locks.holder_of(("node", 1)) is None
    locks.finish(0, Bucket(0, 0))
    assert locks.acquire(0).bucket == Bucket(0, 1)
    for bucket in (Bucket(0, 1), Bucket(1, 0), Bucket(1, 1)):
        locks.finish(0, bucket)
        if not locks.complete:
            locks.acquire(0)
    assert locks.complete and locks.done == set(all_buckets(2, 2))


def test_a_new_position_cannot_start_while_a_bucket_is_being_trained() -> None:
    locks = locks_for(2)
    locks.acquire(0)
    with pytest.raises(RuntimeError, match="still being trained"):
        locks.start(all_buckets(2, 2))
