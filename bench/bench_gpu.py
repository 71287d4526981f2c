"""GPU benchmark: Tessera on a GPU beside Tessera and PBG 1.0 on the same machine's CPU cores.

One run on one machine, for two graphs: bench_train.py's 2M-edge config (1 partition) and
its 10M-edge graph with 8 partitions. Each system imports the graph with its own importer
and trains with bench_train.py's config (translation, dot, ranking loss, dimension 100, 50
batch + 50 uniform negatives); the CPU runs use every core as Hogwild workers, the GPU run
`num_gpus: 1` with batches of `--gpu-batch-size` edges. PBG 1.0 has no GPU mode. Reported:
edges/s (training loop and whole process), held-out MRR by bench_train.py's one evaluator,
the GPU's peak allocated memory, its share of its arithmetic limit and its busy share
(the device's time in the batch loops, by CUDA events, over the training time).

    python bench/bench_gpu.py --pbg-python /tmp/pbg-venv/bin/python
    python bench/bench_gpu.py --gpu-memory-limit 0.02    # embeddings larger than the GPU
    python bench/bench_gpu.py --gpu-only --half-precision  # another GPU setting alone
    python bench/bench_gpu.py --graphs large --partition-cache-gb 8  # swaps kept in memory
    python bench/bench_gpu.py --edges 20000 --nodes 2000 --large-edges 40000 \\
        --large-nodes 4000 --epochs 1                    # a quick check

Without a CUDA device the GPU rows are skipped (and say so); the CPU rows still run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train as base  # noqa: E402
from synthetic_graph import GraphFiles, GraphSpec, ensure_graph  # noqa: E402

# Dense peaks of an H100 SXM (TFLOP/s): the scoring products run in float32; bfloat16 is
# the ceiling a half-precision product could reach.
H100_FP32_TFLOPS = 67.0
H100_BF16_TFLOPS = 989.0


class TesseraGPU(base.Tessera):
    """Tessera's `train` on CUDA device 0, through this script's child mode (which can cap
    the GPU memory the process may use before training starts)."""

    name = "Tessera-GPU"

    def __init__(self, memory_fraction: float | None) -> None:
        self.memory_fraction = memory_fraction

    def train_command(self, config: Path) -> list[str]:
        command = [sys.executable, str(Path(__file__).resolve()), "--child-train", str(config)]
        if self.memory_fraction is not None:
            command += ["--gpu-memory-limit", str(self.memory_fraction)]
        return command


@dataclass
class Row:
    graph: str
    system: str
    result: base.RunResult | None
    summary: dict[str, Any]  # the `training finished` record (Tessera), else empty


def training_summary(log: str) -> dict[str, Any]:
    """The `training finished` record of a Tessera JSON log (empty if absent)."""
    for line in reversed(log.splitlines()):
        if line.startswith("{") and '"training finished"' in line:
            return json.loads(line)
    return {}


def system_config(system: base.System, folder: Path, partitions: int,
                  args: argparse.Namespace) -> dict[str, Any]:
    config = base.benchmark_config(folder, partitions, args.lr, args.epochs)
    config["workers"] = args.workers
    if isinstance(system, base.Tessera) and args.partition_cache_gb:
        config["partition_cache_gb"] = args.partition_cache_gb
    if isinstance(system, TesseraGPU):
        config.update(num_gpus=1, batch_size=args.gpu_batch_size,
                      half_precision=args.half_precision)
    return config


def run_system(system: base.System, graph: GraphFiles, graph_key: str, partitions: int,
               held_out: base.HeldOutSet, args: argparse.Namespace) -> Row:
    folder = base.run_folder(graph_key, system, partitions)
    config = system_config(system, folder, partitions, args)
    print(f"{system.name}: importing and training {graph_key}, {partitions} partition(s)...",
          flush=True)
    rate = base.attempt(base.import_graph, system, folder, config, graph, args.reuse_imports)
    if rate is None:
        return Row(graph_key, system.name, None, {})
    result = base.attempt(base.train_once, system, folder, config, graph, held_out, 0, rate)
    log = (folder / "train_0.log").read_text() if (folder / "train_0.log").exists() else ""
    return Row(graph_key, system.name, result, training_summary(log))


def gpu_figures(row: Row, config: dict[str, Any], peak_tflops: float) -> list[str]:
    """Peak GPU memory, share of the arithmetic limit (loop rate), busy share."""
    summary, result = row.summary, row.result
    if not summary or result is None or "device_busy_s" not in summary:
        return ["-", "-", "-"]
    limit = peak_tflops * 1e12 / base.flops_per_edge(config)
    share = f"{result.loop_rate / limit:.2%}" if result.loop_rate else "-"
    seconds = summary.get("seconds") or 0
    busy = f"{summary['device_busy_s'] / seconds:.0%}" if seconds else "-"
    return [f"{summary.get('device_peak_memory_gb', 0):.2f}", share, busy]


def print_rows(rows: list[Row], config: dict[str, Any], peak_tflops: float) -> None:
    print("\n| graph | system | edges/s (training loop) | edges/s (whole process) "
          "| train wall s | held-out MRR | Hits@10 | peak GPU memory (GB) "
          "| GPU share of arithmetic limit | GPU busy share of training time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        result = row.result
        if result is None:
            cells = ["failed"] * 5 + ["-"] * 3
        else:
            cells = [f"{result.loop_rate:,.0f}" if result.loop_rate else "-",
                     f"{result.process_rate:,.0f}" if result.process_rate else "-",
                     f"{result.wall_s:.1f}" if result.wall_s else "-",
                     f"{result.mrr:.3f}" if result.mrr is not None else "-",
                     f"{result.hits10:.3f}" if result.hits10 is not None else "-",
                     *gpu_figures(row, config, peak_tflops)]
        print(f"| {row.graph} | {row.system} | " + " | ".join(cells) + " |")


def print_speedups(rows: list[Row]) -> None:
    """Each Tessera row against PBG's on the same graph (loop and whole-process rates)."""
    print("\n| graph | system | loop / PBG | whole process / PBG | MRR - PBG's |")
    print("|---|---|---|---|---|")
    for row in rows:
        pbg = next((r.result for r in rows if r.graph == row.graph and r.system == "PBG"),
                   None)
        if row.system == "PBG" or row.result is None or pbg is None:
            continue
        ratios = [f"{mine / theirs:.2f}x" if mine and theirs else "n/a"
                  for mine, theirs in ((row.result.loop_rate, pbg.loop_rate),
                                       (row.result.process_rate, pbg.process_rate))]
        quality = f"{row.result.mrr - pbg.mrr:+.3f}" \
            if row.result.mrr is not None and pbg.mrr is not None else "n/a"
        print(f"| {row.graph} | {row.system} | {ratios[0]} | {ratios[1]} | {quality} |")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=2_000_000, help="the default graph")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--large-edges", type=int, default=10_000_000,
                        help="the 8-partition graph")
    parser.add_argument("--large-nodes", type=int, default=1_000_000)
    parser.add_argument("--large-partitions", type=int, default=8)
    parser.add_argument("--graphs", nargs="+", choices=("default", "large"),
                        default=["default", "large"], help="which of the two graphs to train")
    parser.add_argument("--partition-cache-gb", type=float, default=0.0,
                        help="Tessera's partition_cache_gb (both devices): partitions swapped "
                        "out are kept in memory, unwritten, up to this size")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="Hogwild workers of the CPU runs (default: every core)")
    parser.add_argument("--gpu-batch-size", type=int, default=100_000,
                        help="edges per batch on the GPU (PBG suggests about 100,000)")
    parser.add_argument("--half-precision", action="store_true",
                        help="store the GPU run's embeddings as float16")
    parser.add_argument("--gpu-memory-limit", type=float,
                        help="fraction of the GPU's memory the GPU run may allocate "
                        "(torch.cuda.set_per_process_memory_fraction): below the size of all "
                        "embeddings, partitions are swapped through host memory")
    parser.add_argument("--peak-tflops", type=float, default=H100_FP32_TFLOPS,
                        help="the GPU's dense float32 peak, TFLOP/s (default: H100 SXM's; "
                        f"its bfloat16 peak is {H100_BF16_TFLOPS:.0f})")
    parser.add_argument("--gpu-only", action="store_true",
                        help="skip the CPU rows (a second GPU setting beside a run that had them)")
    parser.add_argument("--pbg-python", help="Python of an environment with torchbiggraph")
    parser.add_argument("--reuse-imports", action="store_true")
    parser.add_argument("--eval-negatives", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child-train", help=argparse.SUPPRESS)  # the GPU run's process
    return parser.parse_args(argv)


def child_train(config: str, memory_fraction: float | None) -> None:
    """The GPU run's process: cap its GPU memory, then `tessera train` in it."""
    import torch

    from tessera.cli import main as tessera_main

    if memory_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(memory_fraction)
    sys.exit(tessera_main(["train", config, "--log-format", "json"]))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_train:
        child_train(args.child_train, args.gpu_memory_limit)
        return
    systems: list[base.System] = [] if args.gpu_only else [base.Tessera()]
    if base.in_fresh_process(cuda_available):
        systems.insert(0, TesseraGPU(args.gpu_memory_limit))
    else:
        print("no CUDA device: the GPU rows are skipped", flush=True)
    if args.pbg_python:
        systems.append(base.PyTorchBigGraph(args.pbg_python))
    named_graphs = {
        "default": (GraphSpec(args.edges, args.nodes, seed=args.seed), 1),
        "large": (GraphSpec(args.large_edges, args.large_nodes, seed=args.seed),
                  args.large_partitions)}
    graphs = [graph for name, graph in named_graphs.items() if name in args.graphs]
    rows = []
    for spec, partitions in graphs:
        graph = ensure_graph(spec, base.OUTPUT / "graphs")
        held_out = base.HeldOutSet.build(graph, args.eval_negatives, chunk=1000,
                                         seed=args.seed)
        rows += [run_system(system, graph, spec.key, partitions, held_out, args)
                 for system in systems]
    config = base.benchmark_config(Path("."), 1, args.lr, args.epochs)
    cap, cache = args.gpu_memory_limit, args.partition_cache_gb
    print(f"\n{args.epochs} epochs, lr {args.lr}; CPU runs: {args.workers} Hogwild workers; "
          f"GPU run: batches of {args.gpu_batch_size:,} edges"
          f"{', float16 embeddings' if args.half_precision else ''}"
          f"{f'; partition_cache_gb {cache:g}' if cache else ''}"
          f"{f', GPU memory capped at {cap:.0%}' if cap else ''}"
          f". Arithmetic limit: {base.flops_per_edge(config):,} floating-point operations "
          f"per edge at {args.peak_tflops:g} TFLOP/s. Held-out evaluation as in "
          "bench_train.py.")
    if not any(isinstance(system, TesseraGPU) for system in systems):
        print("GPU rows: skipped (no CUDA device on this machine).")
    print_rows(rows, config, args.peak_tflops)
    print_speedups(rows)


if __name__ == "__main__":
    main()
