"""Tuning benchmark: `tessera tune` on UMLS and Nations, chosen on the validation split, then
the chosen config's filtered test MRR.

For each dataset: import train/valid/test, run `tessera tune` on the training split with the
shipped config's regime (examples/{dataset}/config.yaml: ComplEx, all_negs, softmax; or
`--config NAME`: examples/{dataset}/NAME.yaml; the keys the space names are the tuner's to
choose) and the built-in search space, judged on valid
(train and valid edges filtered; the test split is not read), then rank the test split
filtered (train, valid and test edges known, as papers do): with the best trial's own checkpoint,
after training `best.yaml` as written (its seed the study's: with `-p workers=1` the best
trial's model again), after training it with seeds 0 to `--seeds` - 1 (Hogwild's races make
runs of one config differ by about 0.01 on these small graphs), and after training
`refit.yaml` (best.yaml on the train and valid splits) with the same seeds.

    python bench/bench_tune.py --data nations=/tmp/kgdata/nations --trials 30
    python bench/bench_tune.py --config reciprocal --data nations=/tmp/kgdata/nations
    python bench/bench_tune.py --datasets nations --studies 5 --data nations=/tmp/kgdata/nations
    python bench/bench_tune.py --datasets nations --studies 5 -p workers=1 --data nations=DIR
    python bench/bench_tune.py --datasets nations --studies 5 -p workers=1 --valid-every 10 \
        --data nations=DIR
    python bench/bench_tune.py --datasets umls --space my_space.yaml -p eval_fraction=0.05

Data as bench_quality.py finds it (UMLS bundled, Nations from --data or the ConvE repository).
Wall times include every trial's start-up and the host's load: say what else ran beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_quality import (  # noqa: E402
    DATASETS,
    OUTPUT,
    SPLITS,
    dataset_files,
    local_copies,
    run,
    tuned_config,
)
from bench_train import write_json_config  # noqa: E402

from tessera.tuning.study import BEST_CONFIG, REFIT_CONFIG  # noqa: E402

TESSERA = [sys.executable, "-m", "tessera"]


def prepare(dataset: str, folder: Path, files: dict[str, Path], regime: str) -> Path:
    """A fresh folder with the three splits imported; the config's path."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = {**tuned_config(dataset, regime), "entity_path": str(folder / "entities"),
              "edge_paths": [str(folder / "edges" / split) for split in SPLITS],
              "checkpoint_path": str(folder / "checkpoints")}
    path = write_json_config(folder / "config.json", config)
    run([*TESSERA, "import", str(path), *(str(files[split]) for split in SPLITS),
         "--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2", "--log-format", "json"],
        folder / "import.log")
    return path


def run_tune(folder: Path, config: Path, args: argparse.Namespace, study: int) -> float:
    """`tessera tune` on the training split, judged on valid, its sampler and trials seeded
    with `study`; its wall time."""
    edges = folder / "edges"
    command = [*TESSERA, "tune", str(config), "-p", f"edge_paths={edges / 'train'}",
               "-p", f"seed={study}", "--valid", str(edges / "valid"),
               "--trials", str(args.trials), "--log-format", "json"]
    for override in args.overrides:
        command += ["-p", override]
    if args.space:
        command += ["--space", args.space]
    if args.valid_every:
        command += ["--valid-every", str(args.valid_every)]
    started = time.monotonic()
    run(command, folder / "tune.log")
    return time.monotonic() - started


def trial_events(folder: Path) -> list[dict[str, Any]]:
    events = []
    for line in (folder / "tune.log").read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == "trial finished":
                events.append(record)
    return events


def test_metrics(folder: Path, config: Path, checkpoint: Path, name: str) -> dict[str, Any]:
    """Filtered metrics of the test split under `checkpoint`, every split's edges known."""
    edges = [str(folder / "edges" / split) for split in SPLITS]
    output = folder / f"{name}_test_metrics.json"
    run([*TESSERA, "eval", str(config), "-p", f"edge_paths={edges[2]}",
         "-p", f"checkpoint_path={checkpoint}", "--filtered", "--filter-paths", *edges,
         "--output", str(output), "--log-format", "json"], folder / f"{name}_eval.log")
    metrics: dict[str, Any] = json.loads(output.read_text())
    return metrics


def one_study(dataset: str, files: dict[str, Path], args: argparse.Namespace,
              study: int) -> dict[str, Any]:
    folder = OUTPUT / "tune" / f"{dataset}_{args.config}_{study}"
    config = prepare(dataset, folder, files, args.config)
    seconds = run_tune(folder, config, args, study)
    best_config = folder / "checkpoints" / "tune" / BEST_CONFIG
    chosen = yaml.safe_load(best_config.read_text())
    events = trial_events(folder)
    best = max((e for e in events if e["state"] == "complete"), key=lambda e: e["valid_mrr"])
    trial_checkpoint = folder / "checkpoints" / "tune" / f"trial_{best['trial']}"
    from_trial = test_metrics(folder, best_config, trial_checkpoint, "best_trial")
    as_written = retrain(folder, best_config, None)
    retrained = [retrain(folder, best_config, seed) for seed in range(args.seeds)]
    refit_config = best_config.with_name(REFIT_CONFIG)
    refit = [retrain(folder, refit_config, seed) for seed in range(args.seeds)]
    result = {
        "dataset": dataset, "regime": args.config, "study": study, "trials": len(events),
        "pruned": sum(e["state"] == "pruned" for e in events), "tune_seconds": seconds,
        "epochs_trained": sum(e["epoch"] if e["state"] == "pruned" else e["num_epochs"]
                              for e in events),
        "best_trial": best["trial"], "valid_mrr": best["valid_mrr"],
        "chosen": {key: chosen[key] for key in best if key in chosen},
        "test_mrr_trial": from_trial["mrr"], "test_hits10_trial": from_trial["hits@10"],
        "test_mrr_as_written": as_written["mrr"],
        "test_mrr_retrained": [m["mrr"] for m in retrained],
        "test_hits10_retrained": [m["hits@10"] for m in retrained],
        "test_mrr_refit": [m["mrr"] for m in refit]}
    (folder / "result.json").write_text(json.dumps(result, indent=2))
    print(f"{dataset}, study {study}: {json.dumps(result)}", flush=True)
    return result


def retrain(folder: Path, best_config: Path, seed: int | None) -> dict[str, Any]:
    """Train `best.yaml` (or `refit.yaml`) anew with `seed`, or as written (the study's seed:
    with `workers: 1` the best trial's model again), into a folder of its own, and rank the
    test split."""
    name = f"{best_config.stem}_{'as_written' if seed is None else f'seed_{seed}'}"
    checkpoint = folder / "retrained" / name
    seeded = [] if seed is None else ["-p", f"seed={seed}"]
    run([*TESSERA, "train", str(best_config), *seeded,
         "-p", f"checkpoint_path={checkpoint}", "--log-format", "json"],
        folder / f"retrain_{name}.log")
    return test_metrics(folder, best_config, checkpoint, f"retrained_{name}")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def spread_of_counts(values: list[int]) -> str:
    return f"{statistics.median(values):.0f} ({min(values)}-{max(values)})"


def print_table(results: list[dict[str, Any]]) -> None:
    print("\n| dataset | study | trials (pruned) | epochs trained | tune wall time | "
          "best trial: chosen values | "
          "valid MRR | test MRR, best trial | best.yaml as written | "
          "best.yaml, seeds 0-N: median (range) | refit.yaml, seeds 0-N |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        chosen = ", ".join(f"{key} {value:.3g}" if isinstance(value, float) else
                           f"{key} {value}" for key, value in r["chosen"].items())
        print(f"| {r['dataset']} | {r['study']} | {r['trials']} ({r['pruned']}) | "
              f"{r['epochs_trained']} | {r['tune_seconds'] / 60:.1f} min | "
              f"{r['best_trial']}: {chosen} | "
              f"{r['valid_mrr']:.3f} | {r['test_mrr_trial']:.3f} "
              f"(Hits@10 {r['test_hits10_trial']:.3f}) | {r['test_mrr_as_written']:.3f} | "
              f"{spread(r['test_mrr_retrained'])} "
              f"(Hits@10 {spread(r['test_hits10_retrained'])}) | "
              f"{spread(r['test_mrr_refit'])} |")


def print_medians(results: list[dict[str, Any]]) -> None:
    """Each dataset's medians over its studies: what one tune run may be expected to give."""
    print("\n| dataset | studies | epochs trained | tune wall time | test MRR, best trial | "
          "best.yaml as written | best.yaml, seeds 0-N (median of each study's median) | "
          "refit.yaml, seeds 0-N (the same) |")
    print("|---|---|---|---|---|---|---|---|")
    for dataset in dict.fromkeys(r["dataset"] for r in results):
        mine = [r for r in results if r["dataset"] == dataset]
        minutes = [r["tune_seconds"] / 60 for r in mine]
        epochs = [r["epochs_trained"] for r in mine]
        print(f"| {dataset} | {len(mine)} | {spread_of_counts(epochs)} | "
              f"{statistics.median(minutes):.1f} "
              f"({min(minutes):.1f}-{max(minutes):.1f}) min | "
              f"{spread([r['test_mrr_trial'] for r in mine])} | "
              f"{spread([r['test_mrr_as_written'] for r in mine])} | "
              f"{spread([statistics.median(r['test_mrr_retrained']) for r in mine])} | "
              f"{spread([statistics.median(r['test_mrr_refit']) for r in mine])} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--config", default="config", metavar="NAME",
                        help="the regime: examples/{dataset}/NAME.yaml (default: config)")
    parser.add_argument("--space", help="a search-space file (default: the built-in space)")
    parser.add_argument("--valid-every", type=int, default=0, metavar="N",
                        help="tessera tune --valid-every N: prune by the validation MRR")
    parser.add_argument("--studies", type=int, default=1,
                        help="tunes of each dataset, seeded 0 to N-1 (the sampler and trials)")
    parser.add_argument("--seeds", type=int, default=3,
                        help="seeds best.yaml is trained anew with (0 to N-1)")
    parser.add_argument("--data", action="append", default=[], metavar="NAME=DIR",
                        help="a local copy of a dataset (train/valid/test files)")
    parser.add_argument("-p", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a key of the tuned config")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    given = local_copies(args.data)
    results = [one_study(dataset, dataset_files(dataset, given), args, study)
               for dataset in args.datasets for study in range(args.studies)]
    print(f"\n`tessera tune` of examples/{{dataset}}/{args.config}.yaml, {args.trials} trials, "
          f"space: {args.space or 'built-in'}, overrides: {args.overrides or 'none'}, "
          f"--valid-every {args.valid_every or 'off'}; valid MRR "
          f"filtered by train+valid, test MRR by train+valid+test; best.yaml and refit.yaml "
          f"(trained on train+valid) retrained with seeds 0-{args.seeds - 1}.")
    print_table(results)
    if args.studies > 1:
        print_medians(results)


if __name__ == "__main__":
    main()
