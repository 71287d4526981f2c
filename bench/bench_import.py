"""Importer benchmark: `tessera import`, and PyTorch-BigGraph's importer where it can run.

A seeded power-law graph (bench/synthetic_graph.py: --edges edges over --nodes nodes) is
written once as a two-column TSV under bench/output/graphs, plus a three-column copy whose
middle column names one of --relations relation types. Each system imports each file once per
partition count, in a child process; the table gives wall time, edges per second, CPU time and
the child's peak RSS (from wait4), as the median of --repeats runs.

    python bench/bench_import.py                               # 10M edges, 1M nodes, 1 and 8
    python bench/bench_import.py --edges 20000 --nodes 2000    # a smoke run, seconds
    python bench/bench_import.py --pbg-python /tmp/pbg-venv/bin/python

PBG runs when `torchbiggraph` is importable here or --pbg-python names a Python that has it
(`pip install torchbiggraph 'setuptools<81'` in an environment of its own).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import multiprocessing
import os
import pprint
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_graph import GraphSpec, ensure_graph  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"
MIB = 2**20


# --- inputs -------------------------------------------------------------------------------

@dataclass(frozen=True)
class EdgeFile:
    """A TSV to import: where the relation column is, if any, and how many relations."""

    label: str
    path: Path
    num_edges: int
    num_relations: int  # 0: two columns, every edge of the one relation

    @property
    def columns(self) -> dict[str, int | None]:
        if self.num_relations:
            return {"lhs": 0, "rel": 1, "rhs": 2}
        return {"lhs": 0, "rel": None, "rhs": 1}

    @property
    def relation_names(self) -> list[str]:
        return [f"r{index}" for index in range(max(self.num_relations, 1))]


def prepare_edge_files(args: argparse.Namespace) -> list[EdgeFile]:
    """The inputs, generated in a child process when missing.

    The benchmark process itself must stay small: a child's peak RSS as the kernel reports it
    starts from the size of the process that forked it.
    """
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(edge_files, args).result()


def edge_files(args: argparse.Namespace) -> list[EdgeFile]:
    graph = ensure_graph(GraphSpec(edges=args.edges, nodes=args.nodes, seed=args.seed),
                         args.output / "graphs")
    files = [EdgeFile("2 columns", graph.train, graph.num_train, 0)]
    if args.relations:
        with_relations = graph.train.with_name(f"train_rel{args.relations}.tsv")
        if not with_relations.exists():
            add_relation_column(graph.train, with_relations, args.relations, args.seed)
        files.append(EdgeFile(f"3 columns, {args.relations} relations", with_relations,
                              graph.num_train, args.relations))
    return files


def add_relation_column(source: Path, target: Path, num_relations: int, seed: int) -> None:
    """Copy a two-column TSV with a seeded random relation name (`r{k}`) between the columns."""
    import numpy as np

    rng = np.random.default_rng(seed)
    names = pa.array([f"r{index}" for index in range(num_relations)])
    partial = target.with_suffix(".partial")
    reader = pa_csv.open_csv(
        source, read_options=pa_csv.ReadOptions(column_names=["lhs", "rhs"]),
        parse_options=pa_csv.ParseOptions(delimiter="\t", quote_char=False),
        convert_options=pa_csv.ConvertOptions(column_types={"lhs": pa.string(),
                                                            "rhs": pa.string()}))
    options = pa_csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    schema = pa.schema([("lhs", pa.string()), ("rel", pa.string()), ("rhs", pa.string())])
    with pa_csv.CSVWriter(partial, schema, write_options=options) as writer:
        for batch in reader:
            relations = names.take(pa.array(rng.integers(0, num_relations, batch.num_rows)))
            writer.write_batch(pa.record_batch([batch.column(0), relations, batch.column(1)],
                                               schema=schema))
    partial.replace(target)


def config_for(folder: Path, edges: EdgeFile, partitions: int) -> dict[str, Any]:
    return {
        "entities": {"node": {"num_partitions": partitions}},
        "relations": [{"name": name, "lhs": "node", "rhs": "node"}
                      for name in edges.relation_names],
        "dimension": 100,
        "entity_path": str(folder / "entities"),
        "edge_paths": [str(folder / "edges")],
        "checkpoint_path": str(folder / "checkpoints"),
    }


# --- the systems ----------------------------------------------------------------------------

class Tessera:
    """`tessera import` through the command line (or, with via_api, `import_edges`)."""

    name = "Tessera"

    def __init__(self, via_api: bool = False) -> None:
        self.via_api = via_api

    def command(self, folder: Path, config: dict[str, Any], edges: EdgeFile) -> list[str]:
        config_path = folder / "config.json"
        config_path.write_text(json.dumps(config, indent=2))
        columns = edges.columns
        if self.via_api:
            return [sys.executable, "-c", API_CALL, str(config_path), str(edges.path),
                    json.dumps({f"{side}_col": index for side, index in columns.items()})]
        flags = ["--lhs-col", str(columns["lhs"]), "--rhs-col", str(columns["rhs"])]
        if columns["rel"] is not None:
            flags += ["--rel-col", str(columns["rel"])]
        return [sys.executable, "-m", "tessera", "import", str(config_path), str(edges.path),
                *flags, "--log-format", "json"]


API_CALL = """
import json, sys
from tessera.config import load_config
from tessera.importing import ImportOptions, import_edges
from tessera.progress import Reporter
summary = import_edges(load_config(sys.argv[1], []), [sys.argv[2]],
                       ImportOptions(**json.loads(sys.argv[3])), Reporter("json"))
"""


class PyTorchBigGraph:
    """PBG's `torchbiggraph_import_from_tsv`, run by a Python that has torchbiggraph."""

    name = "PBG"

    def __init__(self, python: str) -> None:
        self.python = python

    def command(self, folder: Path, config: dict[str, Any], edges: EdgeFile) -> list[str]:
        config_path = folder / "config.py"
        body = pprint.pformat(config, indent=4, width=90).replace("\n", "\n    ")
        config_path.write_text(f"def get_torchbiggraph_config():\n    return {body}\n")
        columns = edges.columns
        flags = ["--lhs-col", str(columns["lhs"]), "--rhs-col", str(columns["rhs"])]
        if columns["rel"] is not None:
            flags += ["--rel-col", str(columns["rel"])]
        return [self.python, "-m", "torchbiggraph.converters.import_from_tsv", *flags,
                str(config_path), str(edges.path)]


System = Tessera | PyTorchBigGraph


# --- measuring ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    system: str
    edges: EdgeFile
    partitions: int
    wall_s: float | None  # None: the run failed
    cpu_s: float | None = None
    peak_rss: int | None = None  # bytes

    @property
    def edges_per_s(self) -> float | None:
        return self.edges.num_edges / self.wall_s if self.wall_s else None


def run_child(command: Sequence[str], log_path: Path) -> tuple[float, float, int]:
    """Run a command to completion: (wall s, CPU s, peak RSS bytes) of that child alone."""
    with log_path.open("w") as log:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{' '.join(command)} failed (log: {log_path}):\n{tail}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def import_once(system: System, edges: EdgeFile, partitions: int, output: Path,
                repeat: int) -> Run:
    folder = output / "imports" / f"{system.name.lower()}_{edges.path.stem}_p{partitions}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = config_for(folder, edges, partitions)
    try:
        wall, cpu, rss = run_child(system.command(folder, config, edges),
                                   folder / f"import_{repeat}.log")
    except RuntimeError as failure:
        print(f"FAILED: {failure}", file=sys.stderr, flush=True)
        return Run(system.name, edges, partitions, None)
    return Run(system.name, edges, partitions, wall, cpu, rss)


# --- reporting ------------------------------------------------------------------------------

COLUMNS = ["input", "partitions", "system", "wall s", "edges/s", "CPU s", "peak RSS (MB)"]


def median_or_none(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def table_row(runs: list[Run]) -> list[str]:
    def show(value: float | None, style: str, scale: float = 1.0) -> str:
        return "failed" if value is None else format(value / scale, style)

    first = runs[0]
    return [first.edges.label, str(first.partitions), first.system,
            show(median_or_none([run.wall_s for run in runs]), ".2f"),
            show(median_or_none([run.edges_per_s for run in runs]), ",.0f"),
            show(median_or_none([run.cpu_s for run in runs]), ".2f"),
            show(median_or_none([run.peak_rss for run in runs]), ",.0f", MIB)]


def print_table(runs: list[Run], repeats: int) -> None:
    groups: dict[tuple[str, int, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.edges.label, run.partitions, run.system), []).append(run)
    print(f"\n{runs[0].edges.num_edges:,} edges; median of {repeats} run(s); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for group in groups.values():
        print("| " + " | ".join(table_row(group)) + " |")


# --- command line ---------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--relations", type=int, default=5,
                        help="relation types of the three-column input (0: two columns only)")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=1, help="runs per system and input")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pbg-python", help="a Python with torchbiggraph installed")
    parser.add_argument("--no-pbg", action="store_true", help="run Tessera alone")
    parser.add_argument("--via-api", action="store_true",
                        help="call tessera.importing.import_edges instead of the command line")
    parser.add_argument("--output", type=Path, default=OUTPUT,
                        help="folder of the cached graphs and the imports")
    return parser.parse_args(argv)


def systems_for(args: argparse.Namespace) -> list[System]:
    systems: list[System] = [Tessera(args.via_api)]
    if args.no_pbg:
        return systems
    if args.pbg_python:
        systems.append(PyTorchBigGraph(args.pbg_python))
    elif importlib.util.find_spec("torchbiggraph") is not None:
        systems.append(PyTorchBigGraph(sys.executable))
    else:
        print("torchbiggraph is not installed here: PBG's importer is skipped "
              "(see --pbg-python)", flush=True)
    return systems


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    systems = systems_for(args)
    files = prepare_edge_files(args)
    runs = []
    for repeat in range(args.repeats):
        for edges in files:
            for partitions in args.partitions:
                for system in systems:
                    print(f"{system.name}: {edges.label}, {partitions} partition(s), run "
                          f"{repeat + 1}/{args.repeats}...", flush=True)
                    runs.append(import_once(system, edges, partitions, args.output, repeat))
    print_table(runs, args.repeats)


if __name__ == "__main__":
    main()
