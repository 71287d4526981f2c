"""Quality benchmark: filtered link prediction on UMLS and Nations, Tessera beside PBG 1.0.

Each system imports the dataset with its own importer and trains with the same config; one
evaluator (`tessera eval --filtered`: every test triple ranked against every entity, the other
known triples filtered out) reads each system's checkpoint. Runs alternate between the systems;
the table gives the median and range of filtered MRR and Hits@10 over the runs.

    python bench/bench_quality.py --pbg-python /tmp/pbg-venv/bin/python --runs 5
    python bench/bench_quality.py --tuned --runs 3          # the shipped tuned configs
    python bench/bench_quality.py --tuned --config rotate   # examples/{dataset}/rotate.yaml
    python bench/bench_quality.py --data nations=DIR        # a local copy instead of the URL
    python bench/bench_quality.py --tuned --refit           # trained on train and valid

By default both train PyTorch-BigGraph's FB15k example (ComplEx, dynamic relations, dot,
softmax, lr 0.1; without its N3 regularizer, which PBG 1.0 lacks) at dimension 200 with 1000
batch and 1000 uniform negatives; `--tuned` trains Tessera alone with
examples/{dataset}/config.yaml (or `--config NAME`: examples/{dataset}/NAME.yaml), `--runs`
seeds. UMLS is bundled in examples/umls; Nations is fetched from the public ConvE repository
(Dettmers et al. 2018, the split that UMLS comes from) into bench/output/data, or read from
`--data nations=DIR`, a folder with train, valid and test files (`.txt` or `.tsv`, one
`head<TAB>relation<TAB>tail` per line).
PBG needs an environment of its own (`pip install torchbiggraph 'setuptools<81'`).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import write_json_config, write_python_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "bench" / "output"
SPLITS = ("train", "valid", "test")
DATASETS = ("umls", "nations")
PUBLIC_URLS = {"nations": "https://github.com/TimDettmers/ConvE/raw/master/nations.tar.gz",
               "umls": "https://github.com/TimDettmers/ConvE/raw/master/umls.tar.gz"}

# PBG's FB15k example (torchbiggraph/examples/configs/fb15k_config_cpu.py) at dimension 200,
# without `regularization_coef` (PBG 1.0, the release on PyPI, has no regularizer).
PBG_SETUP: dict[str, Any] = {
    "entities": {"all": {"num_partitions": 1}},
    "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all",
                   "operator": "complex_diagonal"}],
    "dynamic_relations": True, "dimension": 200, "global_emb": False, "comparator": "dot",
    "loss_fn": "softmax", "lr": 0.1, "num_epochs": 50,
    "batch_size": 1000, "num_batch_negs": 1000, "num_uniform_negs": 1000, "eval_fraction": 0,
    "workers": 2,
}


# --- data -------------------------------------------------------------------------------

def split_file(folder: Path, split: str) -> Path | None:
    for name in (f"{split}.txt", f"{split}.tsv"):
        if (folder / name).is_file():
            return folder / name
    return None


def dataset_files(name: str, given: dict[str, Path]) -> dict[str, Path]:
    """train/valid/test files of a dataset: `--data`, the bundled copy, or downloaded."""
    candidates = [given[name]] if name in given else [ROOT / "examples" / name,
                                                        OUTPUT / "data" / name]
    for folder in candidates:
        files = {split: split_file(folder, split) for split in SPLITS}
        if all(files.values()):
            return {split: path for split, path in files.items() if path is not None}
    if name in given:
        raise SystemExit(f"--data {name}={given[name]}: expected train, valid and test files "
                         "(.txt or .tsv) in it")
    return download(name, OUTPUT / "data" / name)


def download(name: str, folder: Path) -> dict[str, Path]:
    url = PUBLIC_URLS[name]
    print(f"fetching {name} from {url}...", flush=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            archive = response.read()
    except OSError as error:
        raise SystemExit(f"cannot fetch {url} ({error}); download it elsewhere and give "
                         f"--data {name}=DIR (a folder with train.txt, valid.txt, test.txt)"
                         ) from None
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            split = Path(member.name).stem
            source = tar.extractfile(member)
            if split in SPLITS and source is not None:
                (folder / f"{split}.txt").write_bytes(source.read())
    return {split: folder / f"{split}.txt" for split in SPLITS}


# --- the two systems --------------------------------------------------------------------

def with_paths(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    return {**config, "entity_path": str(folder / "entities"),
            "edge_paths": [str(folder / "edges" / split) for split in SPLITS],
            "checkpoint_path": str(folder / "checkpoints")}


def import_and_train(system: str, folder: Path, config: dict[str, Any],
                     files: dict[str, Path], pbg_bin: Path | None, refit: bool) -> None:
    """Import the three splits with the system's importer, train on the first (with
    `refit`, on the first two: train and valid, as `tessera tune`'s refit.yaml)."""
    config = with_paths(config, folder)
    inputs = [str(files[split]) for split in SPLITS]
    trained = {**config, "edge_paths": config["edge_paths"][:2 if refit else 1]}
    if system == "PBG":
        assert pbg_bin is not None
        run([str(pbg_bin / "torchbiggraph_import_from_tsv"), "--lhs-col", "0", "--rel-col",
             "1", "--rhs-col", "2", str(write_python_config(folder / "import.py", config)),
             *inputs], folder / "import.log")
        run([str(pbg_bin / "torchbiggraph_train"),
             str(write_python_config(folder / "train.py", trained))], folder / "train.log")
        return
    tessera = [sys.executable, "-m", "tessera"]
    run([*tessera, "import", str(write_json_config(folder / "import.json", config)), *inputs,
         "--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2", "--log-format", "json"],
        folder / "import.log")
    run([*tessera, "train", str(write_json_config(folder / "train.json", trained)),
         "--log-format", "json"], folder / "train.log")


def filtered_metrics(folder: Path, config: dict[str, Any], split: str) -> dict[str, float]:
    """Tessera's filtered evaluation of one split, from either system's checkpoint."""
    config = with_paths(config, folder)
    edges = config["edge_paths"]
    one_split = {**config, "edge_paths": [edges[SPLITS.index(split)]]}
    output = folder / f"{split}_metrics.json"
    run([sys.executable, "-m", "tessera", "eval",
         str(write_json_config(folder / "eval.json", one_split)), "--filtered",
         "--filter-paths", *edges, "--output", str(output), "--log-format", "json"],
        folder / "eval.log")
    metrics: dict[str, float] = json.loads(output.read_text())
    return metrics


def run(command: list[str], log: Path) -> None:
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text()[-2000:]
        raise SystemExit(f"{' '.join(command)} exited with {done.returncode}:\n{tail}")


# --- runs and the table -----------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    dataset: str
    system: str
    mrr: float
    hits10: float


@dataclass(frozen=True)
class Measuring:
    tag: str  # the runs' folder under bench/output/quality
    split: str  # the split evaluated
    refit: bool = False  # trained on train and valid


def one_run(dataset: str, system: str, run_idx: int, config: dict[str, Any],
            files: dict[str, Path], pbg_bin: Path | None, measuring: Measuring) -> Result:
    folder = OUTPUT / "quality" / measuring.tag / dataset / system / str(run_idx)
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    if system == "Tessera":  # PBG has no seed: it draws anew in every run
        config = {**config, "seed": run_idx}
    import_and_train(system, folder, config, files, pbg_bin, measuring.refit)
    metrics = filtered_metrics(folder, config, measuring.split)
    result = Result(dataset, system, metrics["mrr"], metrics["hits@10"])
    print(f"{dataset} {system} run {run_idx + 1}: filtered MRR {result.mrr:.4f}, "
          f"Hits@10 {result.hits10:.4f}", flush=True)
    return result


def summary(values: list[float]) -> str:
    return (f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
            if values else "n/a")


def print_table(results: list[Result], runs: int, split: str) -> None:
    print(f"\nFiltered {split} metrics, median (range) of {runs} run(s):\n")
    print("| dataset | system | MRR | Hits@10 |")
    print("|---|---|---|---|")
    for dataset in DATASETS:
        for system in dict.fromkeys(r.system for r in results):
            group = [r for r in results if r.dataset == dataset and r.system == system]
            if group:
                print(f"| {dataset} | {system} | {summary([r.mrr for r in group])} | "
                      f"{summary([r.hits10 for r in group])} |")


def tuned_config(dataset: str, name: str = "config") -> dict[str, Any]:
    """A shipped tuned config, without its paths (each run has its own)."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "examples" / dataset / f"{name}.yaml")
                                            .read_text())
    for key in ("entity_path", "edge_paths", "checkpoint_path"):
        config.pop(key, None)
    return config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pbg-python", help="python of an environment with torchbiggraph")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--tuned", action="store_true",
                        help="Tessera alone with examples/{dataset}/config.yaml")
    parser.add_argument("--config", default="config", metavar="NAME",
                        help="with --tuned: examples/{dataset}/NAME.yaml instead")
    parser.add_argument("--split", choices=("valid", "test"), default="test",
                        help="the split evaluated (tune on valid, report test)")
    parser.add_argument("--refit", action="store_true",
                        help="train on the train and valid splits (report test)")
    parser.add_argument("--data", action="append", default=[], metavar="NAME=DIR",
                        help="a local copy of a dataset (train/valid/test files)")
    parser.add_argument("-p", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a key of the config (JSON value)")
    args = parser.parse_args(argv)
    if args.refit and args.split == "valid":
        parser.error("--refit trains on the valid split: evaluate test")
    return args


def parse_override(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def local_copies(items: list[str]) -> dict[str, Path]:
    """The datasets given as `--data NAME=DIR`, by name."""
    return {name: Path(folder) for name, _, folder in (item.partition("=") for item in items)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    given = local_copies(args.data)
    pbg_bin = Path(args.pbg_python).parent if args.pbg_python else None
    systems = ["Tessera"] + (["PBG"] if pbg_bin is not None and not args.tuned else [])
    overrides = dict(parse_override(item) for item in args.overrides)
    results = []
    tag = "pbg" if not args.tuned else "tuned" if args.config == "config" \
        else f"tuned-{args.config}"
    measuring = Measuring(f"{tag}-refit" if args.refit else tag, args.split, args.refit)
    for dataset in args.datasets:
        files = dataset_files(dataset, given)
        config = {**(tuned_config(dataset, args.config) if args.tuned else PBG_SETUP),
                  **overrides}
        for run_idx in range(args.runs):
            order = systems if run_idx % 2 == 0 else systems[::-1]
            for system in order:
                results.append(one_run(dataset, system, run_idx, config, files, pbg_bin,
                                       measuring))
    setup = f"examples/*/{args.config}.yaml" if args.tuned else "PBG's FB15k setup"
    trained = "train and valid" if args.refit else "train"
    print(f"\nSetup: {setup}, trained on {trained}; overrides: {overrides or 'none'}.")
    print_table(results, args.runs, args.split)


if __name__ == "__main__":
    main()
