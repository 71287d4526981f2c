"""Out-of-core benchmark: a graph whose embeddings and optimizer state dwarf the trainer's memory.

A seeded generator (bench/synthetic_graph.py's model, drawn a block at a time) writes the
training edges and a held-out set as Parquet files of integer ids, which `tessera import`
streams; then `tessera import`, `tessera train` (one epoch) and `tessera eval` (the held-out
edges against sampled negatives) run as the real command-line processes, each measured by
bench_train.py's sampler (peak PSS of the process tree). Partition look-ahead and background
writes are off, so the trainer should hold two partitions, one bucket and its fixed cost (the
peak of the same training on a small graph in one partition, less that graph's partition and
bucket): the table says whether it does, and how many times
the state on disk outweighs the training's peak.

    python bench/bench_out_of_core.py --huge                     # 20M nodes, 200M edges
    python bench/bench_out_of_core.py --nodes 1000000 --edges 10000000   # a quick check

Everything is written under bench/output/huge/ (the input is deleted once imported) and
deleted at the end unless `--keep`; the fixed-cost run reuses bench_train.py's small graph
and run folder under bench/output/. The full size needs about 15 GB of disk at its peak (the
buckets and one checkpoint) and 3.6 GB of memory for the import's dictionary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import (  # noqa: E402
    ENTITY_TYPE,
    FIXED_COST_GRAPH,
    GB,
    OUTPUT,
    Measurement,
    Tessera,
    benchmark_config,
    fixed_cost_pss,
    memory_bound,
    run_measured,
    write_json_config,
)
from synthetic_graph import EdgeSampler, GraphSpec  # noqa: E402

FOLDER = OUTPUT / "huge"
# Edges drawn and written per Parquet row group: bounds the generator's memory.
BLOCK_EDGES = 4_000_000
# The full size: 20M x 100 float32 embeddings (8 GB with their Adagrad state).
HUGE = GraphSpec(edges=200_000_000, nodes=20_000_000)
HUGE_PARTITIONS = 32
# Uniform negatives each held-out edge is ranked against, per side (plus the batch's).
EVAL_UNIFORM_NEGATIVES = 1000
# Epochs of the fixed-cost run (one bucket each, in one partition): as many buckets as it
# takes the heaps to reach their steady size (0.258 GB after one bucket, 0.260 after 16 to 48,
# measured when each compiled call still allocated its own buffers).
FIXED_COST_EPOCHS = 32


# --- the input ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GeneratedInput:
    train: Path
    test: Path
    num_train: int
    num_test: int


def write_edges(path: Path, blocks: Any) -> int:
    """Write (lhs, rhs) id blocks as one Parquet file of two int64 columns; returns edges."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("lhs", pa.int64()), ("rhs", pa.int64())])
    written = 0
    partial = path.with_suffix(".partial")
    with pq.ParquetWriter(partial, schema, compression="zstd") as writer:
        for lhs, rhs in blocks:
            writer.write_table(pa.table({"lhs": lhs, "rhs": rhs}, schema=schema))
            written += len(lhs)
    partial.replace(path)
    return written


def generate(spec: GraphSpec, num_test: int, folder: Path,
             block_edges: int = BLOCK_EDGES) -> GeneratedInput:
    """`spec.edges` training edges and about `num_test` held-out ones (those whose two ends
    occur in training), drawn block by block so that memory does not follow the edge count."""
    rng = np.random.default_rng(spec.seed)
    sampler = EdgeSampler.of(spec, rng)
    seen = np.zeros(spec.nodes, dtype=bool)

    def training_blocks() -> Any:
        for start in range(0, spec.edges, block_edges):
            lhs, rhs = sampler.draw(min(block_edges, spec.edges - start), rng)
            seen[lhs] = seen[rhs] = True
            yield lhs, rhs

    def held_out_blocks() -> Any:
        lhs, rhs = sampler.draw(num_test, rng)
        known = seen[lhs] & seen[rhs]
        yield lhs[known], rhs[known]

    folder.mkdir(parents=True, exist_ok=True)
    train, test = folder / "train.parquet", folder / "test.parquet"
    num_train = write_edges(train, training_blocks())
    return GeneratedInput(train, test, num_train, write_edges(test, held_out_blocks()))


# --- the runs ----------------------------------------------------------------------------

def huge_config(folder: Path, partitions: int, lr: float) -> dict[str, Any]:
    """bench_train.py's config, one epoch, the held-out edges as a second edge set."""
    config = benchmark_config(folder, partitions, lr, epochs=1)
    config["edge_paths"] = [str(folder / "edges_train"), str(folder / "edges_test")]
    return config


def only_edges(config: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    return {**config, "edge_paths": [config["edge_paths"][index]], **changes}


def tessera_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tessera", *args, "--log-format", "json"]


@dataclass(frozen=True)
class HugeRun:
    nodes: int
    partitions: int
    num_train: int
    num_test: int
    state_bytes: int  # embeddings and optimizer state of the checkpoint, on disk
    imported: Measurement
    trained: Measurement
    evaluated: Measurement
    metrics: dict[str, Any]


def entity_count(folder: Path, partitions: int) -> int:
    """Entities as imported, over all partitions (read as text: loading tessera's storage
    code would map h5py into this process, and PSS would share its pages with the runs)."""
    return sum(int((folder / "entities" / f"entity_count_{ENTITY_TYPE}_{part}.txt")
                   .read_text()) for part in range(partitions))


def state_on_disk(checkpoints: Path) -> int:
    """Bytes of the latest version's embedding files (each with its optimizer state)."""
    version = int((checkpoints / "checkpoint_version.txt").read_text().strip())
    return sum(path.stat().st_size
               for path in checkpoints.glob(f"embeddings_{ENTITY_TYPE}_*.v{version}.h5"))


def run_all(folder: Path, graph: GeneratedInput, partitions: int, lr: float) -> HugeRun:
    """Import (then delete the input), train one epoch, evaluate the held-out edges."""
    config = huge_config(folder, partitions, lr)
    import_config = write_json_config(folder / "config_import.json", config)
    print("importing...", flush=True)
    imported = run_measured(tessera_command("import", str(import_config), str(graph.train),
                                            str(graph.test), "--lhs-col", "0", "--rhs-col", "1"),
                            folder / "import.log")
    graph.train.unlink()
    graph.test.unlink()
    train_config = write_json_config(folder / "config_train.json", only_edges(config, 0))
    print("training...", flush=True)
    trained = run_measured(tessera_command("train", str(train_config)), folder / "train.log")
    eval_config = write_json_config(folder / "config_eval.json", only_edges(
        config, 1, num_uniform_negs=EVAL_UNIFORM_NEGATIVES))
    print("evaluating...", flush=True)
    evaluated = run_measured(tessera_command("eval", str(eval_config), "--output",
                                             str(folder / "metrics.json")),
                             folder / "eval.log")
    return HugeRun(entity_count(folder, partitions), partitions, graph.num_train, graph.num_test,
                   state_on_disk(folder / "checkpoints"), imported, trained, evaluated,
                   json.loads((folder / "metrics.json").read_text()))


# --- the table ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """The training peak against the state on disk and against its bound (two
    partitions, one bucket, the fixed cost)."""

    ratio: float  # state on disk / peak PSS of training
    bound: int  # bytes: two partitions' tables and Adagrad sums, one bucket, the fixed cost
    within: bool


def judge(state_bytes: int, train_peak: int, fixed_cost: int, nodes: int, edges: int,
          partitions: int, dimension: int) -> Verdict:
    bound = memory_bound(nodes, edges, partitions, dimension, look_ahead=False) + fixed_cost
    return Verdict(state_bytes / train_peak, bound, train_peak <= bound)


def within_text(train_peak: int, verdict: Verdict) -> str:
    """The verdict with its margin: the peaks differ by a megabyte or two out of gigabytes."""
    margin = abs(verdict.bound - train_peak) / 1e6
    return f"yes, by {margin:.1f} MB" if verdict.within else f"NO, over by {margin:.1f} MB"


def table_rows(run: HugeRun, fixed_cost: int, verdict: Verdict) -> list[tuple[str, str]]:
    def rate(edges: int, measured: Measurement) -> str:
        return f"{measured.wall_s:,.0f} s, {edges / measured.wall_s:,.0f} edges/s"

    return [
        ("nodes", f"{run.nodes:,}"),
        ("partitions", str(run.partitions)),
        ("training edges / held-out edges", f"{run.num_train:,} / {run.num_test:,}"),
        ("embeddings + optimizer state on disk", f"{run.state_bytes / GB:.2f} GB"),
        ("peak PSS: import / train / eval",
         " / ".join(f"{m.peak_tree_pss / GB:.3f} GB"
                    for m in (run.imported, run.trained, run.evaluated))),
        ("state on disk / peak train PSS", f"{verdict.ratio:.1f}x (goal: 8x)"),
        ("bound: 2 partitions + Adagrad + 1 bucket + fixed cost",
         f"{verdict.bound / GB:.3f} GB (fixed cost {fixed_cost / GB:.3f} GB)"),
        ("train peak within the bound", within_text(run.trained.peak_tree_pss, verdict)),
        ("import", rate(run.num_train + run.num_test, run.imported)),
        ("train (1 epoch)", rate(run.num_train, run.trained)),
        ("eval", rate(run.num_test, run.evaluated)),
        ("held-out MRR / Hits@10",
         f"{run.metrics['mrr']:.3f} / {run.metrics['hits@10']:.3f}"),
    ]


def print_table(rows: list[tuple[str, str]]) -> None:
    print("\n| | |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


# --- command line ------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--huge", action="store_true",
                        help="the full size (20M nodes, 200M edges), whatever the flags below say")
    parser.add_argument("--nodes", type=int, default=HUGE.nodes)
    parser.add_argument("--edges", type=int, default=HUGE.edges, help="training edges")
    parser.add_argument("--partitions", type=int, default=HUGE_PARTITIONS)
    parser.add_argument("--held-out", type=int, default=100_000, help="held-out edges drawn")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true",
                        help=f"keep {FOLDER} (entities, buckets, checkpoint, logs)")
    args = parser.parse_args(argv)
    if args.huge:
        args.nodes, args.edges, args.partitions = HUGE.nodes, HUGE.edges, HUGE_PARTITIONS
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # Hold only what a bucket needs: no partitions read ahead (background_io is off in the
    # config). The fixed-cost run inherits the same environment.
    os.environ["TESSERA_PREFETCH"] = "0"
    shutil.rmtree(FOLDER, ignore_errors=True)
    (FOLDER / "tmp").mkdir(parents=True)
    os.environ["TMPDIR"] = str(FOLDER / "tmp")  # the importer's spilled edge ids
    try:
        spec = GraphSpec(args.edges, args.nodes, seed=args.seed)
        print(f"generating {args.edges:,} edges between {args.nodes:,} nodes...", flush=True)
        graph = generate(spec, args.held_out, FOLDER)
        run = run_all(FOLDER, graph, args.partitions, args.lr)
        print("measuring the fixed cost...", flush=True)
        # In one partition: in 32 the small graph's buckets (62 edges) never fill a
        # worker's batch buffers, which every bucket of the large graph does.
        fixed = fixed_cost_pss(Tessera(), 1, args.lr, FIXED_COST_EPOCHS, args.seed,
                               look_ahead=False)
        if fixed is None:
            raise SystemExit("the fixed-cost run failed (see above)")
        dimension = benchmark_config(FOLDER, 1, args.lr, 1)["dimension"]
        verdict = judge(run.state_bytes, run.trained.peak_tree_pss, fixed, run.nodes,
                        run.num_train, args.partitions, dimension)
        print(f"\nOne epoch of bench_train.py's config (dimension {dimension}, 2 Hogwild "
              "workers), TESSERA_PREFETCH=0, background_io off. Peak PSS of each command's "
              "process tree, sampled every 0.5 s; fixed cost: the same training on a graph of "
              f"{FIXED_COST_GRAPH.edges:,} edges and {FIXED_COST_GRAPH.nodes:,} nodes in one "
              f"partition ({FIXED_COST_EPOCHS} epochs), "
              "less its own partition and bucket. Held-out edges ranked by `tessera eval` "
              f"against the batch's and {EVAL_UNIFORM_NEGATIVES} uniform negatives per side.")
        print_table(table_rows(run, fixed, verdict))
    finally:
        if not args.keep:
            shutil.rmtree(FOLDER, ignore_errors=True)


if __name__ == "__main__":
    main()
