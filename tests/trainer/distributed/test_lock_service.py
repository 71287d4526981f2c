"""The lock server's service object, called directly (no networking): positions, the
checkpoint barrier, job-wide progress, early stopping, aborts; and peer liveness."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from tessera.config import parse_config
from tessera.data.graph_data import GraphData
from tessera.distributed.liveness import Liveness
from tessera.distributed.lock_server import LockService
from tessera.distributed.world import WorldLayout
from tessera.errors import BadInputError, TransientError
from tessera.progress import Reporter
from tessera.training.schedule import TrainingSchedule
from tessera.vocabulary import Bucket, ChunkPosition


def make_service(num_epochs: int = 2, early_stopping: bool = False,
                 committed_version: int = 0, **overrides: Any) -> tuple[LockService, io.StringIO]:
    config = parse_config({**overrides,
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node"}],
        "dimension": 4, "num_epochs": num_epochs, "early_stopping": early_stopping,
        "eval_fraction": 0.1, "entity_path": "unused", "edge_paths": ["unused"],
        "checkpoint_path": "unused"})
    schedule = TrainingSchedule.from_config(config, num_edge_chunks=1)
    log = io.StringIO()
    service = LockService(config=config, data=GraphData(config), schedule=schedule,
                          committed_version=committed_version,
                          start=schedule.position_at(committed_version),
                          layout=WorldLayout(1, 2), reporter=Reporter("json", log),
                          liveness=Liveness(range(1, 4), timeout=10.0))
    return service, log


def record(bucket: Bucket, count: int, eval_loss: float = 1.0) -> dict[str, Any]:
    return {"lhs_partition": bucket.lhs, "rhs_partition": bucket.rhs,
            "stats": {"count": count, "metrics": {"loss": 2.0, "reg": 0.0}},
            "eval_stats_after": {"loss": eval_loss, "mrr": 0.5}}


def train_position(service: LockService, position: ChunkPosition, eval_loss: float = 1.0,
                   edges: int = 10) -> list[Bucket]:
    """Both trainers take turns until the position is complete; each then arrives."""
    trained = []
    while True:
        progressed = False
        for trainer in (0, 1):
            answer, bucket = service.acquire(trainer, position)
            if answer == "bucket":
                service.trained(trainer, bucket, record(bucket, edges, eval_loss))
                service.release(trainer, sorted(service.locks.held[trainer]))
                trained.append(bucket)
                progressed = True
        if not progressed:
            break
    return trained


def test_a_position_ends_at_the_barrier_and_the_commit_starts_the_next() -> None:
    service, log = make_service()
    first = ChunkPosition(0, 0, 0)
    assert service.hello(0) == {"committed_version": 0, "start": first}
    trained = train_position(service, first)
    assert sorted(trained) == [Bucket(0, 0), Bucket(0, 1), Bucket(1, 0), Bucket(1, 1)]
    assert service.acquire(1, first) == ("complete", None)
    service.arrive(0, first)
    assert not service.all_arrived(first)  # trainer 1 has not given its partitions back
    service.arrive(1, first)
    assert service.all_arrived(first)
    assert len(service.position_records(first)) == 4
    assert service.checkpoint_state(first) is None
    assert service.committed(first, version=1) is False
    assert service.checkpoint_state(first) == (1, False)
    second = ChunkPosition(1, 0, 0)
    assert service.acquire(0, second)[0] == "bucket"
    assert service.progress()["buckets_done"] == 4 and service.progress()["edges_done"] == 40
    events = [json.loads(line) for line in log.getvalue().splitlines()]
    locked = [e for e in events if e["event"] == "partitions locked"]
    assert len(locked) == 5 and {e["trainer"] for e in locked} == {0, 1}


def test_the_last_commit_finishes_the_job() -> None:
    service, _ = make_service(num_epochs=1)
    position = ChunkPosition(0, 0, 0)
    train_position(service, position)
    service.committed(position, version=1)
    assert service.finished
    assert service.acquire(0, position) == ("complete", None)
    assert service.heartbeat(1) == {"abort": None, "finished": True}


def test_a_resumed_job_starts_after_the_committed_position() -> None:
    service, _ = make_service(num_epochs=3, committed_version=2)
    assert service.hello(1)["start"] == ChunkPosition(2, 0, 0)
    assert service.locks.initialized is None  # trained partitions: no initialisation order


def test_early_stopping_uses_every_trainers_held_out_losses() -> None:
    service, log = make_service(num_epochs=5, early_stopping=True)
    stops = []
    for epoch, loss in enumerate([3.0, 2.0, 2.5]):
        position = ChunkPosition(epoch, 0, 0)
        train_position(service, position, eval_loss=loss)
        stops.append(service.committed(position, version=epoch + 1))
    assert stops == [False, False, True]
    assert service.finished
    assert "early stopping" in log.getvalue()


def test_an_abort_answers_every_later_call_with_its_message() -> None:
    service, _ = make_service()
    service.fail(2, "trainer-1 failed: disk full", 75)
    assert service.heartbeat(3)["abort"] == ("trainer-1 failed: disk full", 75)
    with pytest.raises(TransientError, match="disk full"):
        service.acquire(0, ChunkPosition(0, 0, 0))
    bad, _ = make_service()
    bad.fail(1, "partition-server-0 failed: bad file", 65)
    with pytest.raises(BadInputError, match="bad file"):
        bad.arrive(0, ChunkPosition(0, 0, 0))


def test_a_lost_trainers_partitions_are_released() -> None:
    service, log = make_service()
    position = ChunkPosition(0, 0, 0)
    assert service.acquire(1, position) == ("bucket", Bucket(0, 0))
    service.drop_trainer(1)
    assert service.acquire(0, position) == ("bucket", Bucket(0, 0))
    assert '"lost": true' in log.getvalue()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_peer_is_lost_after_the_timeout_and_departed_ones_never() -> None:
    clock = FakeClock()
    liveness = Liveness([1, 2, 3], timeout=5.0, clock=clock)
    clock.now += 60  # a slow rendezvous does not count as silence
    liveness.start()
    assert liveness.lost() == []
    clock.now += 3
    liveness.seen(1)
    liveness.left(3)
    clock.now += 3
    assert [rank for rank, _ in liveness.lost()] == [2]
    assert liveness.lost()[0][1] == pytest.approx(6.0)
    assert liveness.fail("lost 2", 75) and not liveness.fail("lost 1", 75)
    liveness.left(2)
    assert not liveness.everyone_gone()  # peer 1 has not heard of the abort yet
    clock.now += 0.5
    assert liveness.seen(1).message == "lost 2"
    liveness.left(1)  # as it does once it has the message
    assert liveness.everyone_gone() and liveness.everyone_left()


def test_after_an_abort_silent_peers_are_waited_for_at_most_the_timeout() -> None:
    clock = FakeClock()
    liveness = Liveness([1, 2], timeout=5.0, clock=clock)
    liveness.fail("lost 1", 75)
    liveness.left(1)
    clock.now += 4.9
    assert not liveness.everyone_gone()
    clock.now += 0.2
    assert liveness.everyone_gone()


@pytest.mark.parametrize("tree_order", [True, False])
def test_distributed_tree_init_order_decides_whether_a_fresh_bucket_waits(tree_order) -> None:
    """PBG's `distributed_tree_init_order`: on a fresh start, trainer 1 may not start on
    bucket (1, 1), none of whose partitions was trained yet, while trainer 0 holds partition
    0; without the rule it starts at once."""
    service, _ = make_service(distributed_tree_init_order=tree_order)
    first = ChunkPosition(0, 0, 0)
    assert service.acquire(0, first) == ("bucket", Bucket(0, 0))
    expected = ("wait", None) if tree_order else ("bucket", Bucket(1, 1))
    assert service.acquire(1, first) == expected
