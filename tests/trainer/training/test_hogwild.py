"""Hogwild workers: threads per worker, and an allocator that keeps freed memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tessera.training.hogwild import threads_per_worker

# Where glibc puts a 24 MiB tensor and whether it keeps the memory once the tensor is freed,
# in MiB, after `keep_freed_memory` (in a fresh process, so the test's own is unchanged).
HEAP_OF_A_FREED_TENSOR = """
import ctypes, torch
from tessera.training.hogwild import keep_freed_memory
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
print((during.hblkhd - before.hblkhd) >> 20, (during.arena - before.arena) >> 20,
      (after.arena - before.arena) >> 20)
"""


def test_workers_share_the_cores_without_oversubscribing() -> None:
    cores = os.cpu_count() or 1
    assert threads_per_worker(1) == cores
    assert threads_per_worker(cores) == 1
    assert threads_per_worker(4 * cores) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_freed_batch_tensor_stays_in_the_heap_for_the_next_batch() -> None:
    result = subprocess.run([sys.executable, "-c", HEAP_OF_A_FREED_TENSOR],
                            capture_output=True, text=True, check=True)
    mapped, heap_with_tensor, heap_after_free = map(int, result.stdout.split())
    # By default glibc would map the tensor's own pages and unmap them when it is freed.
    assert mapped == 0
    assert heap_with_tensor >= 24 and heap_after_free >= 24


# A parent that starts a pool of two workers, prints their pids and waits to be killed.
PARENT_OF_A_POOL = """
import time
from tessera.training.hogwild import HogwildPool
def echo(shared, task):
    return task
if __name__ == "__main__":
    pool = HogwildPool(2, echo, None)
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


def test_workers_die_when_their_parent_is_killed(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT_OF_A_POOL)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
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
