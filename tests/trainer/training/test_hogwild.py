"""Hogwild workers: process (forked or spawned) and thread pools, intra-op threads, an
allocator that keeps freed memory."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest
import torch

from tessera import kernels
from tessera.config import ConfigSchema, parse_config
from tessera.errors import ConfigError
from tessera.model import EmbeddingModel
from tessera.training.hogwild import HogwildPool, HogwildThreads, make_pool, threads_per_worker
from tessera.training.libc import libc_function
from tessera.training.optimizers import make_model_optimizer
from tessera.training.worker import ModelState

# Where glibc puts a 24 MiB tensor and whether it keeps the memory once the tensor is freed,
# in MiB (mapped on its own, allocated from the heap, given back to the kernel once freed),
# after `keep_freed_memory` (in a fresh process, so the test's own is unchanged), and how
# much `release_freed_memory` then hands back.
HEAP_OF_A_FREED_TENSOR = """
import ctypes, resource, torch
from tessera.training.allocator import keep_freed_memory, release_freed_memory
FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
          "fordblks", "keepcost")
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
assert keep_freed_memory()
before = libc.mallinfo2()
tensor = torch.empty(6 * 2**20).fill_(1.0)
during = libc.mallinfo2()
del tensor
after = libc.mallinfo2()
def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()
kept = resident_bytes()
assert release_freed_memory()
print((during.hblkhd - before.hblkhd) >> 20, (during.uordblks - before.uordblks) >> 20,
      (during.arena - after.arena) >> 20, (kept - resident_bytes()) >> 20)
"""


def test_workers_share_the_cores_without_oversubscribing() -> None:
    cores = os.cpu_count() or 1
    assert threads_per_worker(1) == cores
    assert threads_per_worker(cores) == 1
    assert threads_per_worker(4 * cores) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_the_c_library_functions_are_found_once_and_unknown_ones_are_none() -> None:
    assert all(libc_function(name) is not None for name in ("mallopt", "malloc_trim", "prctl"))
    assert libc_function("prctl") is libc_function("prctl")
    assert libc_function("no_such_function_in_libc") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_freed_batch_tensor_stays_in_the_heap_until_the_bucket_ends() -> None:
    result = subprocess.run([sys.executable, "-c", HEAP_OF_A_FREED_TENSOR],
                            capture_output=True, text=True, check=True)
    mapped, in_heap, trimmed, released = map(int, result.stdout.split())
    # By default glibc would map the tensor's own pages and unmap them when it is freed.
    assert mapped == 0 and in_heap >= 24
    assert trimmed == 0
    assert released >= 24


# How many heaps glibc's allocator has after two threads each allocated 8 MB, as workers do
# (after `keep_freed_memory`), run as the `tessera` command runs a subcommand ("command") or
# in a plain process.
HEAPS_AFTER_TWO_THREADS = """
import ctypes, sys, tempfile, threading
import numpy as np
from tessera.training.allocator import keep_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
def count_heaps(argv=None):
    keep_freed_memory()
    blocks, both_allocated = [], threading.Barrier(2)
    def allocate():  # both threads alive at once: neither takes over the other's heap
        blocks.append(np.ones(2**20))
        both_allocated.wait()
    threads = [threading.Thread(target=allocate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with tempfile.NamedTemporaryFile() as report:
        stream = ctypes.c_void_p(libc.fopen(report.name.encode(), b"w"))
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(open(report.name).read().count("<heap nr="), flush=True)
    return 0
if sys.argv[1] == "command":
    import tessera.cli as cli
    cli.main = count_heaps
    cli.run()
count_heaps()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize(("started_as", "heaps"), [("command", 1), ("plain", 3)])
def test_the_commands_threads_allocate_from_one_heap(started_as: str, heaps: int) -> None:
    """So that trimming between buckets hands back all their free memory: of a thread's own
    heap glibc keeps the free top (over a many-bucket run, a Hogwild thread's heap would stay
    as large as it ever grew)."""
    result = subprocess.run([sys.executable, "-c", HEAPS_AFTER_TWO_THREADS, started_as],
                            capture_output=True, text=True, check=True, timeout=60)
    assert int(result.stdout) == heaps


# A parent that starts a pool of two workers, prints their pids and waits to be killed.
PARENT_OF_A_POOL = """
import sys, time
from tessera.training.hogwild import HogwildPool
def echo(shared, task):
    return task
if __name__ == "__main__":
    pool = HogwildPool(2, echo, None, method=sys.argv[1])
    assert pool.run([1, 2]) == [1, 2]
    print(*[process.pid for process in pool.processes], flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_die_when_their_parent_is_killed(tmp_path, method: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT_OF_A_POOL)
    parent = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers)
    finally:
        parent.kill()
        parent.wait()


def _grad_of_first_parameter(state, value: float) -> float:
    """Give this thread's replica a gradient, wait for the other thread to do the same,
    and return what this replica's gradient still is."""
    param = next(state.model.parameters())
    param.grad = torch.full_like(param, value)
    time.sleep(0.2)
    return float(param.grad[0])


def _add_to_row(table: torch.Tensor, row: int) -> int:
    table[row] += row
    return row


def _fail(shared, task) -> None:
    raise ValueError(f"task {task} failed")


def test_worker_threads_share_parameter_values_but_not_gradients() -> None:
    config = parse_config({"entities": {"node": {"num_partitions": 1}},
                           "relations": [{"name": "r", "lhs": "node", "rhs": "node",
                                          "operator": "translation"}],
                           "dimension": 4, "entity_path": "e", "edge_paths": ["e"],
                           "checkpoint_path": "c"})
    model = EmbeddingModel(config, num_relations=1)
    state = ModelState(model, make_model_optimizer(model, config))
    with HogwildThreads(2, _grad_of_first_parameter, state) as pool:
        assert pool.run([1.0, 2.0]) == [1.0, 2.0]  # each thread kept its own gradient
        replica = pool.shared[1]
    shared_param, replica_param = next(model.parameters()), next(replica.model.parameters())
    assert replica_param is not shared_param
    replica_param.data.add_(1.0)  # a Hogwild update through the replica...
    assert torch.equal(shared_param.data, replica_param.data)  # ...is seen by everyone
    assert replica.optimizer.sums[0] is state.optimizer.sums[0]


def test_a_failing_thread_task_raises_in_the_caller_and_restores_intra_op_threads() -> None:
    threads = torch.get_num_threads()
    with HogwildThreads(2, _fail, None) as pool, pytest.raises(ValueError, match="task 0"):
        pool.run([0, 1])
    assert torch.get_num_threads() == threads


def setup_config(**overrides: object) -> ConfigSchema:
    return parse_config({"entities": {"node": {"num_partitions": 1}},
                         "relations": [{"name": "r", "lhs": "node", "rhs": "node",
                                        "operator": "translation"}],
                         "comparator": "dot", "dimension": 4, "entity_path": "e",
                         "edge_paths": ["e"], "checkpoint_path": "c", **overrides})


def test_workers_are_threads_where_the_compiled_loop_trains_and_processes_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_HOGWILD", raising=False)
    kinds = {HogwildThreads: [setup_config(), setup_config(relations=[
                 {"name": "r", "lhs": "node", "rhs": "node", "operator": "none"}])],
             HogwildPool: [setup_config(comparator="cos"), setup_config(loss_fn="softmax"),
                           setup_config(dynamic_relations=True)]}
    for kind, configs in kinds.items():
        for config in configs:
            with make_pool(config, 2, _fail, None) as pool:
                assert isinstance(pool, kind), config.to_dict()
    with kernels.torch_only(), make_pool(setup_config(), 2, _fail, None) as pool:
        assert isinstance(pool, HogwildPool)  # no compiled loop without the kernels


def test_the_environment_chooses_the_pool_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_HOGWILD", "fibers")
    with pytest.raises(ConfigError, match="TESSERA_HOGWILD"):
        make_pool(setup_config(), 2, _fail, None)
    monkeypatch.setenv("TESSERA_HOGWILD", "threads")
    with make_pool(setup_config(comparator="cos"), 2, _fail, None) as pool:
        assert isinstance(pool, HogwildThreads)
    monkeypatch.setenv("TESSERA_HOGWILD", "processes")
    with make_pool(setup_config(), 2, _fail, None) as pool:
        assert isinstance(pool, HogwildPool)


# Prints the start method a pool would use with no other thread, then with one more.
START_METHODS = """
import threading
from tessera.training.hogwild import start_method
print(start_method())
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
print(start_method())
stop.set()
thread.join()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux forks")
def test_workers_are_forked_only_while_no_other_thread_runs() -> None:
    result = subprocess.run([sys.executable, "-c", START_METHODS], capture_output=True,
                            text=True, check=True)
    assert result.stdout.split() == ["fork", "spawn"]


def test_forked_workers_inherit_the_shared_state_and_write_through_it() -> None:
    table = torch.zeros(4).share_memory_()
    with HogwildPool(2, _add_to_row, table, method="fork") as pool:
        assert pool.run([1, 3]) == [1, 3]
    assert table.tolist() == [0.0, 1.0, 0.0, 3.0]


def _shared_memory_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(maxsplit=5)[5].strip() for line in maps if "/dev/shm/torch_" in line}


def _row_count(shared: object, task: dict[str, torch.Tensor]) -> int:
    return len(task["table"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/maps")
def test_a_worker_lets_go_of_its_task_before_reporting_it_done() -> None:
    # Otherwise the previous bucket's partitions stay mapped in the workers while the trainer
    # loads the next ones: two partitions more in memory at every swap. (A forked worker
    # also inherits whatever shared memory this test process maps already, from earlier
    # tests: that is not the task's.)
    gc.collect()
    inherited = _shared_memory_files(os.getpid())
    with HogwildPool(2, _row_count, None, method="fork") as pool:
        assert pool.run([{"table": torch.zeros(2**20).share_memory_()},
                         {"table": torch.zeros(2**18).share_memory_()}]) == [2**20, 2**18]
        for process in pool.processes:
            assert _shared_memory_files(process.pid) - inherited == set()
