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
    python bench/bench_neighbors.py --train-epochs 1 --ann --ann-path DIR   # + hnswlib, faiss

With --ann, approximate indexes (hnswlib's HNSW, faiss's IVF-Flat; whichever is importable,
from --ann-path too) are built over the same embeddings in memory and timed against the exact
search, with their recall@k.

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

# Approximate indexes against the exact search, in memory, in a child of their own: the
# table is loaded whole (as every index needs it), the exact top-k of each query computed by
# one product, then each index built, queried, and scored by recall@k.
ANN = """
import json, resource, sys, time
import numpy as np, torch
from tessera.config import load_config
from tessera.data.graph_data import GraphData
from tessera.storage.checkpoint import CheckpointStore
config_path, counts_json, k, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
max_rows = int(sys.argv[5]) or None
config = load_config(config_path, [])
store = CheckpointStore.from_config(config)
counts = GraphData(config).entity_counts["node"]
table = np.concatenate([store.read_embeddings("node", part)[0] for part in range(len(counts))])
table = np.ascontiguousarray(table[:max_rows])
rng = np.random.default_rng(seed)
results = []
def exact(queries):
    scores = torch.from_numpy(queries) @ torch.from_numpy(table).T
    return scores.topk(k + 1, dim=1).indices[:, 1:].numpy()  # the query itself comes first
def recall(found, truth):
    return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth)]))
def timed(call):
    started = time.perf_counter(); value = call(); return value, time.perf_counter() - started
ids = {count: rng.choice(len(table), count, replace=False) for count in json.loads(counts_json)}
truth = {}
for count, rows in ids.items():
    truth[count], seconds = timed(lambda: exact(table[rows]))
    results.append({"method": "exact, in memory (one product)", "names": count,
                    "build_s": 0.0, "query_s": seconds, "recall": 1.0})
try:
    import hnswlib
    index = hnswlib.Index(space="ip", dim=table.shape[1])
    def build():
        index.init_index(max_elements=len(table), M=16, ef_construction=100)
        index.add_items(table)
    _, build_s = timed(build)
    for ef in (50, 200):
        index.set_ef(ef)
        for count, rows in ids.items():
            (found, _), seconds = timed(lambda: index.knn_query(table[rows], k + 1))
            results.append({"method": f"hnswlib HNSW M=16 ef={ef}", "names": count,
                            "build_s": build_s, "query_s": seconds,
                            "recall": recall(found[:, 1:], truth[count])})
except ImportError:
    pass
try:
    import faiss
    nlist = 1024
    quantizer = faiss.IndexFlatIP(table.shape[1])
    index = faiss.IndexIVFFlat(quantizer, table.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    def build():
        index.train(table[rng.choice(len(table), min(len(table), 64 * nlist),
                                     replace=False)])
        index.add(table)
    _, build_s = timed(build)
    for nprobe in (8, 64):
        index.nprobe = nprobe
        for count, rows in ids.items():
            (_, found), seconds = timed(lambda: index.search(table[rows], k + 1))
            results.append({"method": f"faiss IVF-Flat nlist={nlist} nprobe={nprobe}",
                            "names": count, "build_s": build_s, "query_s": seconds,
                            "recall": recall(found[:, 1:], truth[count])})
except ImportError:
    pass
print(json.dumps({"results": results,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

IMPORT_ONLY = "import tessera.querying.trained, tessera.cli"


def run_child(command: Sequence[str], log_path: Path,
              stdout_path: Path | None = None) -> tuple[float, int, float]:
    """Run a command to completion: (wall s, peak RSS bytes, CPU s) of that child."""
    with log_path.open("w") as log, \
            (stdout_path.open("w") if stdout_path else open(os.devnull, "w")) as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{' '.join(command[:6])} ... failed (log: {log_path}):\n{tail}")
    return wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def generate_graph(args: argparse.Namespace) -> GraphFiles:
    """The graph, generated in a spawned child so that this process stays small."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        spec = GraphSpec(edges=args.edges, nodes=args.nodes, seed=args.seed)
        return pool.submit(ensure_graph, spec, args.output / "graphs").result()


def prepare(args: argparse.Namespace, graph: GraphFiles) -> Path:
    """An imported graph with a committed checkpoint; returns its config file."""
    folder = (args.output / "neighbors" / f"e{args.edges}_n{args.nodes}_p{args.partitions}"
              f"_d{args.dimension}{f'_t{args.train_epochs}' if args.train_epochs else ''}")
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
        wall, rss, _ = run_child([sys.executable, "-m", "tessera", "import", str(config_path),
                               str(graph.train), "--quiet"], folder / "import.log")
        print(f"imported {graph.num_train:,} edges in {wall:.1f} s", flush=True)
    if (folder / "checkpoints" / "checkpoint_version.txt").exists():
        return config_path
    if args.train_epochs:
        wall, rss, _ = run_child([sys.executable, "-m", "tessera", "train", str(config_path),
                               "-p", f"num_epochs={args.train_epochs}", "--quiet"],
                              folder / "train.log")
        print(f"trained {args.train_epochs} epoch(s) in {wall:.1f} s", flush=True)
    else:
        wall, rss, _ = run_child([sys.executable, "-c", INIT_CHECKPOINT, str(config_path)],
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
    walls, peaks, cpus = [], [], []
    for repeat in range(args.repeats):
        command = [sys.executable, "-m", "tessera", "neighbors", str(config), *names,
                   "-k", str(args.k), "--log-format", "json"]
        wall, rss, cpu = run_child(command, folder / f"neighbors_{count}_{repeat}.log",
                                   folder / f"neighbors_{count}_{repeat}.tsv")
        walls.append(wall)
        peaks.append(rss)
        cpus.append(cpu)
        print(f"  {count} name(s), run {repeat + 1}: {wall:.2f} s, CPU {cpu:.2f} s, "
              f"{rss / MIB:,.0f} MB", flush=True)
    lines = (folder / f"neighbors_{count}_0.tsv").read_text().splitlines()
    assert len(lines) == count * args.k, f"expected {count * args.k} lines, got {len(lines)}"
    return {"names": count, "wall_s": statistics.median(walls),
            "min_s": min(walls), "max_s": max(walls), "cpu_s": statistics.median(cpus),
            "peak_rss": statistics.median(peaks)}


def compare_indexes(args: argparse.Namespace, config: Path) -> None:
    """Time approximate indexes (those importable, from --ann-path too) against exact search."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [os.environ.get("PYTHONPATH"), args.ann_path]))}
    out = config.parent / "ann.json"
    log_path = config.parent / "ann.log"
    with out.open("w") as sink, log_path.open("w") as log:
        done = subprocess.run([sys.executable, "-c", ANN, str(config), json.dumps(args.queries),
                               str(args.k), str(args.seed), str(args.ann_rows)], stdout=sink,
                              stderr=log, env=env)
    if done.returncode:
        raise RuntimeError(f"the index comparison failed:\n{log_path.read_text()[-2000:]}")
    report = json.loads(out.read_text())
    rows = f"the first {args.ann_rows:,} rows" if args.ann_rows else "all rows"
    print(f"\nin memory, over {rows} of the table; peak RSS {report['peak_rss'] / MIB:,.0f} "
          "MB (the table and every index)\n")
    print("| method | names | build s | query s | recall@k |")
    print("|---|---|---|---|---|")
    for row in report["results"]:
        print(f"| {row['method']} | {row['names']:,} | {row['build_s']:.1f} | "
              f"{row['query_s']:.3f} | {row['recall']:.3f} |")


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
    parser.add_argument("--train-epochs", type=int, default=0,
                        help="train this many epochs instead of initialising the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--ann", action="store_true",
                        help="also time approximate indexes (hnswlib, faiss) where importable")
    parser.add_argument("--ann-path", default=None,
                        help="a folder holding hnswlib/faiss (pip install --target ...)")
    parser.add_argument("--ann-rows", type=int, default=0,
                        help="index only the first N rows (0: all; HNSW builds take minutes "
                        "per million rows)")
    args = parser.parse_args(argv)
    graph = generate_graph(args)
    config = prepare(args, graph)
    rows = [time_queries(args, config, graph, count) for count in args.queries]
    fixed_wall, fixed, fixed_cpu = run_child([sys.executable, "-c", IMPORT_ONLY],
                                             config.parent / "fixed.log")
    num_names = len(graph.nodes.read_text().split())
    print(f"\n{graph.num_train:,} edges, {num_names:,} named nodes, "
          f"{args.partitions} partition(s), dimension {args.dimension}, {args.comparator}, "
          f"k={args.k}; median of {args.repeats}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| names | wall s (median, min-max) | CPU s | peak RSS (MB) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['names']:,} | {row['wall_s']:.2f} ({row['min_s']:.2f}-{row['max_s']:.2f})"
              f" | {row['cpu_s']:.2f} | {row['peak_rss'] / MIB:,.0f} |")
    print(f"| (start-up only: interpreter, torch, the query code) | {fixed_wall:.2f} | "
          f"{fixed_cpu:.2f} | {fixed / MIB:,.0f} |")
    if args.ann:
        compare_indexes(args, config)


if __name__ == "__main__":
    main()
