"""Where a GPU run's time goes: torch's profiler over one `tessera train`, after a warm-up
run of the same config (CUDA's start-up and the imports are paid there, not profiled).

Give it the config of an imported graph (as `bench_gpu.py` writes under bench/output/runs);
each run trains `--epochs` epochs into a fresh checkpoint path beside the config, and the
script prints the operators and kernels by device time, then by host time.

    python bench/profile_gpu.py bench/output/runs/e2000000_n100000_s0/tessera-gpu_p1/config.json

With `--python`, Python's own profiler replaces torch's: the run's host time by function,
which shows where the time between the batch loops goes (reading, copies, checkpoints).

A run whose device time is far below its batch loops' time is bound by the host issuing the
operations (found so on an H200 for the default config: 105 ms of device time against about
200 ms of loop per epoch of 2M edges).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
from collections.abc import Sequence
from pathlib import Path

import tessera  # noqa: F401  (before torch: MKL's best code, as in the CLI)

# isort: split
import torch
from torch.profiler import ProfilerActivity, profile

from tessera.cli import main as tessera_main


def fresh_config(config: Path, name: str, epochs: int) -> Path:
    """A copy of `config` training `epochs` epochs into an empty checkpoint path `name`."""
    settings = json.loads(config.read_text())
    checkpoints = config.parent / name
    shutil.rmtree(checkpoints, ignore_errors=True)
    settings.update(checkpoint_path=str(checkpoints), num_epochs=epochs)
    path = config.parent / f"{name}.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the JSON config of an imported graph")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rows", type=int, default=30, help="lines of each table")
    parser.add_argument("--python", action="store_true",
                        help="profile Python functions (cProfile) instead of torch operators")
    args = parser.parse_args(argv)

    def train(name: str) -> None:
        config = fresh_config(args.config, name, args.epochs)
        tessera_main(["train", str(config), "--log-format", "json"])

    train("profile-warm-up")
    if args.python:
        profiler = cProfile.Profile()
        profiler.runcall(train, "profile-run")
        for order in ("cumulative", "tottime"):
            print(f"\nby {order}:")
            pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(args.rows)
        return
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiled:
        train("profile-run")
    averages = profiled.key_averages()
    orders = ["self_cpu_time_total"]
    if torch.cuda.is_available():
        orders.insert(0, "self_device_time_total")
    for order in orders:
        print(f"\nby {order}:")
        print(averages.table(sort_by=order, row_limit=args.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
