"""Every PBG example setup, Tessera side by side with PyTorch-BigGraph (PBG) 1.0, in one table.

Each setup is bench_train.py's benchmark config with a few keys changed: PBG's default
(translation, dot, ranking, batch + uniform negatives), the FB15k-style knowledge-graph setup
(complex_diagonal, dynamic relations, softmax, dimension 200, 1000 batch + 1000 uniform
negatives), logistic loss, the `cos` and `l2` comparators, `all_negs`, and an N3 regularizer.
For each, both systems import the same synthetic TSV with their own importer and train from
scratch, alternating, `--repeats` times; the table gives medians of the training loop's and
the whole process's edges/s, their ratio, the loop's share of the arithmetic limit (the
floating-point operations of the score and gradient matrix products per edge, at the rate a
one-thread and an all-thread float32 matrix product reach on this machine), and the held-out
MRR of each system's checkpoint scored by one evaluator (this model's operator and comparator,
sampled negatives, nothing filtered). PBG 1.0 has no regularizer (`regularization_coef` is
an unknown key there): that row has Tessera's figures only.

    python bench/bench_setups.py --pbg-python /tmp/pbg-venv/bin/python --repeats 3
    python bench/bench_setups.py --setups fb15k --edges 20000 --repeats 1   # a quick check

Tessera lets MKL pick its code by the CPU's features (`tessera.mkl_dispatch`); PBG runs as
shipped, or with the same answer preloaded under `--pbg-mkl-any-cpu`, to show how much of a
lead is MKL's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import (  # noqa: E402
    OUTPUT,
    HeldOutSet,
    PyTorchBigGraph,
    System,
    Tessera,
    attempt,
    benchmark_config,
    from_scratch,
    import_graph,
    in_fresh_process,
    run_measured,
)
from synthetic_graph import GraphSpec, ensure_graph  # noqa: E402

import tessera.mkl_dispatch  # noqa: E402  (before torch: the limit is measured with MKL's best code)

RELATION_KEYS = ("operator", "all_negs")  # setup keys that belong to the relation
SETUPS: dict[str, dict[str, Any]] = {
    "default": {},
    "fb15k": {"operator": "complex_diagonal", "dynamic_relations": True, "global_emb": False,
              "loss_fn": "softmax", "dimension": 200, "num_batch_negs": 1000,
              "num_uniform_negs": 1000, "lr": 0.1},
    "logistic": {"loss_fn": "logistic"},
    "cos": {"comparator": "cos"},
    "l2": {"comparator": "l2"},
    "all_negs": {"all_negs": True, "num_epochs": 1},
    "regularizer": {"operator": "complex_diagonal", "regularization_coef": 1e-3},
}


class WithRelations:
    """A system importing a copy of the TSV with a relation column (`link` on every edge):
    PBG's importer needs one for dynamic relations."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.name = system.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)

    def import_command(self, config: Path, tsv: Path) -> list[str]:
        with_relations = tsv.with_name(tsv.stem + "_rel.tsv")
        if not with_relations.exists():
            lines = tsv.read_text().splitlines()
            with_relations.write_text("".join(f"{line}\tlink\n" for line in lines))
        return [*self.system.import_command(config, with_relations), "--rel-col", "2"]


def setup_config(folder: Path, setup: str, lr: float, epochs: int) -> dict[str, Any]:
    config = benchmark_config(folder, 1, lr, epochs)
    for key, value in SETUPS[setup].items():
        if key in RELATION_KEYS:
            config["relations"][0][key] = value
        else:
            config[key] = value
    return config


def flops_per_edge(config: dict[str, Any], num_nodes: int) -> int:
    """Floating-point operations of one edge's matrix products, forward and backward: each
    side scores the edge against its M negatives (2 M d), and backward takes two products of
    that size (to the queries and to the negatives)."""
    negatives = num_nodes if config["relations"][0].get("all_negs") \
        else config["num_batch_negs"] + config["num_uniform_negs"]
    return 2 * 3 * 2 * negatives * config["dimension"]


def matmul_rates(size: int = 1024, repeats: int = 20) -> tuple[float, float]:
    """float32 GFLOP/s of torch.mm on one thread and on all of them (the limit is the larger
    of the latter and the former times the cores: each Hogwild worker runs one thread)."""
    import torch

    rates = []
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        a, b = torch.randn(size, size), torch.randn(size, size)
        torch.mm(a, b)
        started = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        rates.append(2 * size ** 3 * repeats / (time.perf_counter() - started) / 1e9)
    return rates[0], rates[1]


def held_out_mrr(folder: Path, config: dict[str, Any], held_out: HeldOutSet) -> float:
    """MRR of the checkpoint, with the model's own operator and comparator (both systems
    write the same checkpoint layout): each test edge against the sampled heads and tails."""
    import h5py
    import torch

    from tessera.config import parse_config
    from tessera.model import EmbeddingModel

    rows, embeddings = load_table(folder)
    table = embeddings[torch.tensor([rows[name] for name in held_out.names])]
    # The global embedding is already added to the rows.
    model = EmbeddingModel(parse_config({**config, "global_emb": False}), 1)
    version = int((folder / "checkpoints" / "checkpoint_version.txt").read_text())
    with h5py.File(folder / "checkpoints" / f"model.v{version}.h5") as file:
        state = {key: torch.from_numpy(file[f"model/{name}"][...])
                 for key, name in model.public_parameter_names().items()}
    model.load_state_dict(state)
    ranks = []
    with torch.no_grad():
        for index, start in enumerate(range(0, held_out.heads.size, held_out.chunk)):
            u = table[held_out.heads[start:start + held_out.chunk]]
            v = table[held_out.tails[start:start + held_out.chunk]]
            heads, tails = (table[negs[index]] for negs in (held_out.negative_heads,
                                                             held_out.negative_tails))
            ranks += side_ranks(model, u, v, heads, tails)
    rank = torch.cat(ranks).double()
    return float((1 / rank).mean())


def side_ranks(model: Any, u: Any, v: Any, heads: Any, tails: Any) -> list[Any]:
    """Ranks of the positives among their corrupted heads, then tails (ties favour them)."""
    import torch

    prepare, compare = model.comparator.prepare, model.comparator
    none = u.new_empty((1, 0, u.shape[1]))
    if model.config.dynamic_relations:
        rel = torch.zeros(len(u), dtype=torch.long)
        h_v, g_u = model.rhs_operators[0](v, rel), model.lhs_operators[0](u, rel)
        pos_l, lhs_neg, _ = compare(prepare(u)[None], prepare(h_v)[None], prepare(heads)[None],
                                    none)
        pos_r, _, rhs_neg = compare(prepare(g_u)[None], prepare(v)[None], none,
                                    prepare(tails)[None])
    else:
        f = model.rhs_operators[0]
        pos_l, lhs_neg, rhs_neg = compare(prepare(u)[None], prepare(f(v))[None],
                                          prepare(heads)[None], prepare(f(tails))[None])
        pos_r = pos_l
    return [1 + (lhs_neg[0] > pos_l[0, :, None]).sum(1),
            1 + (rhs_neg[0] > pos_r[0, :, None]).sum(1)]


def load_table(folder: Path) -> tuple[dict[str, int], Any]:
    """(name -> row, embeddings plus the global embedding) of the one partition."""
    import h5py
    import torch

    version = int((folder / "checkpoints" / "checkpoint_version.txt").read_text())
    names = json.loads((folder / "entities" / "entity_names_node_0.json").read_text())
    with h5py.File(folder / "checkpoints" / f"embeddings_node_0.v{version}.h5") as file:
        table = torch.from_numpy(file["embeddings"][...]).float()
    with h5py.File(folder / "checkpoints" / f"model.v{version}.h5") as file:
        key = "model/entities/node/global_embedding"
        shift = torch.from_numpy(file[key][...]) if key in file else 0.0
    return {name: row for row, name in enumerate(names)}, table + shift


def train_once(system: System, folder: Path, config: dict[str, Any], num_edges: int,
               held_out: HeldOutSet, repeat: int) -> dict[str, float | None]:
    measured = run_measured(from_scratch(system, folder, config), folder / f"train_{repeat}.log")
    mrr = attempt(in_fresh_process, held_out_mrr, folder, config, held_out)
    return {"loop": system.loop_rate(measured.log, folder),
            "process": num_edges * config["num_epochs"] / measured.wall_s, "mrr": mrr}


def median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def print_table(results: dict[tuple[str, str], list[dict[str, Any]]], setups: list[str],
                systems: list[System], flops: dict[str, int], rates: tuple[float, float]
                ) -> None:
    one_thread, all_threads = rates
    limit = max(all_threads, one_thread * (os.cpu_count() or 1))
    print(f"\nArithmetic limit: float32 torch.mm 1024x1024 at {one_thread:.0f} GFLOP/s on one "
          f"thread ({all_threads:.0f} on all threads), {limit:.0f} GFLOP/s on "
          f"{os.cpu_count()} cores; share = loop edges/s x FLOPs per edge / that limit.\n")
    names = [system.name for system in systems]
    print("| setup | FLOPs/edge | " + " | ".join(
        f"{n} loop edges/s | {n} process edges/s | {n} share | {n} MRR" for n in names)
        + (" | loop ratio | process ratio |" if len(names) == 2 else " |"))
    print("|---|---|" + "---|---|---|---|" * len(names) + ("---|---|" if len(names) == 2 else ""))
    for setup in setups:
        cells, medians = [setup, f"{flops[setup] / 1e6:.2f}M"], {}
        for name in names:
            runs = results.get((setup, name), [])
            loop, process, mrr = (median([run[key] for run in runs])
                                  for key in ("loop", "process", "mrr"))
            medians[name] = (loop, process)
            share = loop * flops[setup] / (limit * 1e9) if loop else None
            cells += ["-" if value is None else format(value, style) for value, style in
                      ((loop, ",.0f"), (process, ",.0f"), (share, ".0%"), (mrr, ".3f"))]
        if len(names) == 2:
            (ours_loop, ours_process), (their_loop, their_process) = medians.values()
            cells += [f"{ours / theirs:.2f}x" if ours and theirs else "-" for ours, theirs in
                      ((ours_loop, their_loop), (ours_process, their_process))]
        print("| " + " | ".join(cells) + " |")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=200_000, help="training edges")
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=3, help="unless the setup says")
    parser.add_argument("--lr", type=float, default=0.01, help="unless the setup says")
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=list(SETUPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pbg-python", help="Python of an environment with torchbiggraph")
    parser.add_argument("--pbg-mkl-any-cpu", action="store_true",
                        help="train PBG with MKL choosing its code by the CPU's features, "
                             "as Tessera does (TESSERA_MKL_ANY_CPU)")
    parser.add_argument("--eval-negatives", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    systems: list[System] = [Tessera()]
    if args.pbg_python:
        # Tessera's kernels library answers MKL's vendor check (`tessera.mkl_dispatch`).
        preload = tessera.mkl_dispatch.library() if args.pbg_mkl_any_cpu else None
        systems.append(PyTorchBigGraph(args.pbg_python, preload))
    spec = GraphSpec(args.edges, args.nodes, seed=args.seed)
    graph = ensure_graph(spec, OUTPUT / "graphs")
    held_out = HeldOutSet.build(graph, args.eval_negatives, chunk=1000, seed=args.seed)
    rates = in_fresh_process(matmul_rates)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    flops = {}
    for setup in args.setups:
        folders = {s.name: OUTPUT / "setups" / spec.key / setup / s.name.lower() for s in systems}
        configs = {s.name: setup_config(folders[s.name], setup, args.lr, args.epochs)
                   for s in systems}
        flops[setup] = flops_per_edge(configs["Tessera"], len(held_out.names))
        dynamic = configs["Tessera"].get("dynamic_relations", False)
        importers = [WithRelations(s) if dynamic else s for s in systems]
        imported = [s for s in importers if attempt(import_graph, s, folders[s.name],
                                                    configs[s.name], graph, True) is not None]
        for repeat in range(args.repeats):
            for system in imported if repeat % 2 == 0 else imported[::-1]:
                print(f"{setup}: training {system.name}, run {repeat + 1}/{args.repeats}...",
                      flush=True)
                run = attempt(train_once, system, folders[system.name], configs[system.name],
                              graph.num_train, held_out, repeat)
                if run is not None:
                    results.setdefault((setup, system.name), []).append(run)
    print(f"\nGraph: {graph.num_train:,} training edges, {len(held_out.names):,} nodes; "
          f"{args.epochs} epochs unless the setup says; medians of {args.repeats} run(s). "
          "Loop: edges over the buckets' compute time, as each system times it; process: "
          "edges x epochs over the train command's wall time.")
    print_table(results, args.setups, systems, flops, rates)


if __name__ == "__main__":
    main()
