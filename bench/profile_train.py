"""One Hogwild worker's training loop, timed and profiled in isolation.

The full benchmark (`bench_train.py`) runs whole training processes; this script runs only
`train_part` inline, on one chunk of a synthetic graph held in memory, so that a change to the
hot path can be measured in seconds. It reports CPU time per edge (not wall time: it is meant
for a shared machine) and, with `--profile`, the operators where that time goes.

    python bench/profile_train.py                          # the benchmark config, 200k edges
    python bench/profile_train.py --profile                # plus a torch.profiler table
    python bench/profile_train.py --operator linear --comparator cos --loss softmax
    python bench/profile_train.py --kg                     # PBG's FB15k-style setup
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import tessera  # noqa: F401  (before torch: MKL's best code, as in the CLI)

# isort: split
import torch

from tessera.config import parse_config
from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.training.allocator import keep_freed_memory
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import Partition
from tessera.training.worker import BatchSettings, ModelState, WorkerTask, train_part

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_graph import GraphSpec, sample_edges  # noqa: E402

ENTITY_KEY = ("node", 0)


def worker_setup(args: argparse.Namespace) -> tuple[ModelState, WorkerTask]:
    """A model, one partition and the task of a single worker over `args.edges` edges."""
    config = parse_config({
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node",
                       "operator": args.operator}],
        "dynamic_relations": args.relation_types > 1,
        "dimension": args.dim, "comparator": args.comparator, "loss_fn": args.loss,
        "margin": 0.1, "lr": 0.01, "batch_size": args.batch_size,
        "num_batch_negs": args.negs, "num_uniform_negs": args.negs,
        "global_emb": not args.kg,
        "entity_path": "unused", "edge_paths": ["unused"], "checkpoint_path": "unused"})
    model = EmbeddingModel(config, num_relations=args.relation_types)
    state = ModelState(model, make_model_optimizer(model, config))
    spec = GraphSpec(args.edges, args.nodes, seed=0)
    lhs, rhs = sample_edges(spec, args.edges, np.random.default_rng(0))
    relations = torch.from_numpy(
        np.random.default_rng(1).integers(0, args.relation_types, args.edges))
    edges = EdgeList.from_ids(relations,
                              torch.from_numpy(lhs), torch.from_numpy(rhs))
    generator = torch.Generator().manual_seed(0)
    partition = Partition(
        embeddings=torch.randn(args.nodes, args.dim, generator=generator) * config.init_scale,
        adagrad_sum=torch.zeros(args.nodes))
    settings = BatchSettings(batch_size=config.batch_size, num_batch_negs=config.num_batch_negs,
                             num_uniform_negs=config.num_uniform_negs,
                             dynamic_relations=config.dynamic_relations, lr=config.lr)
    keys = [ENTITY_KEY] * (1 if config.dynamic_relations else args.relation_types)
    task = WorkerTask(edges=edges, partitions={ENTITY_KEY: partition}, lhs_keys=keys,
                      rhs_keys=keys, settings=settings, seed=0)
    return state, task


def timed_pass(state: ModelState, task: WorkerTask) -> tuple[float, float]:
    """(CPU seconds, mean loss per edge) of one pass over the task's edges."""
    started = time.process_time()
    stats = train_part(state, task)
    return time.process_time() - started, stats.loss / stats.count


def print_profile(state: ModelState, task: WorkerTask, rows: int) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        train_part(state, task)
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--negs", type=int, default=50, help="batch and uniform negatives")
    parser.add_argument("--operator", default="translation")
    parser.add_argument("--comparator", default="dot")
    parser.add_argument("--loss", default="ranking")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the edges")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--relation-types", type=int, default=1,
                        help="more than 1: dynamic relations, each edge's type drawn at random")
    parser.add_argument("--kg", action="store_true",
                        help="PBG's FB15k-style setup: complex_diagonal, softmax, dimension "
                        "200, 1000 + 1000 negatives, 1345 dynamic relation types, no global "
                        "embeddings")
    parser.add_argument("--profile", action="store_true", help="print a torch.profiler table")
    parser.add_argument("--rows", type=int, default=25, help="rows of the profiler table")
    args = parser.parse_args(argv)
    if args.kg:
        args.operator, args.loss, args.dim, args.negs = "complex_diagonal", "softmax", 200, 1000
        args.relation_types = 1345
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # what a Hogwild worker does
    keep_freed_memory()
    state, task = worker_setup(args)
    train_part(state, task)  # warm-up: first-call costs are not the loop's
    for index in range(args.passes):
        seconds, loss = timed_pass(state, task)
        print(f"pass {index + 1}: {args.edges / seconds:,.0f} edges per CPU second "
              f"({seconds:.2f} s), loss {loss:.4f}", flush=True)
    if args.profile:
        print_profile(state, task, args.rows)


if __name__ == "__main__":
    main()
