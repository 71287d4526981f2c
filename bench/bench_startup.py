"""What a training process spends before it trains: each part of start-up, timed in a fresh
process of its own (best of `--repeats`), so that the run summary's `startup_s` can be split.

    python bench/bench_startup.py                  # the CPU's parts
    python bench/bench_startup.py --device cuda    # and CUDA's initialisation

Rows: the interpreter alone; importing torch; importing everything `tessera train` imports;
torch and then everything, each followed by CUDA's initialisation (one tensor on the device).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence

TRAIN_IMPORTS = "import tessera.cli, tessera.training.coordinator"
ON_DEVICE = "torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
PARTS = {
    "interpreter": "pass",
    "import torch": "import torch",
    "tessera train's imports": TRAIN_IMPORTS,
}
CUDA_PARTS = {
    "import torch, CUDA initialised": f"import torch; {ON_DEVICE}",
    "imports, then CUDA initialised": f"import torch; {TRAIN_IMPORTS}; {ON_DEVICE}",
}


def seconds(code: str, repeats: int) -> float:
    """The best wall time of a fresh interpreter running `code`."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    parts = {**PARTS, **(CUDA_PARTS if args.device == "cuda" else {})}
    print(f"| part | seconds (best of {args.repeats}) |")
    print("|---|---|")
    for name, code in parts.items():
        print(f"| {name} | {seconds(code, args.repeats):.2f} |", flush=True)


if __name__ == "__main__":
    main()
