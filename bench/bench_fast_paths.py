"""Each hand-written fast path beside the library call it stands in for, in one table.

Four fast paths, each measured against its alternative in the same run, A and B
alternating, medians of `--repeats` runs with the spread (min-max), since this machine's
speed drifts from run to run:

- the C kernels (`tessera._kernels`) against the torch path (`TESSERA_KERNELS=0`): training
  loop edges/s of bench_train.py's default setup (1 partition), for `--train-epochs` epochs;
- `DenseAdagrad` against `torch.optim.Adagrad` (fused, and foreach) on dense parameters of
  the sizes models have: time per step, and the first step in a fresh process (what each
  Hogwild worker pays);
- the in-place bucket shuffle (`kernels.shuffle_columns`, Fisher-Yates over the two id
  columns) against `torch.randperm` and two `index_select`s (what it replaced, which holds an
  order and a copy of each column): milliseconds per shuffle of `--shuffle-edges` edges;
- the importer's name dictionary (fingerprints in a `KeyTable`) against
  `pyarrow.compute.dictionary_encode` (and `pandas.factorize` when pandas is installed) on
  `--keys` string keys, `--distinct` of them distinct, in the importer's blocks: keys/s and
  the peak memory above the keys themselves, each run in a fresh process.

    python bench/bench_fast_paths.py
    python bench/bench_fast_paths.py --repeats 3 --edges 200000 --nodes 20000   # a quick check
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import (  # noqa: E402
    OUTPUT,
    Tessera,
    attempt,
    benchmark_config,
    from_scratch,
    import_graph,
    in_fresh_process,
    run_measured,
)
from synthetic_graph import GraphSpec, ensure_graph  # noqa: E402

MB = 1e6


@dataclass(frozen=True)
class Row:
    """One comparison: the fast path's and the alternative's measurements of one quantity."""

    fast_path: str
    workload: str
    quantity: str
    ours: list[float]
    alternative_name: str
    theirs: list[float]
    style: str = ",.0f"


def spread(values: list[float], style: str) -> str:
    if not values:
        return "failed"
    low, high = min(values), max(values)
    return f"{statistics.median(values):{style}} ({low:{style}}-{high:{style}})"


def print_rows(rows: list[Row], repeats: int) -> None:
    print(f"\nMedians of {repeats} alternating runs (min-max in brackets):\n")
    print("| fast path | workload | quantity | Tessera | alternative | alternative's | "
          "Tessera / alternative (median of pairs, min-max) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        # Each repeat's pair ran back to back, so its ratio is the least touched by drift.
        ratios = [ours / theirs for ours, theirs in zip(row.ours, row.theirs) if theirs]
        complete = len(row.ours) == len(row.theirs)
        print(f"| {row.fast_path} | {row.workload} | {row.quantity} | "
              f"{spread(row.ours, row.style)} | {row.alternative_name} | "
              f"{spread(row.theirs, row.style)} | "
              f"{spread(ratios, '.2f') if complete else 'n/a (a run failed)'} |")


def alternate(repeats: int, first: Callable[[], float | None],
              second: Callable[[], float | None]) -> tuple[list[float], list[float]]:
    """Run `first` and `second` `repeats` times each, swapping their order every repeat."""
    results: tuple[list[float], list[float]] = ([], [])
    for repeat in range(repeats):
        order = [(0, first), (1, second)]
        for index, measure in order if repeat % 2 == 0 else order[::-1]:
            value = measure()
            if value is not None:
                results[index].append(value)
    return results


# --- the C kernels against the torch path -------------------------------------------------

def training_rows(args: argparse.Namespace) -> list[Row]:
    spec = GraphSpec(args.edges, args.nodes)
    print(f"generating (or reusing) the graph {spec.key}...", flush=True)
    graph = ensure_graph(spec, OUTPUT / "graphs")
    system = Tessera()
    folder = OUTPUT / "fast_paths" / spec.key
    config = benchmark_config(folder, 1, lr=0.01, epochs=args.train_epochs)
    if attempt(import_graph, system, folder, config, graph, True) is None:
        return []

    def loop_rate(kernels: str) -> Callable[[], float | None]:
        def run() -> float | None:
            print(f"training with TESSERA_KERNELS={kernels}...", flush=True)
            command = ["env", f"TESSERA_KERNELS={kernels}", *from_scratch(system, folder, config)]
            measured = attempt(run_measured, command, folder / f"train_kernels{kernels}.log")
            return system.loop_rate(measured.log, folder) if measured else None
        return run

    ours, theirs = alternate(args.repeats, loop_rate("1"), loop_rate("0"))
    workload = (f"train {graph.num_train / 1e6:g}M edges, 1 partition, {args.train_epochs} "
                "epoch(s), bench_train defaults")
    return [Row("C kernels", workload, "loop edges/s", ours, "torch path (TESSERA_KERNELS=0)",
                theirs)]


# --- DenseAdagrad against torch.optim.Adagrad ---------------------------------------------

# Dense parameter shapes of real models: the benchmark config's one translation operator
# (dimension 100), and linear operators (100 x 100) for 10 and 100 relations.
DENSE_SHAPES = {
    "1 translation, d=100": [(100,)],
    "10 linear, 100x100": [(100, 100)] * 10,
    "100 linear, 100x100": [(100, 100)] * 100,
}


def make_optimizer(kind: str, params: list[Any], lr: float) -> Any:
    import torch

    from tessera.training.optimizers import DenseAdagrad

    if kind == "DenseAdagrad":
        return DenseAdagrad(params, lr)
    return torch.optim.Adagrad(params, lr=lr, eps=1e-10, **{kind: True})


def seconds_per_step(kind: str, shapes: list[tuple[int, ...]], steps: int) -> float:
    """Mean wall time of one `step()` over parameters of `shapes` with fixed gradients."""
    import torch

    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator)
    optimizer = make_optimizer(kind, params, 0.01)
    for _ in range(10):  # warm-up
        optimizer.step()
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - started) / steps


def optimizer_steps(kinds: Sequence[str], repeats: int,
                    steps: int) -> dict[tuple[str, str], list[float]]:
    """Microseconds per step of each optimizer kind on each shape set, alternating kinds."""
    import torch

    torch.set_num_threads(1)  # as in a Hogwild worker
    times: dict[tuple[str, str], list[float]] = {}
    for workload, shapes in DENSE_SHAPES.items():
        for repeat in range(repeats):
            for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
                times.setdefault((workload, kind), []).append(
                    seconds_per_step(kind, shapes, steps) * 1e6)
    return times


FIRST_STEP = """
import sys, time
started = time.perf_counter()
import torch
from tessera.training.optimizers import DenseAdagrad
p = torch.nn.Parameter(torch.zeros(100)); p.grad = torch.ones(100)
imported = time.perf_counter()
kind = sys.argv[1]
o = DenseAdagrad([p], 0.01) if kind == "DenseAdagrad" else torch.optim.Adagrad([p], **{kind: True})
o.step()
print(time.perf_counter() - imported)
"""


def first_step_seconds(kind: str) -> float:
    """Construction and first step of the optimizer in a fresh interpreter (torch already
    imported): the start-up each worker process pays."""
    output = subprocess.run([sys.executable, "-c", FIRST_STEP, kind], check=True,
                            capture_output=True, text=True).stdout
    return float(output.split()[-1])


def optimizer_rows(args: argparse.Namespace) -> list[Row]:
    kinds = ["DenseAdagrad", "fused", "foreach"]
    print("timing the dense optimizers...", flush=True)
    times = in_fresh_process(optimizer_steps, kinds, args.repeats, args.optimizer_steps)
    rows = []
    for workload in DENSE_SHAPES:
        for kind in kinds[1:]:
            rows.append(Row("DenseAdagrad", workload, "us per step (1 thread)",
                            times[workload, "DenseAdagrad"], f"torch Adagrad({kind}=True)",
                            times[workload, kind], ",.1f"))
    for kind in kinds[1:]:
        print(f"first step in a fresh process: DenseAdagrad against {kind}...", flush=True)
        ours, theirs = alternate(args.repeats, lambda: first_step_seconds("DenseAdagrad"),
                                 lambda kind=kind: first_step_seconds(kind))
        rows.append(Row("DenseAdagrad", "1 translation, fresh process", "s to first step",
                        ours, f"torch Adagrad({kind}=True)", theirs, ".3f"))
    return rows


# --- the in-place shuffle against randperm and index_select ------------------------------

def shuffle_times(sizes: Sequence[int], repeats: int) -> dict[tuple[int, str], list[float]]:
    """Seconds per shuffle of two int64 columns of each size, one thread, the two ways
    alternating (run in a fresh process: torch's thread count is set for it)."""
    import torch

    from tessera import kernels
    from tessera.data.batching import random_order

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    times: dict[tuple[int, str], list[float]] = {}
    for size in sizes:
        columns = [torch.randint(0, size, (size,)) for _ in range(2)]

        def in_place(columns: list[Any] = columns) -> float:
            seed = int(torch.randint(2 ** 62, (), generator=generator))
            started = time.perf_counter()
            kernels.shuffle_columns(columns, seed)
            return time.perf_counter() - started

        def gathered(columns: list[Any] = columns, size: int = size) -> float:
            started = time.perf_counter()
            order = random_order(size, generator)
            for column in columns:
                column.index_select(0, order)
            return time.perf_counter() - started

        in_place(), gathered()  # first touches of the pages
        ours, theirs = alternate(repeats, in_place, gathered)
        times[size, "ours"], times[size, "theirs"] = ours, theirs
    return times


def shuffle_rows(args: argparse.Namespace) -> list[Row]:
    print("timing the bucket shuffle...", flush=True)
    sizes = args.shuffle_edges
    times = in_fresh_process(shuffle_times, sizes, args.repeats)
    return [Row("in-place shuffle", f"{size:,} edges, 2 id columns", "ms per shuffle (1 thread)",
                [1e3 * t for t in times[size, "ours"]], "randperm + 2 index_select",
                [1e3 * t for t in times[size, "theirs"]], ",.1f") for size in sizes]


# --- the importer's name dictionary against Arrow and pandas --------------------------

def string_keys(count: int, distinct: int) -> Any:
    """`count` names "n{id}" (large_string, as the readers give them), ids uniform over
    `distinct` values, in the importer's blocks: a pyarrow ChunkedArray."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from tessera.importing.options import ImportOptions

    ids = np.random.default_rng(0).integers(distinct, size=count)
    names = pc.binary_join_element_wise("n", pc.cast(pa.array(ids), pa.string()), "")
    names = names.cast(pa.large_string())
    block = ImportOptions().block_edges
    return pa.chunked_array([names.slice(start, block) for start in range(0, count, block)])


def encode_with_tessera(chunks: Any) -> int:
    from tessera.importing.dictionary import NameDictionary

    dictionary = NameDictionary()
    for chunk in chunks.chunks:
        dictionary.encode(chunk)
    return len(dictionary)


def encode_with_arrow(chunks: Any) -> int:
    import pyarrow.compute as pc

    # One memo table across the chunks: the ids agree between blocks, as the importer needs.
    encoded = pc.dictionary_encode(chunks)
    return len(encoded.chunk(encoded.num_chunks - 1).dictionary)


def encode_with_pandas(chunks: Any) -> int:
    # pandas is no dependency of Tessera: compared only where it happens to be installed.
    pd = importlib.import_module("pandas")

    # factorize keeps no table between calls, so all blocks go in one call, as Python
    # strings (the conversion is part of the cost of using it on Arrow blocks).
    _, uniques = pd.factorize(chunks.to_numpy())
    return len(uniques)


ENCODERS = {"Tessera": encode_with_tessera, "pyarrow.compute.dictionary_encode":
            encode_with_arrow, "pandas.factorize": encode_with_pandas}


def rss_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def encode_once(name: str, count: int, distinct: int) -> tuple[float, float, int]:
    """(keys/s, peak bytes above the keys, distinct keys found), in this (fresh) process."""
    import pyarrow as pa

    chunks = string_keys(count, distinct)
    gc.collect()
    # Arrow keeps freed memory in its pool, where a later allocation reuses it unseen by RSS.
    pa.default_memory_pool().release_unused()
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak RSS to the current RSS
    before = rss_bytes("VmRSS")
    started = time.perf_counter()
    found = ENCODERS[name](chunks)
    seconds = time.perf_counter() - started
    return count / seconds, rss_bytes("VmHWM") - before, found


def dictionary_rows(args: argparse.Namespace) -> list[Row]:
    alternatives = ["pyarrow.compute.dictionary_encode"]
    if importlib.util.find_spec("pandas") is not None:
        alternatives.append("pandas.factorize")
    else:
        print("pandas is not installed: pyarrow only", flush=True)
    workload = f"{args.keys / 1e6:g}M string keys, {args.distinct / 1e6:g}M distinct"
    rows = []
    for alternative in alternatives:
        measured: dict[str, list[tuple[float, float, int]]] = {}
        for repeat in range(args.repeats):
            pair = ["Tessera", alternative]
            for name in pair if repeat % 2 == 0 else pair[::-1]:
                print(f"encoding with {name}...", flush=True)
                measured.setdefault(name, []).append(
                    in_fresh_process(encode_once, name, args.keys, args.distinct))
        found = {result[2] for results in measured.values() for result in results}
        if len(found) != 1:
            raise SystemExit(f"the encoders disagree on the number of distinct keys: {found}")
        for quantity, index, scale, style in (("keys/s", 0, 1.0, ",.0f"),
                                              ("peak MB above the keys", 1, MB, ",.0f")):
            rows.append(Row("name dictionary", workload, quantity,
                            [r[index] / scale for r in measured["Tessera"]], alternative,
                            [r[index] / scale for r in measured[alternative]], style))
    return rows


# --- command line -----------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side")
    parser.add_argument("--edges", type=int, default=2_000_000, help="training edges")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--train-epochs", type=int, default=1)
    parser.add_argument("--optimizer-steps", type=int, default=2000,
                        help="optimizer steps timed per run")
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--distinct", type=int, default=1_000_000)
    parser.add_argument("--shuffle-edges", type=int, nargs="+", default=[312_500, 2_000_000],
                        help="bucket sizes shuffled")
    parser.add_argument("--only", choices=["kernels", "optimizer", "shuffle", "dictionary"],
                        nargs="+", default=["kernels", "optimizer", "shuffle", "dictionary"])
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sections = {"kernels": training_rows, "optimizer": optimizer_rows, "shuffle": shuffle_rows,
                "dictionary": dictionary_rows}
    rows = [row for name in args.only for row in sections[name](args)]
    print_rows(rows, args.repeats)


if __name__ == "__main__":
    main()
