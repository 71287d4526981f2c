"""The device path's batch loop, each step issued operation by operation against recorded.

Trains one bucket chunk of random edges with `DeviceBucketTrainer.train_edges` (the loop a GPU
run trains every chunk with) on a device, once with plain steps and once with each batch
shape's step recorded and replayed (`recorded_steps`, CUDA graphs on a GPU), and prints the
loop's edges/s and its share of the float32 arithmetic limit. I/O, imports and checkpoints
are left out: this is the loop alone. Setups: PBG's default (translation, dot, ranking,
dimension 100, 50 batch + 50 uniform negatives) and the knowledge-graph one (complex_diagonal,
dynamic relations, softmax, dimension 200, 1000 + 1000 negatives).

    python bench/bench_recorded_steps.py --device cuda                      # both setups
    python bench/bench_recorded_steps.py --setups kg --batch-sizes 1000 10000 --device cuda
    python bench/bench_recorded_steps.py --edges 20000 --rows 5000          # a CPU check
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import tessera  # noqa: F401  (before torch: MKL's best code, as in the CLI)

# isort: split
import torch
from torch.profiler import ProfilerActivity, profile

from tessera.config import parse_config
from tessera.edgelist import EdgeList
from tessera.model import EmbeddingModel
from tessera.training.device_copies import PartitionCopier
from tessera.training.device_trainer import DeviceBucketTrainer
from tessera.training.optimizers import make_model_optimizer
from tessera.training.partitions import Partition
from tessera.training.recorded_steps import MIN_BATCHES_TO_RECORD
from tessera.training.worker import ModelState

SETUPS: dict[str, dict[str, Any]] = {
    "default": {"operator": "translation", "dimension": 100, "loss_fn": "ranking",
                "num_batch_negs": 50, "num_uniform_negs": 50, "lr": 0.01},
    "kg": {"operator": "complex_diagonal", "dimension": 200, "loss_fn": "softmax",
           "num_batch_negs": 1000, "num_uniform_negs": 1000, "lr": 0.1,
           "dynamic_relations": True, "global_emb": False},
}
RELATIONS = 20  # of the knowledge-graph setup


def setup_config(setup: str, batch_size: int) -> Any:
    settings = dict(SETUPS[setup])
    operator = settings.pop("operator")
    dynamic = settings.get("dynamic_relations", False)
    relations = [{"name": "r", "lhs": "node", "rhs": "node", "operator": operator}]
    return parse_config({
        "entities": {"node": {"num_partitions": 1}}, "relations": relations,
        "comparator": "dot", "batch_size": batch_size, "entity_path": "unused",
        "edge_paths": ["unused"], "checkpoint_path": "unused", **settings}), \
        RELATIONS if dynamic else 1


def flops_per_edge(config: Any) -> int:
    """Each side scores an edge against its negatives (2 M d); backward two more such."""
    return 2 * 3 * 2 * (config.num_batch_negs + config.num_uniform_negs) * config.dimension


def loop_rate(setup: str, batch_size: int, args: argparse.Namespace, record: bool,
              profiled: bool = False, tf32: bool = False) -> tuple[float, int]:
    """Edges/s of one chunk's loop after a warm-up chunk; the shapes recorded. `profiled`:
    print the device's kernels of one more chunk by their time. `tf32`: matrix products
    in TensorFloat-32 (tensor cores, 10-bit mantissas) instead of float32."""
    config, num_relations = setup_config(setup, batch_size)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    num_edges = max(args.edges, MIN_BATCHES_TO_RECORD * batch_size)
    model = EmbeddingModel(config, num_relations)
    state = ModelState(model, make_model_optimizer(model, config))
    generator = torch.Generator().manual_seed(0)
    host = Partition(0.1 * torch.randn(args.rows, config.dimension, generator=generator),
                     torch.zeros(args.rows))
    edges = EdgeList.from_ids(torch.randint(0, num_relations, (num_edges,),
                                            generator=generator),
                              torch.randint(0, args.rows, (num_edges,), generator=generator),
                              torch.randint(0, args.rows, (num_edges,), generator=generator))
    trainer = DeviceBucketTrainer(config, None, state, 1, device,  # type: ignore[arg-type]
                                  record_steps=record)
    on_device = PartitionCopier(device, torch.float32).to_device({0: host}).ready()
    edges = trainer.staged(edges)
    device_state = trainer.model.pull()

    def chunk(seed: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        trainer.train_edges(device_state, edges, on_device, [0], [0], seed)  # reads the sums
        return time.perf_counter() - started

    chunk(0)  # warm-up: lazy initialisation, the allocator's pools
    trainer.recorded_shapes = 0
    seconds = min(chunk(seed) for seed in range(1, args.repeats + 1))
    shapes = trainer.recorded_shapes
    if profiled:
        activities = [ProfilerActivity.CPU] + \
            ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as profiler:
            chunk(args.repeats + 1)
        sort_by = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
        print(f"\n{setup}, batch {batch_size:,}, {'recorded' if record else 'plain'}, "
              f"{num_edges:,} edges:")
        print(profiler.key_averages().table(sort_by=sort_by, row_limit=args.profile_rows,
                                            max_name_column_width=50))
    return len(edges) / seconds, shapes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=["kg", "default"])
    parser.add_argument("--batch-sizes", nargs="+", type=int,
                        help="default: 1,000 and 10,000 (kg); 1,000, 10,000 and 100,000")
    parser.add_argument("--edges", type=int, default=2_000_000,
                        help="edges of the chunk (at least enough for recording)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the table")
    parser.add_argument("--repeats", type=int, default=2, help="timed chunks (the best)")
    parser.add_argument("--peak-tflops", type=float, default=67.0,
                        help="the device's dense float32 peak (default: an H100 SXM's)")
    parser.add_argument("--profile", nargs="*", metavar="SETUP:BATCH",
                        help="after the table, profile these recorded (e.g. kg:1000)")
    parser.add_argument("--tf32", action="store_true",
                        help="a column with the recorded loop's matrix products in TF32")
    parser.add_argument("--profile-rows", type=int, default=15)
    args = parser.parse_args(argv)
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(f"device: {name}; {args.edges:,} edges a chunk, {args.rows:,} rows; "
          f"best of {args.repeats}")
    tf32_header = " recorded, TF32 products, edges/s |" if args.tf32 else ""
    print("| setup | batch | plain edges/s | recorded edges/s | recorded / plain "
          f"| recorded: share of the float32 limit |{tf32_header}")
    print("|---|---|---|---|---|---|" + ("---|" if args.tf32 else ""))
    for setup in args.setups:
        sizes = args.batch_sizes or ([1000, 10_000] if setup == "kg"
                                     else [1000, 10_000, 100_000])
        for batch_size in sizes:
            plain, _ = loop_rate(setup, batch_size, args, record=False)
            recorded, shapes = loop_rate(setup, batch_size, args, record=True)
            config, _ = setup_config(setup, batch_size)
            limit = args.peak_tflops * 1e12 / flops_per_edge(config)
            note = "" if shapes else " (nothing recorded)"
            tf32 = f" {loop_rate(setup, batch_size, args, True, tf32=True)[0]:,.0f} |" \
                if args.tf32 else ""
            print(f"| {setup} | {batch_size:,} | {plain:,.0f} | {recorded:,.0f}{note} "
                  f"| {recorded / plain:.2f}x | {recorded / limit:.1%} |{tf32}", flush=True)
    for profiled in args.profile or []:
        setup, batch_size = profiled.split(":")
        loop_rate(setup, int(batch_size), args, record=True, profiled=True)


if __name__ == "__main__":
    main()
