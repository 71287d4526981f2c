"""How the process's memory allocator (glibc's) treats the memory training frees.

Inside a bucket, every batch allocates and frees the same few megabytes of tensors: that
memory is kept for the next batch (`keep_freed_memory`). Between buckets it is handed back
(`release_freed_memory`), so what a worker or the trainer holds while the partitions are
swapped is only what it uses. The `tessera` command has all its threads allocate from one
heap (`one_heap_for_all_threads`), so that this reaches the Hogwild threads' memory too. All
are no-ops (returning False) without glibc.
"""

from __future__ import annotations

from .libc import libc_function

# glibc mallopt parameters, and the values workers use (see `keep_freed_memory`).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # the largest glibc accepts
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Make the allocator keep freed memory for the next batch; False without glibc.

    By default glibc serves blocks of a few megabytes with fresh pages from the kernel and
    hands them back when they are freed, so each batch pays a page fault for every 4 KiB it
    touches: up to a fifth of a worker's time. Blocks up to 32 MiB now come from the heap,
    which keeps up to 128 MiB free.
    """
    mallopt = libc_function("mallopt")
    return bool(mallopt and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def release_freed_memory() -> bool:
    """Hand the free memory of the heap back to the kernel; False without glibc.

    A bucket's temporaries (its edges, their shuffled copies, the batches' tensors) leave
    free pages scattered in the heap, and they add up over a run (a trainer's free heap grew
    from 9 to 34 MB in one epoch of 64 buckets): trimming after each bucket keeps a process's
    memory at what one bucket needs. It costs milliseconds per bucket (11 ms to hand back
    30 MB of scattered blocks, measured), and the next bucket's first batches fault their
    pages back in.
    """
    malloc_trim = libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def one_heap_for_all_threads() -> bool:
    """Make every thread of the process allocate from its main heap; False without glibc.

    glibc gives threads heaps of their own, of which `malloc_trim` hands back the free blocks
    but not the free memory at their top: over a run of many buckets, each Hogwild thread's
    heap stays as large as it ever grew. With one heap, trimming between buckets hands back
    all that is free. Called before any other thread starts; worker threads allocate a few
    times per compiled call (32 batches), so they hardly ever wait for the heap's lock.
    """
    mallopt = libc_function("mallopt")
    return bool(mallopt and mallopt(M_ARENA_MAX, 1))
