"""`tessera neighbors` benchmark: time and peak memory of queries on a large graph.

The seeded power-law graph of the other benchmarks (bench/synthetic_graph.py, --edges edges
over --nodes nodes; 10M and 1M by default) is imported once with `tessera import` into
--partitions partitions, and a checkpoint of --dimension is initialised once with random
embeddings and committed as training commits one (query time does not depend on what the
values are). Then `tessera neighbors` runs in a child process for each count of --queries
(names drawn with a seed from the graph's nodes), --repeats times; the table gives the median
wall time of the whole command (start-up, reading the model, finding the names, the scan) and
the child's peak RSS (from wait4). A last row gives the peak RSS of a process that only
imports the query code (the interpreter and torch): the fixed cost under every query.

    python bench/bench_neighbors.py                          # 10M edges, 1M nodes
    python bench/bench_neighbors.py --edges 200000 --nodes 20000 --repeats 1   # a smoke run

Everything is cached under bench/output/neighbors; nothing here runs in the tests.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_graph import GraphFiles, GraphSpec, ensure_graph  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"
MIB = 2**20

INIT_CHECKPOINT = """
import json, sys
import numpy as np, torch
from tessera.config import load_config
from tessera.data.graph_data import GraphData
from tessera.model import EmbeddingModel
from tessera.model.model_io import save_model
from tessera.storage.checkpoint import CheckpointStore
config = load_config(sys.argv[1], [])
counts = GraphData(config).entity_counts["node"]
store = CheckpointStore.from_config(config)
rng = np.random.default_rng(0)
for part, count in enumerate(counts):
    rows = rng.standard_normal((count, config.dimension), dtype=np.float32)
    store.write_embeddings(1, "node", part, rows)
save_model(store, 1, EmbeddingModel(config, len(config.relations)), None, {})
store.commit(1, config.to_dict())
"""

IMPORT_ONLY = "import tessera.querying.trained, tessera.cli"


def run_child(command: Sequence[str], log_path: Path,
              stdout_path: Path | None = None) -> tuple[float, int]:
    """Run a command to completion: (wall s, peak RSS bytes of that child)."""
    with log_path.open("w") as log, \
            (stdout_path.open("w") if stdout_path else open(os.devnull, "w")) as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{' '.join(command[:6])} ... failed (log: {log_path}):\n{tail}")
    return wall, usage.ru_maxrss * 1024


def generate_graph(args: argparse.Namespace) -> GraphFiles:
    """The graph, generated in a spawned child so that this process stays small."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        spec = GraphSpec(edges=args.edges, nodes=args.nodes, seed=args.seed)
        return pool.submit(ensure_graph, spec, args.output / "graphs").result()


def prepare(args: argparse.Namespace, graph: GraphFiles) -> Path:
    """An imported graph with a committed checkpoint; returns its config file."""
    folder = (args.output / "neighbors"
              / f"e{args.edges}_n{args.nodes}_p{args.partitions}_d{args.dimension}")
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "entities": {"node": {"num_partitions": args.partitions}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node",
                       "operator": "translation"}],
        "dimension": args.dimension, "comparator": args.comparator,
        "entity_path": str(folder / "entities"), "edge_paths": [str(folder / "edges")],
        "checkpoint_path": str(folder / "checkpoints"),
    }
    config_path = folder / "config.json"
    config_path.write_text(json.dumps(config, indent=2))
    if not (folder / "entities" / "entity_count_node_0.txt").exists():
        wall, rss = run_child([sys.executable, "-m", "tessera", "import", str(config_path),
                               str(graph.train), "--quiet"], folder / "import.log")
        print(f"imported {graph.num_train:,} edges in {wall:.1f} s", flush=True)
    if not (folder / "checkpoints" / "checkpoint_version.txt").exists():
        wall, rss = run_child([sys.executable, "-c", INIT_CHECKPOINT, str(config_path)],
                              folder / "init.log")
        print(f"initialised the checkpoint in {wall:.1f} s", flush=True)
    return config_path


def query_names(graph: GraphFiles, count: int, seed: int) -> list[str]:
    import random

    names = graph.nodes.read_text().split()
    return random.Random(seed).sample(names, count)


def time_queries(args: argparse.Namespace, config: Path, graph: GraphFiles,
                 count: int) -> dict[str, Any]:
    names = query_names(graph, count, args.seed)
    folder = config.parent
    walls, peaks = [], []
    for repeat in range(args.repeats):
        command = [sys.executable, "-m", "tessera", "neighbors", str(config), *names,
                   "-k", str(args.k), "--log-format", "json"]
        wall, rss = run_child(command, folder / f"neighbors_{count}_{repeat}.log",
                              folder / f"neighbors_{count}_{repeat}.tsv")
        walls.append(wall)
        peaks.append(rss)
        print(f"  {count} name(s), run {repeat + 1}: {wall:.2f} s, {rss / MIB:,.0f} MB",
              flush=True)
    lines = (folder / f"neighbors_{count}_0.tsv").read_text().splitlines()
    assert len(lines) == count * args.k, f"expected {count * args.k} lines, got {len(lines)}"
    return {"names": count, "wall_s": statistics.median(walls),
            "min_s": min(walls), "max_s": max(walls), "peak_rss": statistics.median(peaks)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--dimension", type=int, default=100)
    parser.add_argument("--comparator", default="dot")
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    graph = generate_graph(args)
    config = prepare(args, graph)
    rows = [time_queries(args, config, graph, count) for count in args.queries]
    _, fixed = run_child([sys.executable, "-c", IMPORT_ONLY], config.parent / "fixed.log")
    num_names = len(graph.nodes.read_text().split())
    print(f"\n{graph.num_train:,} edges, {num_names:,} named nodes, "
          f"{args.partitions} partition(s), dimension {args.dimension}, {args.comparator}, "
          f"k={args.k}; median of {args.repeats}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| names | wall s (median, min-max) | peak RSS (MB) |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row['names']:,} | {row['wall_s']:.2f} ({row['min_s']:.2f}-{row['max_s']:.2f})"
              f" | {row['peak_rss'] / MIB:,.0f} |")
    print(f"| (interpreter, torch and the query code only) | - | {fixed / MIB:,.0f} |")


if __name__ == "__main__":
    main()
