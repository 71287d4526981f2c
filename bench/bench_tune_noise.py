"""Tuning noise: how well one run's validation MRR orders configs by their test MRR, on a
small knowledge graph where `tessera tune` judges by a couple of hundred valid triples.

Draws `--configs` ComplEx configs at random from the region of the tuner's default space where
its good trials fall (lr 0.3-2 and N3 0.001-0.1, both log-uniform; dimension 200, 400 or 1000;
40-100 epochs; the rest the shipped tuned config's), trains each with seeds 0 to `--seeds` - 1
and one worker (a seed's run repeats, so the spread between seeds is the draw of the seed
alone), and ranks valid as a trial is judged (train and valid filtered) and test as papers
score (every split filtered). The tuner never reads test; this bench does, to see what the
choice on valid is worth.

    python bench/bench_tune_noise.py --data nations=/tmp/kgdata/nations --configs 40

Each run is a line of bench/output/tune_noise/{dataset}.jsonl; running the command again
continues it (the draws are seeded). Prints every config's figures and the noise table.

With --knobs it asks instead whether a key the tuner's space leaves out lifts the ceiling:
the shipped tuned config as it is, and with each value of `KNOBS` set alone, each trained
with the same seeds and one worker (lines of {dataset}_knobs.jsonl).

    python bench/bench_tune_noise.py --data nations=/tmp/kgdata/nations --knobs
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_quality import DATASETS, OUTPUT, dataset_files, local_copies  # noqa: E402
from bench_tune import prepare  # noqa: E402

from tessera.config import parse_config  # noqa: E402
from tessera.progress import Reporter  # noqa: E402
from tessera.training.coordinator import train  # noqa: E402
from tessera.tuning.space import with_values  # noqa: E402
from tessera.tuning.trial import (  # noqa: E402
    Judging,
    stop_descriptor_server,
    validation_metrics,
)

DRAW_SEED = 12345
# Keys outside the tuner's default space, and values on either side of their defaults.
KNOBS: dict[str, list[Any]] = {"init_scale": [0.1, 0.01], "relation_lr": [0.3, 3.0],
                               "batch_size": [25, 100]}


def draw_configs(count: int) -> list[dict[str, Any]]:
    """The region's configs, the same ones on every run."""
    rng = random.Random(DRAW_SEED)

    def log_uniform(low: float, high: float) -> float:
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    return [{"lr": log_uniform(0.3, 2.0), "dimension": rng.choice([200, 400, 1000]),
             "regularization_coef": log_uniform(1e-3, 0.1),
             "num_epochs": rng.choice(range(40, 101, 10))} for _ in range(count)]


def filtered_mrr(config: Any, split: str, also_known: tuple[str, ...] = ()) -> float:
    """`split` ranked as `tessera tune` judges a trial: training's and its own edges (and
    `also_known`'s) not counted as mistakes."""
    return float(validation_metrics(config, Judging(split, also_known), Reporter("quiet"))["mrr"])


def one_run(base: dict[str, Any], values: dict[str, Any], seed: int,
            folder: Path) -> dict[str, float]:
    """Train on train with one worker; the filtered valid and test MRR."""
    train_split, valid_split, test_split = base["edge_paths"]
    checkpoint = folder / "run"
    shutil.rmtree(checkpoint, ignore_errors=True)
    config = parse_config(with_values(base, {
        **values, "seed": seed, "workers": 1, "edge_paths": [train_split],
        "checkpoint_path": str(checkpoint)}))
    train(config, Reporter("quiet"))
    stop_descriptor_server()
    result = {"valid": filtered_mrr(config, valid_split),
              "test": filtered_mrr(config, test_split, (valid_split,))}
    shutil.rmtree(checkpoint, ignore_errors=True)
    return result


def collect(dataset: str, files: dict[str, Path], args: argparse.Namespace) -> list[dict]:
    folder = OUTPUT / "tune_noise"
    records_file = folder / f"{dataset}.jsonl"
    records = [json.loads(line) for line in records_file.read_text().splitlines()] \
        if records_file.exists() else []
    done = {(r["config"], r["seed"]) for r in records}
    base_file = folder / dataset / "config.json"
    if not base_file.exists():
        prepare(dataset, folder / dataset, files, "config")
    base = json.loads(base_file.read_text())
    for number, values in enumerate(draw_configs(args.configs)):
        for seed in range(args.seeds):
            if (number, seed) in done:
                continue
            record = {"config": number, "seed": seed, **values,
                      **one_run(base, values, seed, folder / dataset)}
            with records_file.open("a") as out:
                out.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
            records.append(record)
    return [r for r in records if r["config"] < args.configs and r["seed"] < args.seeds]


def by_seed(runs: list[dict], split: str) -> str:
    return " ".join(f"{run[split]:.3f}" for run in sorted(runs, key=lambda r: r["seed"]))


def report(dataset: str, records: list[dict], seeds: int) -> None:
    runs: dict[int, list[dict]] = defaultdict(list)
    for record in records:
        runs[record["config"]].append(record)
    configs = sorted(runs, key=lambda c: -statistics.mean(r["valid"] for r in runs[c]))

    def mean(config: int, split: str) -> float:
        return statistics.mean(r[split] for r in runs[config])

    print(f"\n{dataset}: {len(configs)} configs x {seeds} seeds, one worker; by mean valid MRR")
    print("| config | lr | dimension | N3 | epochs | valid MRR by seed | test MRR by seed |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        r = runs[c][0]
        print(f"| {c} | {r['lr']:.3g} | {r['dimension']} | {r['regularization_coef']:.3g} | "
              f"{r['num_epochs']} | {by_seed(runs[c], 'valid')} | {by_seed(runs[c], 'test')} |")
    best_run = max(records, key=lambda r: r["valid"])
    print(f"\nThe best mean test MRR of any config: {max(mean(c, 'test') for c in configs):.3f}; "
          f"the best valid run's config: {mean(best_run['config'], 'test'):.3f} (config "
          f"{best_run['config']}); the best mean-valid config: {mean(configs[0], 'test'):.3f} "
          f"(config {configs[0]}).")
    print("\n| configs | seed-to-seed sd, valid / test | sd of the configs' means, valid / test "
          f"| correlation of valid and test: one run / mean of {seeds} |")
    print("|---|---|---|---|")
    half = configs[:len(configs) // 2]
    for name, chosen in (("all", configs), ("the better half by mean valid MRR", half)):
        print(noise_row(name, {c: runs[c] for c in chosen}))


def noise_row(name: str, runs: dict[int, list[dict]]) -> str:
    """How much of a config's valid and test MRR is the seed's draw, and how closely valid
    orders the configs (and their runs) as test does."""
    def means(split: str) -> list[float]:
        return [statistics.mean(r[split] for r in config_runs) for config_runs in runs.values()]

    def seed_sd(split: str) -> float:
        return statistics.mean(statistics.stdev(r[split] for r in config_runs)
                               for config_runs in runs.values())

    every_run = [r for config_runs in runs.values() for r in config_runs]
    one_run = statistics.correlation([r["valid"] for r in every_run],
                                     [r["test"] for r in every_run])
    of_means = statistics.correlation(means("valid"), means("test"))
    return (f"| {name} ({len(runs)}) | {seed_sd('valid'):.4f} / {seed_sd('test'):.4f} | "
            f"{statistics.stdev(means('valid')):.4f} / {statistics.stdev(means('test')):.4f} | "
            f"{one_run:.2f} / {of_means:.2f} |")


def knob_runs(dataset: str, files: dict[str, Path], seeds: int) -> None:
    """The shipped config, then each knob value alone, with seeds 0 to `seeds` - 1."""
    folder = OUTPUT / "tune_noise"
    records_file = folder / f"{dataset}_knobs.jsonl"
    records = [json.loads(line) for line in records_file.read_text().splitlines()] \
        if records_file.exists() else []
    base_file = folder / dataset / "config.json"
    if not base_file.exists():
        prepare(dataset, folder / dataset, files, "config")
    base = json.loads(base_file.read_text())
    settings = [{}] + [{key: value} for key, values in KNOBS.items() for value in values]
    print(f"\n{dataset}: the shipped config and one knob changed, one worker")
    print("| change | valid MRR by seed | test MRR by seed | mean test MRR |")
    print("|---|---|---|---|")
    for values in settings:
        runs = []
        for seed in range(seeds):
            done = [r for r in records if r["values"] == values and r["seed"] == seed]
            if not done:
                done = [{"values": values, "seed": seed,
                         **one_run(base, values, seed, folder / dataset)}]
                with records_file.open("a") as out:
                    out.write(json.dumps(done[0]) + "\n")
            runs.append(done[0])
        change = ", ".join(f"{key} {value}" for key, value in values.items()) or "none"
        print(f"| {change} | {by_seed(runs, 'valid')} | {by_seed(runs, 'test')} | "
              f"{statistics.mean(r['test'] for r in runs):.3f} |", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["nations"])
    parser.add_argument("--configs", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--knobs", action="store_true",
                        help="the shipped config with each of KNOBS changed alone")
    parser.add_argument("--data", action="append", default=[], metavar="NAME=DIR",
                        help="a local copy of a dataset (train/valid/test files)")
    args = parser.parse_args(argv)
    if args.configs < 4 or args.seeds < 2:
        parser.error("--configs at least 4 and --seeds at least 2: the table compares spreads")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    given = local_copies(args.data)
    for dataset in args.datasets:
        if args.knobs:
            knob_runs(dataset, dataset_files(dataset, given), args.seeds)
        else:
            report(dataset, collect(dataset, dataset_files(dataset, given), args), args.seeds)


if __name__ == "__main__":
    main()
