"""GPU benchmark: Tessera on a GPU beside Tessera and PBG 1.0 on the same machine's CPU cores.

One run on one machine, for three graphs: bench_train.py's 2M-edge config (1 partition), its
10M-edge graph with 8 partitions, and a knowledge graph. On the first two each system trains
bench_train.py's config (translation, dot, ranking loss, dimension 100, 50 batch + 50 uniform
negatives); on the knowledge graph (`--kg-edges` edges of `--kg-relations` planted relations,
synthetic_graph.py) bench_setups.py's FB15k-style setup (complex_diagonal, dynamic relations,
softmax, dimension 200, 1000 batch + 1000 uniform negatives, lr 0.1) for `--kg-epochs`
epochs. Each system imports the graph with its own importer. The CPU runs use every core as
Hogwild workers, the GPU run `num_gpus: 1` with batches of `--gpu-batch-size` edges (on the
knowledge graph `--kg-gpu-batch-size`, by default 1000: the CPU runs' batch, PBG's FB15k
example's, so that both devices' quality compares at one batch). PBG 1.0 has no GPU mode.
Reported: edges/s (training loop and whole process), held-out MRR by one evaluator for all
systems (bench_train.py's; on the knowledge graph each test edge's head and tail are ranked
with the checkpoint's per-relation operators), the GPU's peak allocated memory, its share of
its arithmetic limit and its busy share (the device's time in the batch loops, by CUDA
events, over the training time); then each Tessera row against PBG, and the GPU against
Tessera's own CPU path.

    python bench/bench_gpu.py --pbg-python /tmp/pbg-venv/bin/python
    python bench/bench_gpu.py --gpu-memory-limit 0.02    # embeddings larger than the GPU
    python bench/bench_gpu.py --gpu-only --half-precision  # another GPU setting alone
    python bench/bench_gpu.py --graphs large --partition-cache-gb 8  # swaps kept in memory
    python bench/bench_gpu.py --graphs kg --pbg-python /tmp/pbg-venv/bin/python  # the KG alone
    python bench/bench_gpu.py --edges 20000 --nodes 2000 --large-edges 40000 \\
        --large-nodes 4000 --epochs 1 --kg-edges 20000 --kg-nodes 5000 \\
        --kg-epochs 1                                    # a quick check
    python bench/bench_gpu.py --graphs kg --kg-edges 20000 --kg-nodes 5000 \\
        --kg-epochs 1                                    # a quick check of the KG alone

Without a CUDA device the GPU rows are skipped (and say so); the CPU rows still run.
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
import bench_setups as setups  # noqa: E402
import bench_train as base  # noqa: E402
from synthetic_graph import GraphFiles, GraphSpec, ensure_graph  # noqa: E402

# Dense peaks of an H100 SXM (TFLOP/s): the scoring products run in float32; bfloat16 is
# the ceiling a half-precision product could reach.
H100_FP32_TFLOPS = 67.0
H100_BF16_TFLOPS = 989.0
KG_SETUP = "fb15k"  # bench_setups.py's knowledge-graph setup, trained on the `kg` graph
# The knowledge graph's communities are smaller than the other graphs' 1000 nodes: with
# those, 2 epochs of the quick check's 20,000 edges reached a held-out MRR of 0.15, with
# these 0.46.
KG_NODES_PER_COMMUNITY = 100


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


class TesseraCPU(base.Tessera):
    """Tessera's `train` on the CPU cores, named apart from the GPU run in the tables."""

    name = "Tessera-CPU"


class WithRelationColumn:
    """A system importing a knowledge graph's three-column TSV with its own importer, told
    that the third column is the relation (a dynamic-relations config needs one)."""

    def __init__(self, system: base.System) -> None:
        self.system = system
        self.name = system.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)

    def import_command(self, config: Path, tsv: Path) -> list[str]:
        return [*self.system.import_command(config, tsv), "--rel-col", "2"]


@dataclass(frozen=True)
class Graph:
    """A graph of the benchmark: with relations, it trains the knowledge-graph setup."""

    name: str  # as --graphs names it
    spec: GraphSpec
    partitions: int

    @property
    def knowledge_graph(self) -> bool:
        return self.spec.relations > 0


@dataclass(frozen=True)
class KnowledgeGraphHeldOut:
    """A knowledge graph's test edges: bench_train.py's held-out set (heads, tails, sampled
    negatives) and the name of each edge's relation."""

    edges: base.HeldOutSet
    relations: list[str]

    @classmethod
    def build(cls, graph: GraphFiles, negatives: int, chunk: int,
              seed: int) -> KnowledgeGraphHeldOut:
        """As `HeldOutSet.build` (the same negatives for the same seed), from `lhs rhs rel`."""
        names = sorted(graph.nodes.read_text().split())
        position = {name: i for i, name in enumerate(names)}
        triples = [line.split("\t") for line in graph.test.read_text().splitlines()]
        heads = np.array([position[head] for head, _, _ in triples])
        tails = np.array([position[tail] for _, tail, _ in triples])
        rng = np.random.default_rng(seed)
        num_chunks = -(-len(triples) // chunk)
        edges = base.HeldOutSet(names, heads, tails,
                                rng.integers(len(names), size=(num_chunks, negatives)),
                                rng.integers(len(names), size=(num_chunks, negatives)), chunk)
        return cls(edges, [relation for _, _, relation in triples])


HeldOut = base.HeldOutSet | KnowledgeGraphHeldOut


@dataclass
class Row:
    graph: str
    system: str
    result: base.RunResult | None
    summary: dict[str, Any]  # the `training finished` record (Tessera), else empty
    edge_flops: int  # floating-point operations of one edge's matrix products (the config's)


def training_summary(log: str) -> dict[str, Any]:
    """The `training finished` record of a Tessera JSON log (empty if absent)."""
    for line in reversed(log.splitlines()):
        if line.startswith("{") and '"training finished"' in line:
            return json.loads(line)
    return {}


def system_config(system: base.System, folder: Path, graph: Graph,
                  args: argparse.Namespace) -> dict[str, Any]:
    """bench_train.py's config, or on a knowledge graph bench_setups.py's KG setup (its
    CPU batches of 1000 edges, PBG's FB15k example's), for `system` on `graph`."""
    if graph.knowledge_graph:
        config = setups.setup_config(folder, KG_SETUP, args.lr, args.kg_epochs)
        gpu_batch_size = args.kg_gpu_batch_size
    else:
        config = base.benchmark_config(folder, graph.partitions, args.lr, args.epochs)
        gpu_batch_size = args.gpu_batch_size
    config["workers"] = args.workers
    if isinstance(system, base.Tessera) and args.partition_cache_gb:
        config["partition_cache_gb"] = args.partition_cache_gb
    if isinstance(system, base.Tessera) and args.background_io:
        config["background_io"] = True
    if isinstance(system, TesseraGPU):
        config.update(num_gpus=1, batch_size=gpu_batch_size, half_precision=args.half_precision)
    return config


def run_system(system: base.System, graph: Graph, files: GraphFiles, held_out: HeldOut,
               args: argparse.Namespace, imported: Path | None = None) -> Row:
    """Import (or copy the import in `imported`, another system's folder), train, evaluate."""
    key, partitions = graph.spec.key, graph.partitions
    folder = base.run_folder(key, system, partitions)
    config = system_config(system, folder, graph, args)
    row = Row(key, system.name, None, {}, base.flops_per_edge(config))
    print(f"{system.name}: importing and training {key}, {partitions} partition(s)...",
          flush=True)
    importer = WithRelationColumn(system) if graph.knowledge_graph else system
    rate = base.attempt(copy_import, imported, folder) if imported is not None else \
        base.attempt(base.import_graph, importer, folder, config, files, args.reuse_imports)
    if rate is None:
        return row
    if isinstance(held_out, KnowledgeGraphHeldOut):
        row.result = base.attempt(train_knowledge_graph, system, folder, config, files,
                                  held_out, rate)
    else:
        row.result = base.attempt(base.train_once, system, folder, config, files, held_out, 0,
                                  rate)
    log = (folder / "train_0.log").read_text() if (folder / "train_0.log").exists() else ""
    row.summary = training_summary(log)
    if row.result is not None:  # the figures so far survive a run stopped before the tables
        print(f"{system.name} on {key}: loop {row.result.loop_rate or 0:,.0f} edges/s, whole "
              f"process {row.result.process_rate:,.0f}, train {row.result.wall_s:.1f} s, "
              f"MRR {row.result.mrr}", flush=True)
    return row


def copy_import(source: Path, folder: Path) -> float:
    """The entities and edges another system imported, copied into `folder`; that import's
    edges/s. PBG 1.0's importer takes minutes per million edges, and Tessera's import is in
    the layout PBG reads, so every system trains one import."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for part in ("entities", "edges"):
        shutil.copytree(source / part, folder / part)
    return float(json.loads((source / "import.json").read_text())["edges_per_s"])


def train_knowledge_graph(system: base.System, folder: Path, config: dict[str, Any],
                          graph: GraphFiles, held_out: KnowledgeGraphHeldOut,
                          import_rate: float) -> base.RunResult:
    """bench_train.py's `train_once` on a knowledge graph: train from scratch, then score
    the final checkpoint by `knowledge_graph_metrics`."""
    measured = base.run_measured(base.from_scratch(system, folder, config),
                                 folder / "train_0.log")
    try:
        metrics = base.in_fresh_process(knowledge_graph_metrics, folder, config, held_out)
    except (KeyError, OSError) as error:  # a missing entity, relation or checkpoint file
        raise base.StepFailed(f"evaluating the checkpoint in {folder}: {error!r}") from error
    return base.RunResult(system.name, 1, import_rate, measured.wall_s,
                          graph.num_train * config["num_epochs"] / measured.wall_s,
                          system.loop_rate(measured.log, folder), measured.peak_tree_pss,
                          measured.largest_rss, metrics["mrr"], metrics["hits10"])


def knowledge_graph_metrics(folder: Path, config: dict[str, Any],
                            held_out: KnowledgeGraphHeldOut) -> dict[str, float]:
    """MRR and Hits@10 of a checkpoint of the KG setup (both systems write PBG's layout),
    scored as training scores: with dynamic relations each side has its own operator,
    applied to the side that is not corrupted, so a test edge (u, r, v) ranks c(u, h_r(v))
    against the sampled heads' c(u', h_r(v)), and c(g_r(u), v) against the sampled tails'
    c(g_r(u), v') (c the comparator, g and h the left- and right-hand operators)."""
    import h5py
    import torch

    from tessera.config import parse_config
    from tessera.model import EmbeddingModel

    rows, embeddings = setups.load_table(folder)  # global embeddings already added
    edges = held_out.edges
    table = embeddings[torch.tensor([rows[name] for name in edges.names])]
    # The relations' indexes are the importer's, named in the entity path.
    relation_names = json.loads((folder / "entities" / "dynamic_rel_names.json").read_text())
    index = {name: i for i, name in enumerate(relation_names)}
    relations = torch.tensor([index[name] for name in held_out.relations])
    model = EmbeddingModel(parse_config({**config, "global_emb": False}), len(relation_names))
    version = int((folder / "checkpoints" / "checkpoint_version.txt").read_text())
    with h5py.File(folder / "checkpoints" / f"model.v{version}.h5") as file:
        model.load_state_dict({key: torch.from_numpy(file[f"model/{name}"][...])
                               for key, name in model.public_parameter_names().items()})
    lhs_operator, rhs_operator = model.lhs_operators[0], model.rhs_operators[0]
    prepare, compare = model.comparator.prepare, model.comparator
    ranks = []
    with torch.no_grad():
        for chunk, start in enumerate(range(0, edges.heads.size, edges.chunk)):
            part = slice(start, start + edges.chunk)
            u, v, rel = table[edges.heads[part]], table[edges.tails[part]], relations[part]
            heads = prepare(table[edges.negative_heads[chunk]])[None]
            tails = prepare(table[edges.negative_tails[chunk]])[None]
            none = u.new_empty((1, 0, u.shape[1]))
            head_pos, head_neg, _ = compare(prepare(u)[None], prepare(rhs_operator(v, rel))[None],
                                            heads, none)
            tail_pos, _, tail_neg = compare(prepare(lhs_operator(u, rel))[None],
                                            prepare(v)[None], none, tails)
            # Ties do not count against the positive: a sampled negative may be the true one.
            ranks.append(1 + (head_neg[0] > head_pos[0, :, None]).sum(1))
            ranks.append(1 + (tail_neg[0] > tail_pos[0, :, None]).sum(1))
    rank = torch.cat(ranks).double()
    return {"mrr": float((1 / rank).mean()), "hits10": float((rank <= 10).double().mean())}


def gpu_figures(row: Row, peak_tflops: float) -> list[str]:
    """Peak GPU memory, share of the arithmetic limit (loop rate), busy share."""
    summary, result = row.summary, row.result
    if not summary or result is None or "device_busy_s" not in summary:
        return ["-", "-", "-"]
    limit = peak_tflops * 1e12 / row.edge_flops
    share = f"{result.loop_rate / limit:.2%}" if result.loop_rate else "-"
    seconds = summary.get("seconds") or 0
    busy = f"{summary['device_busy_s'] / seconds:.0%}" if seconds else "-"
    return [f"{summary.get('device_peak_memory_gb', 0):.2f}", share, busy]


def time_split(row: Row) -> list[str]:
    """Of a Tessera run's wall time: its start-up, the training and the checkpoints in it."""
    summary = row.summary
    return [f"{summary[key]:.1f}" if key in summary else "-"
            for key in ("startup_s", "seconds", "checkpoint_s")]


def print_rows(rows: list[Row], peak_tflops: float) -> None:
    print("\n| graph | system | edges/s (training loop) | edges/s (whole process) "
          "| train wall s | held-out MRR | Hits@10 | peak GPU memory (GB) "
          "| GPU share of arithmetic limit | GPU busy share of training time "
          "| start-up s | training s | checkpoints s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        result = row.result
        if result is None:
            cells = ["failed"] * 5 + ["-"] * 6
        else:
            cells = [f"{result.loop_rate:,.0f}" if result.loop_rate else "-",
                     f"{result.process_rate:,.0f}" if result.process_rate else "-",
                     f"{result.wall_s:.1f}" if result.wall_s else "-",
                     f"{result.mrr:.3f}" if result.mrr is not None else "-",
                     f"{result.hits10:.3f}" if result.hits10 is not None else "-",
                     *gpu_figures(row, peak_tflops), *time_split(row)]
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


def print_gpu_over_cpu(rows: list[Row]) -> None:
    """Tessera-GPU against Tessera's own CPU path on each graph."""
    print()
    for graph in dict.fromkeys(row.graph for row in rows):
        gpu, cpu = (next((r.result for r in rows if r.graph == graph and r.system == name),
                         None) for name in (TesseraGPU.name, TesseraCPU.name))
        if gpu is None or cpu is None:
            missing = [name for name, result in ((TesseraGPU.name, gpu), (TesseraCPU.name, cpu))
                       if result is None]
            print(f"{graph}: Tessera-GPU over Tessera-CPU: n/a (no {' or '.join(missing)} "
                  "result)")
            continue
        process, loop = (f"{mine / theirs:.2f}x" if mine and theirs else "n/a"
                         for mine, theirs in ((gpu.process_rate, cpu.process_rate),
                                              (gpu.loop_rate, cpu.loop_rate)))
        quality = f"{gpu.mrr - cpu.mrr:+.3f}" \
            if gpu.mrr is not None and cpu.mrr is not None else "n/a"
        print(f"{graph}: Tessera-GPU over Tessera-CPU: whole process {process}, loop {loop}; "
              f"MRR GPU - CPU {quality}")


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
    parser.add_argument("--kg-edges", type=int, default=400_000,
                        help="training edges of the knowledge graph")
    parser.add_argument("--kg-nodes", type=int, default=150_000,
                        help="its nodes (about 110,000 of them occur in 400,000 edges)")
    parser.add_argument("--kg-relations", type=int, default=20,
                        help="its relation types (with Zipf frequencies, 10 node types)")
    parser.add_argument("--graphs", nargs="+", choices=("default", "large", "kg"),
                        default=["default", "large", "kg"],
                        help="which of the three graphs to train")
    parser.add_argument("--partition-cache-gb", type=float, default=0.0,
                        help="Tessera's partition_cache_gb (both devices): partitions swapped "
                        "out are kept in memory, unwritten, up to this size")
    parser.add_argument("--background-io", action="store_true",
                        help="Tessera's background_io (both devices): swapped-out partitions, "
                        "and checkpoints taken with every partition in memory, written while "
                        "training goes on")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="Hogwild workers of the CPU runs (default: every core)")
    parser.add_argument("--gpu-batch-size", type=int, default=100_000,
                        help="edges per batch on the GPU (PBG suggests about 100,000)")
    parser.add_argument("--kg-epochs", type=int, default=10,
                        help="epochs on the knowledge graph (its setup's lr: 0.1)")
    parser.add_argument("--kg-gpu-batch-size", type=int, default=1000,
                        help="edges per batch on the GPU on the knowledge graph (default: the "
                        "CPU runs' 1000, PBG's FB15k example's, for quality at the same batch)")
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
    parser.add_argument("--own-imports", dest="one_import", action="store_false",
                        help="each system imports the graph with its own importer (default: "
                        "the first system's import, Tessera's, is copied for the others)")
    parser.add_argument("--eval-negatives", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child-train", help=argparse.SUPPRESS)  # the GPU run's process
    args = parser.parse_args(argv)
    if args.kg_relations < 1:
        parser.error("--kg-relations must be at least 1")
    return args


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
    systems: list[base.System] = [] if args.gpu_only else [TesseraCPU()]
    if base.in_fresh_process(cuda_available):
        systems.insert(0, TesseraGPU(args.gpu_memory_limit))
    else:
        print("no CUDA device: the GPU rows are skipped", flush=True)
    if args.pbg_python:
        systems.append(base.PyTorchBigGraph(args.pbg_python))
    graphs = [graph for graph in (
        Graph("default", GraphSpec(args.edges, args.nodes, seed=args.seed), 1),
        Graph("large", GraphSpec(args.large_edges, args.large_nodes, seed=args.seed),
              args.large_partitions),
        Graph("kg", GraphSpec(args.kg_edges, args.kg_nodes, seed=args.seed,
                              nodes_per_community=KG_NODES_PER_COMMUNITY,
                              relations=args.kg_relations), 1),
    ) if graph.name in args.graphs]
    rows = []
    for graph in graphs:
        files = ensure_graph(graph.spec, base.OUTPUT / "graphs")
        build = KnowledgeGraphHeldOut.build if graph.knowledge_graph else base.HeldOutSet.build
        held_out = build(files, args.eval_negatives, chunk=1000, seed=args.seed)
        imported = None  # the first import of the graph, which the others copy
        for system in systems:
            rows.append(run_system(system, graph, files, held_out, args,
                                   imported if args.one_import else None))
            folder = base.run_folder(graph.spec.key, system, graph.partitions)
            if imported is None and (folder / "import.json").exists():
                imported = folder
    print_settings(args, graphs)
    if not any(isinstance(system, TesseraGPU) for system in systems):
        print("GPU rows: skipped (no CUDA device on this machine).")
    print_rows(rows, args.peak_tflops)
    print_speedups(rows)
    print_gpu_over_cpu(rows)


def print_settings(args: argparse.Namespace, graphs: list[Graph]) -> None:
    """What each graph trained, how each device ran, and the arithmetic limit's basis."""
    cap, cache = args.gpu_memory_limit, args.partition_cache_gb
    print(f"\nCPU runs: {args.workers} Hogwild workers"
          f"{'; GPU run: float16 embeddings' if args.half_precision else ''}"
          f"{f', GPU memory capped at {cap:.0%}' if cap else ''}"
          f"{f'; partition_cache_gb {cache:g}' if cache else ''}"
          f"{'; background_io' if args.background_io else ''}"
          f". Arithmetic limit at {args.peak_tflops:g} TFLOP/s.")
    if any(not graph.knowledge_graph for graph in graphs):
        config = base.benchmark_config(Path("."), 1, args.lr, args.epochs)
        print(f"Graphs of one relation: {args.epochs} epochs, lr {args.lr}, bench_train.py's "
              f"config; GPU run: batches of {args.gpu_batch_size:,} edges; "
              f"{base.flops_per_edge(config):,} floating-point operations per edge. Held-out "
              "evaluation as in bench_train.py.")
    for graph in graphs:
        if graph.knowledge_graph:
            config = setups.setup_config(Path("."), KG_SETUP, args.lr, args.kg_epochs)
            print(f"Knowledge graph {graph.spec.key}: {graph.spec.relations} relations; "
                  f"bench_setups.py's {KG_SETUP} setup ({config['relations'][0]['operator']}, "
                  f"dynamic relations, {config['loss_fn']}, dimension {config['dimension']}, "
                  f"{config['num_batch_negs']} batch + {config['num_uniform_negs']} uniform "
                  f"negatives, lr {config['lr']}), {args.kg_epochs} epochs; CPU runs: "
                  f"batches of {config['batch_size']:,} edges, GPU run: "
                  f"{args.kg_gpu_batch_size:,}; {base.flops_per_edge(config):,} "
                  "floating-point operations per edge. Held-out evaluation: each test edge's "
                  f"head and tail ranked against {args.eval_negatives} sampled negatives "
                  "(shared per chunk of 1000 test edges, the same for every system) with the "
                  "checkpoint's per-relation operators, nothing filtered.")


if __name__ == "__main__":
    main()
