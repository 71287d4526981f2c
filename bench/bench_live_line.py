"""Live-line benchmark: how often `tessera train` updates its line on a terminal, and how far
its ETA drifts, on a graph of a million edges.

    python bench/bench_live_line.py                      # 1M edges, 1 and 4 partitions
    python bench/bench_live_line.py --edges 200000 --partitions 1

The graph (random edges among `--nodes` nodes of one type) is written straight into Tessera's
on-disk format under bench/output/live_line; `tessera train` runs under a pseudo-terminal, as
from a shell. The table gives, per setup: the updates of the live line, the longest time
between two while training, and the ETA's drift: how far the finish time it predicted, after
the first tenth of the work, was from the real one, as a share of the whole run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.terminal import TerminalRun, run_on_terminal  # noqa: E402

from tessera.storage.edges import write_bucket  # noqa: E402
from tessera.storage.entities import write_entity_count  # noqa: E402
from tessera.storage.fs import Directory  # noqa: E402

OUTPUT = ROOT / "bench" / "output" / "live_line"
TRAIN_LINE = re.compile(r"^train\s+(?P<share>[\d.]+)%")
ETA = re.compile(r"  ETA (?P<eta>[\d:]+)  ")


def write_graph(root: Path, edges: int, nodes: int, partitions: int, seed: int = 0) -> None:
    """Random edges among `nodes` nodes, bucketed by `node % partitions`."""
    rng = np.random.default_rng(seed)
    lhs, rhs = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    entities = Directory(str(root / "entities"))
    for part in range(partitions):
        write_entity_count(entities, "node", part, len(range(part, nodes, partitions)))
    directory = Directory(str(root / "edges"))
    for lhs_part in range(partitions):
        for rhs_part in range(partitions):
            mask = (lhs % partitions == lhs_part) & (rhs % partitions == rhs_part)
            write_bucket(directory, lhs_part, rhs_part, np.zeros(int(mask.sum()), np.int64),
                         lhs[mask] // partitions, rhs[mask] // partitions)


def config(root: Path, partitions: int, epochs: int) -> dict[str, object]:
    return {
        "entities": {"node": {"num_partitions": partitions}},
        "relations": [{"name": "link", "lhs": "node", "rhs": "node",
                       "operator": "translation"}],
        "dimension": 100, "comparator": "dot", "loss_fn": "ranking", "lr": 0.1,
        "num_epochs": epochs, "batch_size": 1000, "num_batch_negs": 50,
        "num_uniform_negs": 50, "eval_fraction": 0, "workers": 2,
        "entity_path": str(root / "entities"), "edge_paths": [str(root / "edges")],
        "checkpoint_path": str(root / "checkpoints")}


def seconds(text: str) -> int:
    parts = [int(part) for part in text.split(":")]
    return sum(part * 60 ** power for power, part in enumerate(reversed(parts)))


def measure(run: TerminalRun) -> dict[str, float]:
    """Updates, the longest gap between two while training, and the ETA's drift."""
    train = [(at, line, match) for at, line in run.updates
             if (match := TRAIN_LINE.match(line))]
    if len(train) < 2:
        raise SystemExit(f"too few live-line updates to measure:\n{run.text}")
    times = [at for at, _, _ in train]
    start, end = times[0], times[-1]
    predictions = [at + seconds(eta["eta"]) for at, line, match in train
                   if float(match["share"]) >= 10 and (eta := ETA.search(line))]
    drift = max((abs(predicted - end) for predicted in predictions), default=float("nan"))
    return {"updates": len(train), "seconds": end,
            "max_gap": max(b - a for a, b in zip(times, times[1:])),
            "eta_drift": drift / (end - start) if end > start else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    rows = []
    for partitions in args.partitions:
        root = OUTPUT / f"e{args.edges}_p{partitions}"
        shutil.rmtree(root, ignore_errors=True)
        write_graph(root, args.edges, args.nodes, partitions)
        (root / "config.json").write_text(json.dumps(config(root, partitions, args.epochs)))
        run = run_on_terminal("train", str(root / "config.json"))
        if run.returncode != 0:
            raise SystemExit(run.text)
        rows.append((partitions, measure(run)))
    print(f"{'edges':>9}  {'partitions':>10}  {'epochs':>6}  {'seconds':>7}  {'updates':>7}  "
          f"{'max gap s':>9}  {'ETA drift':>9}")
    for partitions, row in rows:
        print(f"{args.edges:>9,}  {partitions:>10}  {args.epochs:>6}  {row['seconds']:>7.1f}  "
              f"{row['updates']:>7.0f}  {row['max_gap']:>9.2f}  {row['eta_drift']:>9.0%}")


if __name__ == "__main__":
    main()
