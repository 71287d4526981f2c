"""The device path's host cost per batch: what a GPU waits for when the host is the limit.

On a GPU the default setup's batch loop is bound by the host issuing each batch's
operations (`profile_gpu.py`). This script times the device path's step (`train_batch`, the
torch code a GPU runs) on the CPU with a tiny dimension, where the arithmetic is negligible
and what is left is the per-operation cost of dispatching ~400 operators from Python, and
counts those operators. Fewer operators per batch, or cheaper ones to issue, show here
without a GPU.

    python bench/bench_device_step.py                       # 1,000 edges, dimension 4
    python bench/bench_device_step.py --edges 100000 --dimension 100 --top 30
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import tessera  # noqa: F401  (before torch: MKL's best code, as in the CLI)

# isort: split
import torch
from torch.profiler import ProfilerActivity, profile

from tessera import kernels
from tessera.config import parse_config
from tessera.edgelist import EdgeList, EntityList
from tessera.model import EmbeddingModel
from tessera.training.device_trainer import train_batch
from tessera.training.optimizers import RowAdagrad, make_model_optimizer
from tessera.training.worker import ModelState


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=1000, help="edges per batch")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the table")
    parser.add_argument("--dimension", type=int, default=4)
    parser.add_argument("--operator", default="translation")
    parser.add_argument("--comparator", default="dot")
    parser.add_argument("--loss", default="ranking")
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--top", type=int, default=0, help="list the most frequent operators")
    args = parser.parse_args(argv)
    config = parse_config({
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": args.operator}],
        "dimension": args.dimension, "comparator": args.comparator, "loss_fn": args.loss,
        "batch_size": args.edges, "entity_path": "unused", "edge_paths": ["unused"],
        "checkpoint_path": "unused"})
    model = EmbeddingModel(config, 1)
    state = ModelState(model, make_model_optimizer(model, config))
    generator = torch.Generator().manual_seed(0)
    table = 0.1 * torch.randn(args.rows, args.dimension, generator=generator)
    optimizers = {id(table): RowAdagrad(table, config.lr, torch.zeros(args.rows),
                                        without_syncs=True)}
    ids = [torch.randint(0, args.rows, (args.edges,), generator=generator) for _ in range(2)]
    batch = EdgeList(rel=torch.zeros(args.edges, dtype=torch.long),
                     lhs=EntityList.from_ids(ids[0]), rhs=EntityList.from_ids(ids[1]))

    def step() -> None:
        train_batch(state, batch, table, table, optimizers, generator)

    with kernels.torch_only():
        for _ in range(5):
            step()
        started = time.perf_counter()
        for _ in range(args.batches):
            step()
        seconds = (time.perf_counter() - started) / args.batches
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            for _ in range(10):
                step()
    averages = profiled.key_averages()
    operators = sum(event.count for event in averages if event.key.startswith("aten::")) / 10
    print("| edges per batch | dimension | setup | host ms per batch | aten operators per batch |")
    print("|---|---|---|---|---|")
    print(f"| {args.edges:,} | {args.dimension} | {args.operator}, {args.comparator}, "
          f"{args.loss} | {seconds * 1e3:.2f} | {operators:.0f} |")
    if args.top:
        print(averages.table(sort_by="count", row_limit=args.top, max_name_column_width=40))


if __name__ == "__main__":
    main()
