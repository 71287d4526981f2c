"""Checksummed file I/O: how long `CheckpointStore` takes to write and to read back one
partition of embeddings on a local disk, and an edge bucket of --edges edges, and what share
of that their CRC-32 is.

One partition of --rows x --dimension float32 values (random, seeded) is written as a
version's embeddings file and read back whole, --repeats times each in turn; then a bucket
(`write_bucket`, `read_bucket` of every row, then of --chunks row ranges in turn, as training
reads it with `num_edge_chunks` = --chunks). The table gives the medians, the rate over the
bytes, and the time `zlib.crc32` alone takes over the same bytes (computed once on write and
carried over the slices on read). The files are in --dir (default
bench/output/checkpoint_io), so the page cache usually serves the reads: the worst case for
the checksum's share. Run it at two commits to compare them.

    python bench/bench_checkpoint_io.py                        # 1M rows x 100 (400 MB)
    python bench/bench_checkpoint_io.py --rows 200000 --dimension 400 --repeats 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from tessera.storage.checkpoint import CheckpointStore  # noqa: E402
from tessera.storage.edges import read_bucket, write_bucket  # noqa: E402
from tessera.storage.fs import Directory  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output" / "checkpoint_io"


def timed(action: Callable[..., object], *args: object, **kwargs: object) -> float:
    start = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dimension", type=int, default=100)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=OUTPUT)
    args = parser.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    store = CheckpointStore(Directory(str(args.dir)))
    values = np.random.default_rng(0).standard_normal((args.rows, args.dimension),
                                                      dtype=np.float32)
    out = np.empty_like(values)
    times: dict[str, list[float]] = {"write": [], "read": [], "crc32": []}
    for version in range(1, args.repeats + 1):
        times["write"].append(timed(store.write_embeddings, version, "node", 0, values))
        times["read"].append(timed(store.read_embeddings, "node", 0, version, out=out))
        times["crc32"].append(timed(zlib.crc32, values))
    assert np.array_equal(out, values)
    report(f"one partition: {args.rows:,} rows x {args.dimension}", values.nbytes, times,
           args.repeats)

    columns = np.random.default_rng(1).integers(0, 1000, (3, args.edges))
    edges = Directory(str(args.dir / "edges"))
    bounds = np.linspace(0, args.edges, args.chunks + 1).astype(int)
    times = {"write": [], "read": [], "chunks": [], "crc32": []}
    for _ in range(args.repeats):
        times["write"].append(timed(write_bucket, edges, 0, 0, *columns))
        times["read"].append(timed(read_bucket, edges, 0, 0, num_relations=1000))
        times["chunks"].append(sum(timed(read_bucket, edges, 0, 0, start, stop,
                                         num_relations=1000)
                                   for start, stop in zip(bounds[:-1], bounds[1:])))
        times["crc32"].append(sum(timed(zlib.crc32, column) for column in columns))
    report(f"one bucket: {args.edges:,} edges", columns.nbytes, times, args.repeats)
    shutil.rmtree(args.dir, ignore_errors=True)


def report(what: str, size: int, times: dict[str, list[float]], repeats: int) -> None:
    megabytes = size / 1e6
    print(f"{what} ({megabytes:,.0f} MB), medians of {repeats}")
    print(f"| {'step':<6} | {'seconds':>8} | {'MB/s':>8} |")
    print(f"|{'-' * 8}|{'-' * 9}:|{'-' * 9}:|")
    for step, measured in times.items():
        seconds = statistics.median(measured)
        print(f"| {step:<6} | {seconds:>8.3f} | {megabytes / seconds:>8,.0f} |")


if __name__ == "__main__":
    main()
