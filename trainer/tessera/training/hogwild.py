"""Hogwild workers: processes (or threads) that train on disjoint edges against shared tables.

Workers are started once per run and receive one task per bucket; they update the tables
without locks, as Hogwild! prescribes: collisions are rare and harmless for sparse updates.

Threads are the default where the compiled loop trains the setup (`steps.choose_step`):
a worker then spends its time in one call per 32 batches that releases the GIL, and threads
need no shared memory, so handing over a bucket's edges and partitions costs nothing. In every
other setup the step's ~100 tensor operations per batch each take the GIL back, two threads
would spend about a fifth of their time waiting for it, and processes are the default. They
are forked when the trainer runs no other thread, so they start in milliseconds with the
runtime already loaded (its pages shared copy-on-write, not imported again) and no lock can be
left held by a thread the child does not have; otherwise they are spawned. Tables and model
live in shared memory, so handing a worker a partition costs a file descriptor, not a copy.
`TESSERA_HOGWILD=threads` or `processes` chooses either way.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Union

import torch
import torch.multiprocessing as mp

from ..config import ConfigSchema
from ..errors import ConfigError, TransientError
from ..stop_signals import raise_if_stopped
from .allocator import keep_freed_memory, release_freed_memory
from .libc import libc_function
from .steps import choose_step

# How often the parent checks that workers are still alive while waiting for results.
LIVENESS_POLL_SECONDS = 1.0


def threads_per_worker(num_workers: int) -> int:
    """Intra-op threads for each worker, so that workers together do not oversubscribe cores."""
    return max(1, (os.cpu_count() or 1) // num_workers)


PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies


def die_with_parent() -> bool:
    """Ask Linux to kill this worker when the process that started it dies; False elsewhere.

    A trainer killed with SIGKILL cannot stop its workers itself; without this they would
    keep training against tables nobody will ever save, holding memory and cores.
    """
    prctl = libc_function("prctl")
    return prctl is not None and prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0


Pool = Union["HogwildPool", "HogwildThreads"]


def workers_are_processes(config: ConfigSchema) -> bool:
    """Processes, unless the compiled loop trains this setup or `TESSERA_HOGWILD` says
    otherwise (module docstring)."""
    choice = os.environ.get("TESSERA_HOGWILD")
    if choice is None:
        return not choose_step(config, on_device=False).whole_loop
    if choice not in ("threads", "processes"):
        raise ConfigError("TESSERA_HOGWILD (environment)",
                          f"{choice!r} is not a kind of worker: use 'processes' or 'threads'")
    return choice == "processes"


def start_method() -> str:
    """'fork' when this process runs no other thread (and the platform forks), else 'spawn'.

    A forked child has only the thread that forked; a lock another thread held at that
    moment would stay held forever in the child, so with other threads alive we spawn.
    """
    if threading.active_count() == 1 and "fork" in mp.get_all_start_methods():
        return "fork"
    return "spawn"


def share_with_workers(tensor: torch.Tensor, config: ConfigSchema) -> torch.Tensor:
    """`tensor`, moved to shared memory when workers are processes (threads see it as is;
    moving it would copy it for nothing)."""
    return tensor.share_memory_() if workers_are_processes(config) else tensor


def empty_for_workers(config: ConfigSchema, *shape: int,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor where workers can update it, to be filled in place (from a
    file, by a random draw, by a gather): no private copy on the way, and none made to move
    it (`share_memory_` would copy what it moves)."""
    if not workers_are_processes(config):
        return torch.empty(shape, dtype=dtype)
    return empty_shared(*shape, dtype=dtype)


def empty_shared(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor in shared memory, allocated there (not moved: no copy)."""
    storage = torch.UntypedStorage._new_shared(math.prod(shape) * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def make_pool(config: ConfigSchema, num_workers: int, function: Callable[[Any, Any], Any],
              shared: Any) -> Pool:
    pool_class = HogwildPool if workers_are_processes(config) else HogwildThreads
    return pool_class(num_workers, function, shared)


class HogwildPool:
    """Runs `function(shared, task)` in N processes at once; `shared` is handed over once at
    start (inherited when forked, sent through shared memory when spawned)."""

    def __init__(self, num_workers: int, function: Callable[[Any, Any], Any], shared: Any,
                 method: str | None = None) -> None:
        context: Any = mp.get_context(method or start_method())  # stubs: no Process
        self.results: Any = context.Queue()
        self.task_queues = [context.SimpleQueue() for _ in range(num_workers)]
        self.processes = [
            context.Process(target=_worker_main, name=f"tessera-worker-{rank}", daemon=True,
                            args=(rank, threads_per_worker(num_workers), function, shared,
                                  task_queue, self.results))
            for rank, task_queue in enumerate(self.task_queues)]
        for process in self.processes:
            process.start()

    def __enter__(self) -> HogwildPool:
        return self

    def __exit__(self, error_type: object, *exc: object) -> None:
        if error_type is not None:  # stopped (Ctrl-C, SIGTERM, a failure): no task to finish
            for process in self.processes:
                process.kill()
        self.close()

    def run(self, tasks: Sequence[Any]) -> list[Any]:
        """Run one task per worker (at most as many tasks as workers) and return the results
        in task order; a worker's exception is raised here, a dead worker is a TransientError."""
        assert len(tasks) <= len(self.processes)
        for task_queue, task in zip(self.task_queues, tasks):
            task_queue.put(task)
        results: dict[int, Any] = {}
        while len(results) < len(tasks):
            try:
                rank, ok, value = self.results.get(timeout=LIVENESS_POLL_SECONDS)
            except queue.Empty:
                self._check_alive()
                continue
            if not ok:
                raise RuntimeError(f"Hogwild worker {rank} failed:\n{value}")
            results[rank] = value
        return [results[rank] for rank in range(len(tasks))]

    def _check_alive(self) -> None:
        raise_if_stopped()  # a worker that the same signal stopped is no failure of its own
        for rank, process in enumerate(self.processes):
            if not process.is_alive():
                raise TransientError(f"Hogwild worker {rank} died (exit code {process.exitcode}); "
                                     "the run can resume from the last checkpoint")

    def close(self) -> None:
        for task_queue, process in zip(self.task_queues, self.processes):
            if process.is_alive():
                task_queue.put(None)
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


def _worker_main(rank: int, num_threads: int, function: Callable[[Any, Any], Any], shared: Any,
                 tasks: Any, results: Any) -> None:
    die_with_parent()
    # Ctrl-C reaches the whole process group, SIGTERM may too: the parent stops the run (and
    # its workers) with one line; a worker stops without a word of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(num_threads)
    keep_freed_memory()
    while True:
        task = tasks.get()
        if task is None:
            return
        try:
            outcome = (rank, True, function(shared, task))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            outcome = (rank, False, traceback.format_exc())
        # Let go of the task before reporting: by the time the parent swaps in the next
        # bucket's partitions, no worker still maps the previous ones.
        del task
        release_freed_memory()
        results.put(outcome)


class HogwildThreads:
    """Runs `function(shared, task)` in N threads of this process at once.

    Threads share one copy of the Python and torch runtimes and take tasks without copies;
    torch operations and the compiled kernels release the GIL, but re-taking it after each
    of them is where threads lose time against processes. Each operation runs on the thread
    that calls it (one intra-op thread while tasks run), so workers use one core each.
    """

    def __init__(self, num_workers: int, function: Callable[[Any, Any], Any], shared: Any) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(
            num_workers, thread_name_prefix="tessera-worker")
        self.function = function
        # Each thread gets its own replica when `shared` has one (its gradients are private).
        replica = getattr(shared, "replica", None)
        self.shared = [replica() if replica else shared for _ in range(num_workers)]
        keep_freed_memory()

    def __enter__(self) -> HogwildThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, tasks: Sequence[Any]) -> list[Any]:
        """The results of one task per worker, in task order; a task's exception is raised."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            futures = [self.executor.submit(self.function, shared, task)
                       for shared, task in zip(self.shared, tasks)]
            return [future.result() for future in futures]
        finally:
            torch.set_num_threads(threads)

    def close(self) -> None:
        self.executor.shutdown()
