"""Partition swaps: how much of a training run waits for partitions, with and without look-ahead.

Trains the `bench_train.py` config (8 partitions by default) on a synthetic graph, alternately
with `TESSERA_PREFETCH=0` (each bucket's partitions read when it starts) and with look-ahead
(read while the bucket before trains), and prints each run's wall time, the time training
waited for partitions (`partition_wait_s` of the run's summary), its share of the wall time,
and the load average when the run ended (the machine may be shared).

    python bench/bench_swaps.py                                  # 2M edges, 1M nodes, dim 200
    python bench/bench_swaps.py --edges 10000000 --nodes 1000000 --dimension 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_train import OUTPUT, Tessera, benchmark_config, import_graph
from synthetic_graph import GraphSpec, ensure_graph


def train_run(folder: Path, config: dict[str, Any], look_ahead: bool) -> dict[str, float]:
    """One run from scratch; its summary's seconds and partition wait, and the load."""
    tessera = Tessera()
    config_path = tessera.write_config(folder, config)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    environment = {**os.environ, "TESSERA_PREFETCH": "1" if look_ahead else "0"}
    finished = subprocess.run(tessera.train_command(config_path), env=environment,
                              capture_output=True, text=True, check=True)
    lines = (finished.stdout + finished.stderr).splitlines()  # the log goes to stderr
    summary = next(json.loads(line) for line in reversed(lines)
                   if '"training finished"' in line)
    return {"seconds": summary["seconds"], "wait": summary["partition_wait_s"],
            "load": os.getloadavg()[0]}


def print_table(runs: dict[bool, list[dict[str, float]]]) -> None:
    print(f"{'look-ahead':<11}{'run':>4}{'train s':>9}{'wait s':>8}{'wait %':>8}{'load 1m':>9}")
    for look_ahead, results in runs.items():
        for index, run in enumerate(results):
            print(f"{'on' if look_ahead else 'off':<11}{index:>4}{run['seconds']:>9.1f}"
                  f"{run['wait']:>8.2f}{100 * run['wait'] / run['seconds']:>7.1f}%"
                  f"{run['load']:>9.2f}")
        share = statistics.median(r["wait"] / r["seconds"] for r in results)
        print(f"{'':<11}{'med':>4}{statistics.median(r['seconds'] for r in results):>9.1f}"
              f"{statistics.median(r['wait'] for r in results):>8.2f}{100 * share:>7.1f}%")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--dimension", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--background-io", action="store_true",
                        help="write swapped-out partitions in the background too")
    args = parser.parse_args(argv)
    graph = ensure_graph(GraphSpec(args.edges, args.nodes), OUTPUT / "graphs")
    folder = OUTPUT / f"swaps_e{args.edges}_n{args.nodes}_p{args.partitions}"
    folder.mkdir(parents=True, exist_ok=True)
    config = {**benchmark_config(folder, args.partitions, 0.01, args.epochs),
              "dimension": args.dimension, "background_io": args.background_io}
    import_graph(Tessera(), folder, config, graph, reuse=True)
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for look_ahead in (False, True):  # alternated: the machine's load drifts
            runs[look_ahead].append(train_run(folder, config, look_ahead))
            print(json.dumps({"look_ahead": look_ahead, **runs[look_ahead][-1]}),
                  file=sys.stderr)
    print_table(runs)


if __name__ == "__main__":
    main()
