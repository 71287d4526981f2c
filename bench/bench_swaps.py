"""Partition swaps: how much of a training run waits for partitions, and what each way of
hiding or removing the swaps costs in memory.

Trains the `bench_train.py` config (8 partitions by default) on a synthetic graph, one run
of each setting in turn (the machine's load drifts), and prints each run's training time,
the time training waited for partitions (`partition_wait_s` of the run's summary), its
share, the peak PSS of the process tree and the load average when the run ended. Settings:
`on-demand` (`TESSERA_PREFETCH=0`: each bucket's partitions read when it starts, those it
leaves written at once), `look-ahead` (read while the bucket before trains), `background-io`
(look-ahead, and writes made while the next bucket trains), `cache` (look-ahead, and
`partition_cache_gb` large enough for every partition: swapped-out partitions stay in
memory and are written once per checkpoint) and `cache-background` (the cache, and
`background_io`: with every partition in memory, each checkpoint is written from a copy
while the next chunk trains). The `checkpoint s` column is the time training waited for
checkpoints (`checkpoint_s`); with one partition (`--partitions 1`) `background-io` writes
its checkpoints in the background too.

    python bench/bench_swaps.py                                  # 2M edges, 1M nodes, dim 200
    python bench/bench_swaps.py --settings look-ahead cache --dimension 100
    python bench/bench_swaps.py --partitions 1 --epochs 5 --settings look-ahead background-io
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_train import OUTPUT, Tessera, benchmark_config, import_graph, run_measured
from synthetic_graph import GraphSpec, ensure_graph

GB = 1e9


def settings(cache_gb: float) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each setting's TESSERA_PREFETCH and config changes."""
    return {"on-demand": ("0", {}), "look-ahead": ("1", {}),
            "background-io": ("1", {"background_io": True}),
            "cache": ("1", {"partition_cache_gb": cache_gb}),
            "cache-background": ("1", {"partition_cache_gb": cache_gb, "background_io": True})}


def train_run(folder: Path, config: dict[str, Any], prefetch: str) -> dict[str, float]:
    """One run from scratch: its summary's seconds and partition wait, peak PSS, the load."""
    tessera = Tessera()
    config_path = tessera.write_config(folder, config)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    os.environ["TESSERA_PREFETCH"] = prefetch  # the command inherits it
    measured = run_measured(tessera.train_command(config_path), folder / "train.log")
    summary = next(json.loads(line) for line in reversed(measured.log.splitlines())
                   if '"training finished"' in line)
    return {"seconds": summary["seconds"], "wait": summary["partition_wait_s"],
            "checkpoint": summary["checkpoint_s"],
            "pss": measured.peak_tree_pss / GB, "load": os.getloadavg()[0]}


def print_table(runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"{'setting':<18}{'run':>4}{'train s':>9}{'wait s':>8}{'wait %':>8}"
          f"{'checkpoint s':>14}{'peak PSS GB':>13}{'load 1m':>9}")
    for name, results in runs.items():
        for index, run in enumerate(results):
            print(f"{name:<18}{index:>4}{run['seconds']:>9.1f}{run['wait']:>8.2f}"
                  f"{100 * run['wait'] / run['seconds']:>7.1f}%{run['checkpoint']:>14.2f}"
                  f"{run['pss']:>13.3f}{run['load']:>9.2f}")
        share = statistics.median(r["wait"] / r["seconds"] for r in results)
        print(f"{'':<18}{'med':>4}{statistics.median(r['seconds'] for r in results):>9.1f}"
              f"{statistics.median(r['wait'] for r in results):>8.2f}{100 * share:>7.1f}%"
              f"{statistics.median(r['checkpoint'] for r in results):>14.2f}"
              f"{statistics.median(r['pss'] for r in results):>13.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--dimension", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="Hogwild workers")
    parser.add_argument("--settings", nargs="+", choices=list(settings(0)),
                        default=list(settings(0)))
    args = parser.parse_args(argv)
    graph = ensure_graph(GraphSpec(args.edges, args.nodes), OUTPUT / "graphs")
    folder = OUTPUT / f"swaps_e{args.edges}_n{args.nodes}_p{args.partitions}"
    folder.mkdir(parents=True, exist_ok=True)
    config = {**benchmark_config(folder, args.partitions, 0.01, args.epochs),
              "dimension": args.dimension, "workers": args.workers}
    import_graph(Tessera(), folder, config, graph, reuse=True)
    # Every partition: float32 rows and one float32 Adagrad sum per row.
    every_partition_gb = math.ceil(args.nodes * (args.dimension + 1) * 4 / GB * 10) / 10
    chosen = {name: setting for name, setting in settings(every_partition_gb).items()
              if name in args.settings}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    for _ in range(args.repeats):
        for name, (prefetch, changes) in chosen.items():
            runs[name].append(train_run(folder, {**config, **changes}, prefetch))
            print(json.dumps({"setting": name, **runs[name][-1]}), file=sys.stderr)
    print(f"partition_cache_gb of the cache setting: {every_partition_gb:g}")
    print_table(runs)


if __name__ == "__main__":
    main()
