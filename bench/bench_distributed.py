"""Distributed-training benchmark: the cost of the distributed path on one machine.

The same config trains on one machine (`tessera train`) and as a local cluster
(`tessera train --local-cluster`: a lock server, partition servers and trainers as separate
processes talking over TCP on 127.0.0.1), alternating between the setups. The table reports
medians of:

- the job's training rate: edges per second as trainer 0 (or the single trainer) reports it
  in its `training finished` event, from its first bucket to its last checkpoint;
- the wall time of the whole command, process start-up and rendezvous included;
- the CPU time of the whole process tree per million edges trained;
- partition traffic: bytes of partition tensors (embeddings and Adagrad sums) the trainers
  received and sent over RPC, per bucket swap (a bucket for which a trainer fetched at least
  one partition) and per bucket trained, as the trainers count them.

    python bench/bench_distributed.py                          # 1M edges, 4 partitions
    python bench/bench_distributed.py --edges 200000 --nodes 10000 --repeats 1

Data, logs and checkpoints go to bench/output/distributed/.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_graph import GraphSpec, ensure_graph  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"
ENTITY_TYPE = "node"
MB = 2**20


@dataclass(frozen=True)
class Setup:
    name: str
    trainers: int  # 0: the single-machine command
    partition_servers: int = 0

    def command(self, config: Path) -> list[str]:
        base = [sys.executable, "-m", "tessera", "train", str(config), "--log-format", "json"]
        if not self.trainers:
            return base
        return [*base, "--local-cluster", "--trainers", str(self.trainers),
                "--partition-servers", str(self.partition_servers)]


SETUPS = [Setup("one machine", 0), Setup("local cluster 1 trainer + 1 PS", 1, 1),
          Setup("local cluster 2 trainers + 2 PS", 2, 2)]


@dataclass(frozen=True)
class Run:
    setup: str
    rate: float  # edges/s of the job, as trainer 0 reports it
    wall_s: float
    cpu_s_per_m_edges: float
    bytes_per_swap: float | None
    bytes_per_bucket: float | None
    swaps: int


def benchmark_config(folder: Path, partitions: int, epochs: int, workers: int) -> dict[str, Any]:
    """bench_train.py's config: translation, dot, ranking loss, dimension 100."""
    return {
        "entities": {ENTITY_TYPE: {"num_partitions": partitions}},
        "relations": [{"name": "link", "lhs": ENTITY_TYPE, "rhs": ENTITY_TYPE,
                       "operator": "translation"}],
        "dimension": 100, "comparator": "dot", "loss_fn": "ranking", "margin": 0.1,
        "batch_size": 1000, "num_batch_negs": 50, "num_uniform_negs": 50, "lr": 0.01,
        "workers": workers, "num_epochs": epochs, "eval_fraction": 0.0, "hogwild_delay": 0.0,
        "entity_path": str(folder / "entities"), "edge_paths": [str(folder / "edges")],
        "checkpoint_path": str(folder / "checkpoints"),
    }


def json_records(output: str, role: str | None) -> list[dict[str, Any]]:
    """The JSON lines of one role of a local cluster (`[role] {...}`), or of a single run."""
    prefix = f"[{role}] " if role else ""
    return [json.loads(line[len(prefix):]) for line in output.splitlines()
            if line.startswith(prefix + "{")]


def run_setup(setup: Setup, config: Path, folder: Path, repeat: int,
              edges_trained: int) -> Run:
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    finished = subprocess.run(setup.command(config), capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = folder / f"{setup.name.replace(' ', '_').replace('+', 'and')}_{repeat}.log"
    log.write_text(finished.stderr)
    if finished.returncode != 0:
        raise SystemExit(f"{setup.name} failed (exit {finished.returncode}); see {log}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    main_role = "trainer-0" if setup.trainers else None
    summary = next(r for r in json_records(finished.stderr, main_role)
                   if r.get("event") == "training finished")
    traffic = [r for i in range(setup.trainers)
               for r in json_records(finished.stderr, f"trainer-{i}")
               if r.get("event") == "partition traffic"]
    moved = sum(r["bytes_received"] + r["bytes_sent"] for r in traffic)
    swaps = sum(r["swaps"] for r in traffic)
    buckets = _buckets_trained(folder)
    return Run(setup.name, float(summary["edges_per_s"]), wall, cpu / edges_trained * 1e6,
               moved / swaps if swaps else None,
               moved / buckets if setup.trainers and buckets else None, swaps)


def _buckets_trained(folder: Path) -> int:
    stats = folder / "checkpoints" / "training_stats.json"
    return sum(1 for line in stats.read_text().splitlines() if line.strip())


def import_graph(folder: Path, config: dict[str, Any], train_tsv: Path) -> None:
    """Import once; a finished import of the same layout is reused."""
    record = folder / "import.json"
    layout = {key: config[key] for key in ("entities", "relations")}
    if record.exists() and json.loads(record.read_text()) == layout:
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config_path = folder / "import_config.json"
    config_path.write_text(json.dumps(config))
    subprocess.run([sys.executable, "-m", "tessera", "import", str(config_path),
                    str(train_tsv), "--quiet"], check=True)
    record.write_text(json.dumps(layout))


def show(value: float | None, style: str) -> str:
    return "-" if value is None else format(value, style)


def print_table(runs: list[Run]) -> None:
    by_setup: dict[str, list[Run]] = {}
    for run in runs:
        by_setup.setdefault(run.setup, []).append(run)

    def median(group: list[Run], field: str) -> float | None:
        values = [getattr(run, field) for run in group if getattr(run, field) is not None]
        return statistics.median(values) if values else None

    single = median(by_setup[SETUPS[0].name], "rate") or 0.0
    header = ["setup", "edges/s (job)", "vs one machine", "wall s", "CPU s / M edges",
              "MB per swap", "MB per bucket", "swaps"]
    rows = [header]
    for name, group in by_setup.items():
        rate = median(group, "rate") or 0.0
        per_swap, per_bucket = median(group, "bytes_per_swap"), median(group, "bytes_per_bucket")
        rows.append([name, f"{rate:,.0f}", f"{rate / single - 1:+.0%}" if single else "-",
                     f"{median(group, 'wall_s'):.1f}",
                     f"{median(group, 'cpu_s_per_m_edges'):.1f}",
                     show(per_swap and per_swap / MB, ".2f"),
                     show(per_bucket and per_bucket / MB, ".2f"),
                     f"{median(group, 'swaps'):.0f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                        for i, (cell, width) in enumerate(zip(row, widths))))
        if index == 0:
            print("  ".join("-" * width for width in widths))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=1_000_000, help="training edges")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="Hogwild workers per trainer")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setup")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    spec = GraphSpec(args.edges, args.nodes)
    print(f"generating (or reusing) the graph {spec.key}...", flush=True)
    graph = ensure_graph(spec, OUTPUT / "graphs")
    folder = OUTPUT / "distributed" / f"{spec.key}_p{args.partitions}"
    config = benchmark_config(folder, args.partitions, args.epochs, args.workers)
    import_graph(folder, config, graph.train)
    config_path = folder / "config.json"
    config_path.write_text(json.dumps(config, indent=2))
    runs = []
    for repeat in range(args.repeats):
        for setup in SETUPS:  # alternated, so that a noisy moment hits every setup alike
            print(f"run {repeat + 1}/{args.repeats}: {setup.name}...", flush=True)
            runs.append(run_setup(setup, config_path, folder, repeat,
                                  graph.num_train * args.epochs))
    print(f"\nGraph: {graph.num_train:,} training edges, {args.nodes:,} nodes, "
          f"{args.partitions} partitions ({args.partitions ** 2} buckets); {args.epochs} "
          f"epochs; dimension 100; {args.workers} Hogwild workers per trainer; "
          f"{os.cpu_count()} cores; medians of {args.repeats} runs.")
    print("edges/s (job): trainer 0's `training finished` rate (first bucket to last "
          "checkpoint); wall s: the whole command, start-up included; CPU s: every process "
          "of the run; MB per swap / per bucket: partition tensors sent and received over RPC "
          "by the trainers.\n")
    print_table(runs)


if __name__ == "__main__":
    main()
