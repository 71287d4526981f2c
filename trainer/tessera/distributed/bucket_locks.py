"""Which trainer may train which bucket of a chunk position: the lock server's rules.

No networking here, only the decisions, so that they can be tested directly:

- a partition (entity type, partition number) is held by at most one trainer: from the moment
  a bucket needing it is granted until the trainer says the partition is back where the
  others can fetch it (a trainer keeps what its next bucket reuses, and gives the rest back);
- among the buckets a trainer may take, the one sharing the most partitions with what it
  already holds wins (fewer partitions move), ties going to the schedule's bucket order;
- on a fresh start (with `distributed_tree_init_order`, PBG's default), a bucket is granted
  only if one of its partitions has been trained before (the first bucket excepted), so that
  each new partition is trained next to one that already holds trained embeddings (PBG's
  initialisation order);
- a trainer that stops answering loses its bucket (to be trained again) and its partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..vocabulary import Bucket, PartitionKey

KeysOf = Callable[[Bucket], frozenset[PartitionKey]]


@dataclass(frozen=True)
class Grant:
    """What a trainer asking for a bucket gets: a bucket, or none with the reason."""

    bucket: Bucket | None
    complete: bool = False  # no bucket because every bucket of the position is done

    @property
    def must_wait(self) -> bool:
        return self.bucket is None and not self.complete


class BucketLocks:
    """The buckets of the current chunk position and the partitions trainers hold."""

    def __init__(self, keys_of: KeysOf, fresh_start: bool) -> None:
        self.keys_of = keys_of
        # Partitions trained at least once; None when every partition already was (resume,
        # init_path), which lifts the initialisation rule.
        self.initialized: set[PartitionKey] | None = set() if fresh_start else None
        self.order: list[Bucket] = []
        self.done: set[Bucket] = set()
        self.active: dict[int, Bucket] = {}  # trainer -> the bucket it trains
        self.held: dict[int, set[PartitionKey]] = {}  # trainer -> partitions it holds

    def start(self, order: Iterable[Bucket]) -> None:
        """Begin a chunk position whose buckets, in the schedule's order, are `order`."""
        if self.active:
            raise RuntimeError(f"buckets {sorted(self.active.values())} are still being trained")
        self.order = list(order)
        self.done = set()

    @property
    def complete(self) -> bool:
        return len(self.done) == len(self.order)

    def holder_of(self, key: PartitionKey) -> int | None:
        return next((trainer for trainer, keys in self.held.items() if key in keys), None)

    def acquire(self, trainer: int) -> Grant:
        """The next bucket for `trainer`, locking its partitions, if one can be had now."""
        if trainer in self.active:
            raise RuntimeError(f"trainer {trainer} asked for a bucket while training "
                               f"{self.active[trainer]}")
        if self.complete:
            return Grant(None, complete=True)
        mine = self.held.get(trainer, set())
        candidates = [b for b in self._free_buckets(trainer) if self._initialized(b)]
        if not candidates and not self.active and not any(self.held.values()):
            # Nobody can make a partition trainable for us: the rule cannot be met (for
            # instance, types that share no partition); train what is free.
            candidates = list(self._free_buckets(trainer))
        if not candidates:
            return Grant(None)
        bucket = max(candidates, key=lambda b: len(self.keys_of(b) & mine))  # first max wins
        self.active[trainer] = bucket
        self.held.setdefault(trainer, set()).update(self.keys_of(bucket))
        if self.initialized is not None:
            self.initialized.update(self.keys_of(bucket))
        return Grant(bucket)

    def finish(self, trainer: int, bucket: Bucket) -> None:
        """`trainer` has trained `bucket` (it still holds its partitions)."""
        if self.active.get(trainer) != bucket:
            raise RuntimeError(f"trainer {trainer} finished {bucket}, which it was not given")
        del self.active[trainer]
        self.done.add(bucket)

    def release(self, trainer: int, keys: Iterable[PartitionKey]) -> set[PartitionKey]:
        """`trainer` has given `keys` back; returns those it actually held."""
        held = self.held.get(trainer, set())
        needed = self.keys_of(self.active[trainer]) if trainer in self.active else frozenset()
        released = (set(keys) & held) - needed  # the active bucket's partitions stay locked
        held -= released
        return released

    def drop_trainer(self, trainer: int) -> tuple[Bucket | None, set[PartitionKey]]:
        """Forget a lost trainer: its bucket is to be trained again, its partitions are free.
        Returns what it had."""
        bucket = self.active.pop(trainer, None)
        return bucket, self.held.pop(trainer, set())

    def _free_buckets(self, trainer: int) -> Iterable[Bucket]:
        taken = set(self.active.values())
        others = set().union(*(keys for t, keys in self.held.items() if t != trainer))
        return (b for b in self.order if b not in self.done and b not in taken
                and not self.keys_of(b) & others)

    def _initialized(self, bucket: Bucket) -> bool:
        if not self.initialized:  # no rule, or nothing trained yet: any bucket may start
            return True
        return bool(self.keys_of(bucket) & self.initialized)
