"""Per-call time of the ranking kernels on a batch of PBG's default size.

A batch of 1000 edges in chunks of 50, 50 batch and 50 uniform negatives per side, dimension
100 (bench_train.py's setup), on one thread as a Hogwild worker runs it. Prints the median
over `--repeats` rounds of the mean time of `--calls` calls, for each kernel:

    python bench/bench_kernel_calls.py
    PYTHONPATH=/other/checkout/trainer python bench/bench_kernel_calls.py  # another build

`ranking_loss` gets one side's two column blocks as the threaded path passes them (the
transposed batch block and the extra negatives); `ranking_chunks` the whole batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import tessera  # noqa: F401  (before torch: MKL's best code, as in the CLI)

# isort: split
import torch

from tessera import kernels


def ranking_loss_call(chunks: int, size: int, negs: int) -> Callable[[], float]:
    generator = torch.Generator().manual_seed(0)
    pos_scores = torch.randn(chunks, size, generator=generator)
    pos_keys = torch.randint(10_000, (chunks, size), generator=generator)
    batch = torch.randn(chunks, size, size, generator=generator).transpose(1, 2)
    batch_grad = torch.empty(chunks, size, size).transpose(1, 2)
    extra = torch.randn(chunks, size, negs, generator=generator)
    keys = torch.randint(10_000, (chunks, size + negs), generator=generator)
    blocks = [(batch, batch_grad, keys[:, :size]), (extra, extra.clone(), keys[:, size:])]
    pos_grad = torch.zeros(chunks, size)
    num_edges = chunks * size
    return lambda: kernels.ranking_loss(0.1, 1.0, num_edges, pos_scores, pos_keys, blocks,
                                        pos_grad)


def ranking_chunks_call(chunks: int, size: int, negs: int, dim: int) -> Callable[[], float]:
    generator = torch.Generator().manual_seed(0)
    lhs = torch.randn(chunks, size + negs, dim, generator=generator)
    rhs = torch.randn(chunks, size + negs, dim, generator=generator)
    lhs_keys = torch.randint(10_000, (chunks, size + negs), generator=generator)
    rhs_keys = torch.randint(10_000, (chunks, size + negs), generator=generator)
    lhs_grad, rhs_grad, sums = torch.empty_like(lhs), torch.empty_like(rhs), torch.empty(2, dim)
    num_edges = chunks * size
    return lambda: kernels.ranking_chunks(0.1, 1.0, num_edges, lhs, rhs, lhs_grad, rhs_grad,
                                          lhs_keys, rhs_keys, size, sums)


def per_call_us(call: Callable[[], float], calls: int) -> float:
    call()  # warm-up: first touch of the buffers, the BLAS's set-up
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--negs", type=int, default=50, help="batch and uniform negatives")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not kernels.AVAILABLE:
        raise SystemExit("tessera._kernels is not built (or TESSERA_KERNELS=0)")
    torch.set_num_threads(1)
    chunks, size = args.batch_size // args.negs, args.negs
    calls = {"ranking_loss": ranking_loss_call(chunks, size, args.negs)}
    if kernels.CHUNKED:
        calls["ranking_chunks"] = ranking_chunks_call(chunks, size, args.negs, args.dim)
    medians = {name: statistics.median(per_call_us(call, args.calls)
                                       for _ in range(args.repeats))
               for name, call in calls.items()}
    print(json.dumps({name: round(us, 2) for name, us in medians.items()}))


if __name__ == "__main__":
    main()
