"""Training benchmark: Tessera side by side with PyTorch-BigGraph (PBG) on a synthetic graph.

For each partition count, both systems import the same TSV with their own importer and train
with the same config (translation, dot, ranking loss, dimension 100, 50 batch + 50 uniform
negatives, 2 Hogwild workers, 5 epochs). Runs alternate between the systems and the tables
report medians of: import and training throughput, peak memory of the training process tree,
and held-out link-prediction quality computed by one evaluator from each system's checkpoint.

    python bench/bench_train.py                                  # Tessera alone
    python bench/bench_train.py --pbg-python /tmp/pbg-venv/bin/python --repeats 3
    python bench/bench_train.py --edges 20000 --nodes 2000 --repeats 1   # a quick check

PBG needs an environment of its own (`pip install torchbiggraph 'setuptools<81'`); its
console scripts are taken from the folder of `--pbg-python`. Data, logs and checkpoints go
to bench/output/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import pprint
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_graph import GraphFiles, GraphSpec, ensure_graph  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"
ENTITY_TYPE = "node"
GB = 1e9


# --- configs ----------------------------------------------------------------------------

def benchmark_config(folder: Path, partitions: int, lr: float, epochs: int) -> dict[str, Any]:
    """The benchmark config of BASELINES.md, with paths inside `folder`."""
    return {
        "entities": {ENTITY_TYPE: {"num_partitions": partitions}},
        "relations": [{"name": "link", "lhs": ENTITY_TYPE, "rhs": ENTITY_TYPE,
                       "operator": "translation"}],
        "dimension": 100, "comparator": "dot", "loss_fn": "ranking", "margin": 0.1,
        "batch_size": 1000, "num_batch_negs": 50, "num_uniform_negs": 50, "lr": lr,
        "workers": 2, "num_epochs": epochs, "eval_fraction": 0.0, "hogwild_delay": 0.0,
        "entity_path": str(folder / "entities"),
        "edge_paths": [str(folder / "edges")],
        "checkpoint_path": str(folder / "checkpoints"),
    }


def write_json_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config, indent=2))
    return path


def write_python_config(path: Path, config: dict[str, Any]) -> Path:
    """A PBG-style config module: a function returning the config dict."""
    body = pprint.pformat(config, indent=4, width=90).replace("\n", "\n    ")
    path.write_text(f"def get_torchbiggraph_config():\n    return {body}\n")
    return path


# --- the two systems --------------------------------------------------------------------

class Tessera:
    """Tessera through its command line, in this Python environment."""

    name = "Tessera"

    def write_config(self, folder: Path, config: dict[str, Any]) -> Path:
        return write_json_config(folder / "config.json", config)

    def import_command(self, config: Path, tsv: Path) -> list[str]:
        return [sys.executable, "-m", "tessera", "import", str(config), str(tsv),
                "--lhs-col", "0", "--rhs-col", "1", "--log-format", "json"]

    def train_command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "tessera", "train", str(config), "--log-format", "json"]

    def loop_rate(self, log: str, folder: Path) -> float | None:
        """Edges over the compute time of all buckets (the `seconds` of each bucket in
        training_stats.json: workers' time, as PBG's per-bucket lines count it)."""
        stats_file = folder / "checkpoints" / "training_stats.json"
        if not stats_file.exists():
            return None
        buckets = [json.loads(line) for line in stats_file.read_text().splitlines()]
        seconds = sum(b["seconds"] for b in buckets if "seconds" in b)
        edges = sum(b["stats"]["count"] for b in buckets if "seconds" in b)
        return edges / seconds if seconds else None


class PyTorchBigGraph:
    """PBG's own console scripts, from the environment of `python`."""

    name = "PBG"
    # One line per trained bucket: "bucket 1 / 4 : Processed 500000 edges in 2.61 s ..."
    BUCKET_LINE = re.compile(r"Processed (\d+) edges in ([0-9.]+) s")

    def __init__(self, python: str, preload: str | None = None) -> None:
        self.bin = Path(python).parent  # not resolved: a venv's python is a symlink
        self.preload = preload  # a library for LD_PRELOAD when training (None: none)

    def write_config(self, folder: Path, config: dict[str, Any]) -> Path:
        return write_python_config(folder / "config.py", config)

    def import_command(self, config: Path, tsv: Path) -> list[str]:
        return [str(self.bin / "torchbiggraph_import_from_tsv"), "--lhs-col", "0",
                "--rhs-col", "1", str(config), str(tsv)]

    def train_command(self, config: Path) -> list[str]:
        preload = ["env", f"LD_PRELOAD={self.preload}"] if self.preload else []
        return [*preload, str(self.bin / "torchbiggraph_train"), str(config)]

    def loop_rate(self, log: str, folder: Path) -> float | None:
        """Edges over the compute time of all buckets (PBG's own per-bucket timing)."""
        buckets = [(int(n), float(s)) for n, s in self.BUCKET_LINE.findall(log)]
        seconds = sum(s for _, s in buckets)
        return sum(n for n, _ in buckets) / seconds if seconds else None


System = Tessera | PyTorchBigGraph


# --- running a command and watching its memory ------------------------------------------

@dataclass(frozen=True)
class Measurement:
    wall_s: float
    peak_tree_pss: int  # bytes: the largest sum of PSS over the process and its descendants
    largest_rss: int  # bytes: the largest RSS any single process of the tree reached
    log: str


class StepFailed(Exception):
    """A command exited with an error, or its output could not be evaluated."""


def process_tree(root: int) -> list[int]:
    """`root` and all its live descendants, from the parent ids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


@dataclass
class ProcessMemory:
    """One process's memory: PSS outside shared-memory files, RSS, and the resident bytes of
    each shared-memory file it maps (by inode)."""

    private_pss: int = 0
    rss: int = 0
    shared_files: dict[str, int] = field(default_factory=dict)


SHARED_MEMORY_FILES = ("/dev/shm/", "/memfd:", "/SYSV")
MAPPING_LINE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ (\S+) (\d+)\s*(.*)$")


def process_memory(pid: int) -> ProcessMemory:
    """The process's memory from /proc/PID/smaps; empty if it is gone."""
    try:
        smaps = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return ProcessMemory()
    memory, shared_file = ProcessMemory(), None
    for line in smaps.splitlines():
        mapping = MAPPING_LINE.match(line)
        if mapping:
            device, inode, name = mapping.groups()
            shared_file = f"{device}:{inode}" if name.startswith(SHARED_MEMORY_FILES) else None
        elif line.startswith("Rss:"):
            size = int(line.split()[1]) * 1024
            memory.rss += size
            if shared_file:
                memory.shared_files[shared_file] = memory.shared_files.get(shared_file, 0) + size
        elif line.startswith("Pss:") and not shared_file:
            memory.private_pss += int(line.split()[1]) * 1024
    return memory


def tree_memory(processes: list[ProcessMemory]) -> int:
    """Bytes the tree holds: each process's PSS outside shared-memory files, plus every
    shared-memory file once, at the most any process of the tree has resident.

    Summing the processes' PSS would count a file being mapped, during a swap, up to once
    per process: PSS splits a page among the processes mapping it when each is read, and
    the processes are read one after the other.
    """
    largest: dict[str, int] = {}
    for memory in processes:
        for key, size in memory.shared_files.items():
            largest[key] = max(largest.get(key, 0), size)
    return sum(memory.private_pss for memory in processes) + sum(largest.values())


class TreeMemorySampler(threading.Thread):
    """Samples the process tree's memory every `interval` seconds and keeps the maxima."""

    def __init__(self, root: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_tree_pss = self.largest_rss = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(self.interval):
                return

    def sample(self) -> None:
        processes = [process_memory(pid) for pid in process_tree(self.root)]
        self.peak_tree_pss = max(self.peak_tree_pss, tree_memory(processes))
        self.largest_rss = max([self.largest_rss, *(memory.rss for memory in processes)])

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def run_measured(command: Sequence[str], log_path: Path, interval: float = 0.5) -> Measurement:
    """Run `command` (output to `log_path`) and measure its wall time and memory (sampled
    every `interval` seconds)."""
    with log_path.open("w") as log:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeMemorySampler(process.pid, interval)
        sampler.start()
        # wait4 also gives the kernel's exact peak RSS of the process and its reaped children.
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
    text = log_path.read_text(errors="replace")
    if process.returncode != 0:
        tail = "\n".join(text.splitlines()[-30:])
        raise StepFailed(f"{' '.join(command)} exited with {process.returncode} "
                            f"(log: {log_path}):\n{tail}")
    return Measurement(wall, sampler.peak_tree_pss,
                       max(sampler.largest_rss, usage.ru_maxrss * 1024), text)


# --- held-out evaluation ----------------------------------------------------------------

@dataclass(frozen=True)
class HeldOutSet:
    """Test edges and sampled negatives, as positions in the sorted list of node names."""

    names: list[str]
    heads: np.ndarray
    tails: np.ndarray
    negative_heads: np.ndarray  # (number of chunks, negatives): one set per chunk of edges
    negative_tails: np.ndarray
    chunk: int

    @classmethod
    def build(cls, graph: GraphFiles, negatives: int, chunk: int, seed: int) -> HeldOutSet:
        names = sorted(graph.nodes.read_text().split())
        position = {name: i for i, name in enumerate(names)}
        pairs = [line.split("\t") for line in graph.test.read_text().splitlines()]
        heads = np.array([position[head] for head, _ in pairs])
        tails = np.array([position[tail] for _, tail in pairs])
        rng = np.random.default_rng(seed)
        num_chunks = -(-len(pairs) // chunk)
        return cls(names, heads, tails, rng.integers(len(names), size=(num_chunks, negatives)),
                   rng.integers(len(names), size=(num_chunks, negatives)), chunk)


def load_checkpoint(folder: Path, partitions: int) -> tuple[dict[str, int], torch.Tensor,
                                                             torch.Tensor]:
    """(name -> row, embeddings of all partitions, translation) of the latest checkpoint.

    Rows are the partitions' embeddings one after the other; the global embedding of the
    type, if the model has one, is added, as both systems do before applying the operator.
    """
    import h5py
    import torch

    checkpoints = folder / "checkpoints"
    version = int((checkpoints / "checkpoint_version.txt").read_text().strip())
    rows: dict[str, int] = {}
    tables = []
    for part in range(partitions):
        names = json.loads((folder / "entities" /
                            f"entity_names_{ENTITY_TYPE}_{part}.json").read_text())
        first_row = len(rows)
        rows.update((name, first_row + offset) for offset, name in enumerate(names))
        with h5py.File(checkpoints / f"embeddings_{ENTITY_TYPE}_{part}.v{version}.h5") as file:
            tables.append(torch.from_numpy(file["embeddings"][...]).float())
    with h5py.File(checkpoints / f"model.v{version}.h5") as file:
        translation = torch.from_numpy(file["model/relations/0/operator/rhs/translation"][...])
        global_key = f"model/entities/{ENTITY_TYPE}/global_embedding"
        shift = torch.from_numpy(file[global_key][...]) if global_key in file else 0.0
    return rows, torch.cat(tables) + shift, translation.float()


def held_out_metrics(folder: Path, partitions: int, held_out: HeldOutSet) -> dict[str, float]:
    """MRR and Hits@10 of dot(head, tail + translation) against the sampled negatives."""
    import torch

    rows, embeddings, translation = load_checkpoint(folder, partitions)
    table = embeddings[torch.tensor([rows[name] for name in held_out.names])]
    ranks = []
    for index, start in enumerate(range(0, held_out.heads.size, held_out.chunk)):
        heads = table[held_out.heads[start:start + held_out.chunk]]
        tails = table[held_out.tails[start:start + held_out.chunk]] + translation
        positive = (heads * tails).sum(1, keepdim=True)
        tail_scores = heads @ (table[held_out.negative_tails[index]] + translation).T
        head_scores = tails @ table[held_out.negative_heads[index]].T
        # Ties do not count against the positive: a sampled negative may be the true entity.
        ranks.append(1 + (tail_scores > positive).sum(1))
        ranks.append(1 + (head_scores > positive).sum(1))
    rank = torch.cat(ranks).double()
    return {"mrr": float((1 / rank).mean()), "hits10": float((rank <= 10).double().mean())}


def in_fresh_process(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`, run in a spawned process that ends with it.

    torch and h5py are loaded there, never in the benchmark's own process: pages of a library
    it had mapped would be shared with the trainers it measures, and PSS would charge the
    benchmark for part of them (for Tessera only: PBG loads its own copies).
    """
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


# --- the benchmark ----------------------------------------------------------------------

@dataclass(frozen=True)
class RunResult:
    system: str
    partitions: int
    import_rate: float | None
    wall_s: float | None = None
    process_rate: float | None = None
    loop_rate: float | None = None
    peak_tree_pss: int | None = None
    largest_rss: int | None = None
    mrr: float | None = None
    hits10: float | None = None


def num_partitions(config: dict[str, Any]) -> int:
    return int(config["entities"][ENTITY_TYPE]["num_partitions"])


def run_folder(graph_key: str, system: System, partitions: int) -> Path:
    return OUTPUT / "runs" / graph_key / f"{system.name.lower()}_p{partitions}"


# The config keys an import depends on: another lr or epoch count reuses the same import.
IMPORT_KEYS = ("entities", "relations", "entity_path", "edge_paths")


def import_graph(system: System, folder: Path, config: dict[str, Any], graph: GraphFiles,
                 reuse: bool) -> float:
    """Import the training TSV from scratch (or reuse a finished import of the same config);
    returns edges per second."""
    record = folder / "import.json"  # written once an import succeeded
    layout = {key: config[key] for key in IMPORT_KEYS}
    if reuse and record.exists() and json.loads(record.read_text())["layout"] == layout:
        return float(json.loads(record.read_text())["edges_per_s"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config_path = system.write_config(folder, config)
    measured = run_measured(system.import_command(config_path, graph.train),
                            folder / "import.log")
    rate = graph.num_train / measured.wall_s
    record.write_text(json.dumps({"edges_per_s": rate, "layout": layout}))
    return rate


def from_scratch(system: System, folder: Path, config: dict[str, Any]) -> list[str]:
    """The train command of `config` in `folder`, with no checkpoint left to resume from (a
    finished one would make the run exit at once)."""
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    return system.train_command(system.write_config(folder, config))


def train_once(system: System, folder: Path, config: dict[str, Any], graph: GraphFiles,
               held_out: HeldOutSet, repeat: int, import_rate: float) -> RunResult:
    """Train from scratch, then evaluate the final checkpoint."""
    measured = run_measured(from_scratch(system, folder, config),
                            folder / f"train_{repeat}.log")
    try:
        metrics = in_fresh_process(held_out_metrics, folder, num_partitions(config), held_out)
    except (KeyError, OSError) as error:  # a missing entity or checkpoint file
        raise StepFailed(f"evaluating the checkpoint in {folder}: {error!r}") from error
    return RunResult(system.name, num_partitions(config), import_rate, measured.wall_s,
                     graph.num_train * config["num_epochs"] / measured.wall_s,
                     system.loop_rate(measured.log, folder),
                     measured.peak_tree_pss, measured.largest_rss, metrics["mrr"],
                     metrics["hits10"])


def run_benchmark(args: argparse.Namespace, systems: list[System], graph: GraphFiles,
                  graph_key: str, held_out: HeldOutSet) -> list[RunResult]:
    """Import once per system and partition count, then alternate the training runs."""
    import_rates: dict[tuple[str, int], float | None] = {}
    results: list[RunResult] = []
    for count in args.partitions:
        for system in systems:
            folder = run_folder(graph_key, system, count)
            config = benchmark_config(folder, count, args.lr, args.epochs)
            print(f"importing for {system.name}, {count} partition(s)...", flush=True)
            import_rates[system.name, count] = attempt(
                import_graph, system, folder, config, graph, args.reuse_imports)
    for repeat in range(args.repeats):
        order = systems if repeat % 2 == 0 else systems[::-1]
        for count in args.partitions:
            for system in order:
                rate = import_rates[system.name, count]
                if rate is None:
                    results.append(RunResult(system.name, count, None))
                    continue
                print(f"training {system.name}, {count} partition(s), run {repeat + 1}"
                      f"/{args.repeats}...", flush=True)
                folder = run_folder(graph_key, system, count)
                config = benchmark_config(folder, count, args.lr, args.epochs)
                results.append(attempt(train_once, system, folder, config, graph, held_out,
                                       repeat, rate) or RunResult(system.name, count, rate))
    return results


def attempt(step: Callable[..., Any], *args: Any) -> Any:
    """Run one step; a failed command is reported and yields None, the benchmark goes on."""
    try:
        return step(*args)
    except StepFailed as failure:
        print(f"FAILED: {failure}", file=sys.stderr, flush=True)
        return None


# --- reporting --------------------------------------------------------------------------

COLUMNS = ["system", "partitions", "import edges/s", "train wall s", "edges/s (whole process)",
           "edges/s (training loop)", "peak PSS of tree (GB)", "largest process RSS (GB)",
           "held-out MRR", "Hits@10"]


def median(values: list[Any]) -> Any:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def table_row(group: list[RunResult]) -> list[str]:
    """Medians over the runs of one (system, partitions) group, formatted."""
    def field(name: str) -> Any:
        return median([getattr(result, name) for result in group])

    trained = field("wall_s") is not None

    def show(value: Any, style: str, scale: float = 1.0) -> str:
        if value is None:
            return "n/a" if trained else "failed"
        return format(value / scale, style)

    return [group[0].system, str(group[0].partitions),
            show(field("import_rate"), ",.0f"), show(field("wall_s"), ".1f"),
            show(field("process_rate"), ",.0f"), show(field("loop_rate"), ",.0f"),
            show(field("peak_tree_pss"), ".2f", GB), show(field("largest_rss"), ".2f", GB),
            show(field("mrr"), ".3f"), show(field("hits10"), ".3f")]


def print_table(rows: list[list[str]]) -> None:
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def print_results(results: list[RunResult], repeats: int) -> None:
    groups: dict[tuple[int, str], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.partitions, result.system), []).append(result)
    print(f"\nMedians of {repeats} run(s):\n")
    print_table([table_row(group) for group in groups.values()])
    if repeats > 1:
        print("\nEvery run:\n")
        print_table([table_row([result]) for result in results])


def matmul_gflops(size: int = 2048, repeats: int = 5) -> tuple[float, int]:
    """float32 matrix-product throughput of this machine, as a reference for the rates, and
    the threads torch used (measured as Tessera's trainers run it: `tessera` imported first,
    so that MKL picks its code by the CPU's features)."""
    import tessera.mkl_dispatch  # noqa: F401

    # isort: split
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm-up
    started = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    return 2 * size ** 3 * repeats / (time.perf_counter() - started) / 1e9, torch.get_num_threads()


def flops_per_edge(config: dict[str, Any]) -> int:
    """Floating-point operations one edge costs in matrix products, forward and backward.

    Each side scores the edge against its M negatives (batch + uniform) with d-dimensional
    inner products, 2 M d operations; backward takes two products of the same size (to the
    positives and to the negatives): 3 x 2 M d per side, both sides corrupted.
    """
    negatives = config["num_batch_negs"] + config["num_uniform_negs"]
    return 2 * 3 * 2 * negatives * config["dimension"]


def memory_bound(nodes: int, edges: int, partitions: int, dimension: int,
                 look_ahead: bool = True) -> int:
    """Bytes a trainer cannot do without: the embeddings and row-wise Adagrad sums (float32)
    of the current bucket's two partitions and, with `look_ahead`, of the next bucket's two,
    read ahead (fewer when there are fewer partitions), and the largest bucket's edges (two
    int64 ids and a relation id per edge, all in one chunk)."""
    rows = -(-nodes // partitions)
    held = min(partitions, 4 if look_ahead else 2)
    bucket_edges = -(-edges // partitions ** 2)
    return held * rows * (dimension + 1) * 4 + bucket_edges * 3 * 8


# A graph whose embeddings and buckets weigh little, with just enough edges that in one
# partition each of 2 workers trains a full compiled call (32 batches of 1000 edges): what a
# run on it holds beyond its own partitions and bucket (the interpreter, torch, the trainer's
# code, per-process heaps, each worker's batch buffers) is a fixed cost. The fewer its edges,
# the less of the bound's bucket (24 bytes an edge) that Tessera leaves unused (it holds 16)
# is counted as fixed cost.
FIXED_COST_GRAPH = GraphSpec(edges=64_000, nodes=2_000)


def fixed_cost_pss(system: System, partitions: int, lr: float, epochs: int, seed: int,
                   look_ahead: bool = True) -> int | None:
    """Peak PSS of the same training on FIXED_COST_GRAPH in `partitions` partitions, less
    that graph's own bound (`memory_bound`): the part of a run's memory that does not grow
    with the graph (as many epochs, so heaps reach their steady size)."""
    spec = replace(FIXED_COST_GRAPH, seed=seed)
    graph = ensure_graph(spec, OUTPUT / "graphs")
    folder = run_folder(spec.key, system, partitions)
    config = benchmark_config(folder, partitions, lr, epochs)
    # Its import is not measured: one finished with the same layout is reused.
    if attempt(import_graph, system, folder, config, graph, True) is None:
        return None
    # Sampled more often than the long runs: this run is seconds long, its peaks brief.
    measured = attempt(run_measured, from_scratch(system, folder, config),
                       folder / "train.log", 0.02)
    if measured is None:
        return None
    own = memory_bound(spec.nodes, graph.num_train, partitions, config["dimension"], look_ahead)
    return measured.peak_tree_pss - own


def print_memory_bound(results: list[RunResult], fixed: dict[tuple[str, int], int | None],
                       nodes: int, edges: int, dimension: int) -> None:
    """Each system's peak beside the bound, split into its fixed cost (the same run on a small
    graph) and the rest: the memory that grows with the graph, which the bound is about."""
    names = sorted({name for name, _ in fixed}, key=["Tessera", "PBG"].index)
    print("\n| partitions | bound: 2 partitions + Adagrad + 1 bucket (GB) | "
          + " | ".join(f"{name} peak PSS | {name} fixed cost | {name} peak - fixed cost"
                       for name in names) + " |")
    print("|---|---|" + "---|---|---|" * len(names))
    for count in sorted({result.partitions for result in results}):
        cells = [str(count), f"{memory_bound(nodes, edges, count, dimension) / GB:.2f}"]
        for name in names:
            peak = median([r.peak_tree_pss for r in results if r.system == name
                           and r.partitions == count and r.peak_tree_pss])
            base = fixed.get((name, count))
            grown = peak - base if peak and base else None
            cells += ["-" if value is None else f"{value / GB:.2f}"
                      for value in (peak, base, grown)]
        print("| " + " | ".join(cells) + " |")
    print(f"(GB; fixed cost: peak PSS of the same config and epochs on a graph of "
          f"{FIXED_COST_GRAPH.edges:,} edges and {FIXED_COST_GRAPH.nodes:,} nodes, less that "
          "graph's own bound.)")


def print_comparison(results: list[RunResult], gflops: float, edge_flops: int) -> None:
    """Tessera against PBG and against the arithmetic limit, per partition count (medians)."""
    limit = gflops * 1e9 / edge_flops
    print(f"\nArithmetic limit: {edge_flops:,} floating-point operations per edge in matrix "
          f"products at {gflops:.1f} GFLOP/s = {limit:,.0f} edges/s.\n")
    print("| partitions | rate | Tessera edges/s | PBG edges/s | Tessera / PBG "
          "| Tessera / limit |")
    print("|---|---|---|---|---|---|")
    for count in sorted({result.partitions for result in results}):
        for label, name in (("training loop", "loop_rate"), ("whole process", "process_rate")):
            rates = {system: median([getattr(r, name) for r in results
                                     if r.system == system and r.partitions == count])
                     for system in ("Tessera", "PBG")}
            tessera, pbg = rates["Tessera"], rates["PBG"]
            ratio = f"{tessera / pbg:.2f}x" if tessera and pbg else "n/a"
            share = f"{tessera / limit:.1%}" if tessera else "n/a"
            shown = ["-" if rate is None else f"{rate:,.0f}" for rate in (tessera, pbg)]
            print(f"| {count} | {label} | {shown[0]} | {shown[1]} | {ratio} | {share} |")


# --- command line -----------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=2_000_000, help="training edges")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--large", action="store_true",
                        help="the memory benchmark: 10M edges, 1M nodes, 8 partitions")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="training runs per system")
    parser.add_argument("--pbg-python", help="Python of an environment with torchbiggraph")
    parser.add_argument("--no-tessera", action="store_true", help="run PBG alone")
    parser.add_argument("--reuse-imports", action="store_true",
                        help="skip an import already done with the same config (its edges/s "
                        "is the one measured then)")
    parser.add_argument("--eval-negatives", type=int, default=1000,
                        help="uniform negatives per side for each chunk of test edges")
    parser.add_argument("--seed", type=int, default=0, help="seed of the graph and negatives")
    args = parser.parse_args(argv)
    if args.large:
        args.edges, args.nodes, args.partitions = 10_000_000, 1_000_000, [8]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    systems: list[System] = [] if args.no_tessera else [Tessera()]
    if args.pbg_python:
        systems.append(PyTorchBigGraph(args.pbg_python))
    if not systems:
        raise SystemExit("nothing to run: give --pbg-python or drop --no-tessera")
    spec = GraphSpec(args.edges, args.nodes, seed=args.seed)
    print(f"generating (or reusing) the graph {spec.key}...", flush=True)
    graph = ensure_graph(spec, OUTPUT / "graphs")
    held_out = HeldOutSet.build(graph, args.eval_negatives, chunk=1000, seed=args.seed)
    gflops, threads = in_fresh_process(matmul_gflops)
    results = run_benchmark(args, systems, graph, spec.key, held_out)
    fixed = {(system.name, count): fixed_cost_pss(system, count, args.lr, args.epochs, args.seed)
             for system in systems for count in args.partitions}
    print(f"\nGraph: {graph.num_train:,} training edges, {len(held_out.names):,} nodes, "
          f"{held_out.heads.size:,} held-out test edges; {args.epochs} epochs, lr {args.lr}.")
    print(f"Held-out evaluation: score dot(head, tail + translation); each test edge ranked "
          f"against {args.eval_negatives} uniformly sampled negative tails and "
          f"{args.eval_negatives} negative heads (from all nodes, shared per chunk of 1000 "
          "test edges, same for both systems), nothing filtered, ties in favour of the "
          "positive; MRR and Hits@10 over both sides.")
    print(f"Machine: {os.cpu_count()} cores; float32 torch.mm 2048x2048 at {gflops:.1f} "
          f"GFLOP/s with {threads} threads.")
    print("Columns: edges/s (whole process) = training edges x epochs / wall time of the train "
          "command; edges/s (training loop) = edges over the compute time of the buckets, as each "
          "trainer times them (Tessera: `seconds` in training_stats.json; PBG: its per-bucket "
          "log lines), loading and checkpoints excluded for both; memory sampled every 0.5 s from "
          "/proc/PID/smaps (PSS, shared-memory files counted once at their largest resident "
          "size); the import is timed once per system and partition count.")
    print_results(results, args.repeats)
    config = benchmark_config(OUTPUT, 1, args.lr, args.epochs)
    print_comparison(results, gflops, flops_per_edge(config))
    print_memory_bound(results, fixed, args.nodes, graph.num_train, config["dimension"])


if __name__ == "__main__":
    main()
