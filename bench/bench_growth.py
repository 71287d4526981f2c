"""Growing a graph without forgetting: old and new triples' filtered MRR after each recipe.

A knowledge graph is split by entity: a seeded fifth of its entities is "new", the rest "old".
Old triples have both ends old, new ones touch a new entity. The old model trains on the old
triples (the shipped tuned UMLS config); the new triples are then imported into the same
entity folder (known entities keep their ids) and each recipe trains the grown graph from the
old model (`init_path`). The table gives the filtered test MRR of the old triples before and
after growth, of the new triples, and what random scores would get.

    python bench/bench_growth.py --runs 3                         # UMLS, bundled
    python bench/bench_growth.py --data /tmp/kgdata/kinships      # a folder named after it
    python bench/bench_growth.py --recipes new-alone replay -p num_epochs=50

`replay` is the documented command: the new edge set alone in `edge_paths`, the old one
replayed by default. Ranking is against every entity the model has (before growth the old
ones, after it all of them), with the other known triples of every split filtered out.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_quality import SPLITS, run, split_file, tuned_config  # noqa: E402
from bench_train import write_json_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "bench" / "output" / "growth"
TESSERA = [sys.executable, "-m", "tessera"]
Triple = tuple[str, str, str]


# --- the split -------------------------------------------------------------------------

def read_triples(folder: Path) -> dict[str, list[Triple]]:
    triples = {}
    for split in SPLITS:
        path = split_file(folder, split)
        if path is None:
            raise SystemExit(f"{folder}: expected {split}.txt or {split}.tsv")
        rows = (line.rstrip("\n").split("\t") for line in path.read_text().splitlines())
        triples[split] = [(h, r, t) for h, r, t in rows]
    return triples


def new_entities(triples: dict[str, list[Triple]], share: float, seed: int) -> set[str]:
    """A seeded `share` of the entities of the training triples."""
    entities = sorted({e for h, _, t in triples["train"] for e in (h, t)})
    return set(random.Random(seed).sample(entities, round(share * len(entities))))


def split_by_entity(triples: dict[str, list[Triple]], new: set[str]
                    ) -> dict[str, list[Triple]]:
    """old_{split}: both ends old; new_{split}: touching a new entity. Old valid and test
    triples whose entities never occur in old training triples are dropped (the old model
    has no row for them); so are new ones whose entities are not in any training triple."""
    old_known = {e for h, _, t in triples["train"] if h not in new and t not in new
                 for e in (h, t)}
    all_known = {e for h, _, t in triples["train"] for e in (h, t)}
    parts: dict[str, list[Triple]] = {}
    for split, rows in triples.items():
        old = [x for x in rows if x[0] not in new and x[2] not in new]
        fresh = [x for x in rows if x[0] in new or x[2] in new]
        if split != "train":
            old = [x for x in old if x[0] in old_known and x[2] in old_known]
            fresh = [x for x in fresh if x[0] in all_known and x[2] in all_known]
        parts[f"old_{split}"], parts[f"new_{split}"] = old, fresh
    return parts


def random_mrr(queries: list[Triple], known: set[Triple], num_entities: int) -> float:
    """The filtered MRR that uniformly random scores get, on average: a side with m
    candidates left after filtering has expected reciprocal rank H(m) / m."""
    tails, heads = defaultdict(set), defaultdict(set)
    for h, r, t in known:
        tails[(h, r)].add(t)
        heads[(r, t)].add(h)
    harmonic = [0.0]
    for m in range(1, num_entities + 1):
        harmonic.append(harmonic[-1] + 1 / m)
    values = []
    for h, r, t in queries:
        for others in (tails[(h, r)], heads[(r, t)]):
            m = num_entities - (len(others) - 1)
            values.append(harmonic[m] / m)
    return statistics.fmean(values)


# --- the commands ----------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """Where one run's files go."""

    folder: Path

    def edges(self, part: str) -> str:
        return str(self.folder / "edges" / part)

    def checkpoints(self, name: str) -> str:
        return str(self.folder / "checkpoints" / name)

    def config(self, base: dict[str, Any], **keys: Any) -> dict[str, Any]:
        return {**base, "entity_path": str(self.folder / "entities"),
                "edge_paths": [self.edges("old_train")],
                "checkpoint_path": self.checkpoints("old"), **keys}


def tessera(command: str, config: dict[str, Any], folder: Path, name: str,
            *args: str) -> None:
    path = write_json_config(folder / f"{name}.json", config)
    run([*TESSERA, command, str(path), *args, "--log-format", "json"], folder / f"{name}.log")


def import_parts(layout: Layout, base: dict[str, Any], parts: list[str], name: str) -> None:
    files = [str(layout.folder / f"{part}.tsv") for part in parts]
    config = layout.config(base, edge_paths=[layout.edges(part) for part in parts])
    tessera("import", config, layout.folder, name, *files, "--lhs-col", "0", "--rel-col", "1",
            "--rhs-col", "2")


def filtered_mrr(layout: Layout, base: dict[str, Any], checkpoint: str, part: str,
                 filters: list[str]) -> float:
    output = layout.folder / f"mrr-{Path(checkpoint).name}-{part}.json"
    config = layout.config(base, edge_paths=[layout.edges(part)], checkpoint_path=checkpoint)
    tessera("eval", config, layout.folder, f"eval-{Path(checkpoint).name}-{part}", "--filtered",
            "--filter-paths", *[layout.edges(f) for f in filters], "--output", str(output))
    return float(json.loads(output.read_text())["mrr"])


# --- the recipes: how the grown graph trains ------------------------------------------
# The edge sets: "old_train" imported before growth; "new_train" (the triples that touch a
# new entity) and "all_train" (old and new together) by the import that grew the graph.

@dataclass(frozen=True)
class Recipe:
    label: str  # as the table shows it
    keys: Callable[[Layout], dict[str, Any]]  # of the grown run, beside init_path


RECIPES = {
    # The docs' recipe before replay: the new import's edges alone.
    "new-alone": Recipe("new edges alone (replay_paths: [])", lambda layout: {
        "edge_paths": [layout.edges("new_train")], "replay_paths": []}),
    # The documented command now: the same, with the old edges replayed (the default).
    "replay": Recipe("new edges, old ones replayed (the default)", lambda layout: {
        "edge_paths": [layout.edges("new_train")]}),
    "replay-half": Recipe("new edges, half the old ones replayed", lambda layout: {
        "edge_paths": [layout.edges("new_train")], "init_old_edge_fraction": 0.5}),
    # PBG's way: every edge set, one after the other.
    "old-then-new": Recipe("old then new edge sets", lambda layout: {
        "edge_paths": [layout.edges("old_train"), layout.edges("new_train")]}),
    # The whole grown graph imported as one edge set: with and without the replay.
    "whole-replay": Recipe("whole graph, old edges replayed too", lambda layout: {
        "edge_paths": [layout.edges("all_train")]}),
    "whole": Recipe("whole graph (replay_paths: [])", lambda layout: {
        "edge_paths": [layout.edges("all_train")], "replay_paths": []}),
    # The reference: the grown graph trained from scratch, without init_path.
    "scratch": Recipe("whole graph from scratch", lambda layout: {
        "edge_paths": [layout.edges("all_train")], "init_path": None}),
}


def train_recipe(layout: Layout, base: dict[str, Any], name: str, epochs: int) -> str:
    checkpoint = layout.checkpoints(name)
    keys = {"init_path": layout.checkpoints("old"), **RECIPES[name].keys(layout)}
    config = layout.config(base, checkpoint_path=checkpoint, num_epochs=epochs, **keys)
    tessera("train", config, layout.folder, f"train-{name}")
    return checkpoint


# --- one run ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    recipe: str
    old_before: float
    old_after: float
    new_after: float


def one_run(triples: dict[str, list[Triple]], base: dict[str, Any], recipes: list[str],
            epochs: int, seed: int, tag: str) -> tuple[list[Row], dict[str, float]]:
    layout = Layout(OUTPUT / tag / str(seed))
    shutil.rmtree(layout.folder, ignore_errors=True)
    layout.folder.mkdir(parents=True)
    parts = split_by_entity(triples, new_entities(triples, 0.2, seed))
    for part, rows in parts.items():
        (layout.folder / f"{part}.tsv").write_text("".join(f"{h}\t{r}\t{t}\n"
                                                           for h, r, t in rows))
    base = {**base, "seed": seed}
    old_parts = [f"old_{s}" for s in SPLITS]
    new_parts = [f"new_{s}" for s in SPLITS]
    parts["all_train"] = parts["old_train"] + parts["new_train"]
    (layout.folder / "all_train.tsv").write_text("".join(f"{h}\t{r}\t{t}\n"
                                                         for h, r, t in parts["all_train"]))
    import_parts(layout, base, old_parts, "import-old")
    tessera("train", layout.config(base), layout.folder, "train-old")
    before = filtered_mrr(layout, base, layout.checkpoints("old"), "old_test", old_parts)
    old_entities = {e for h, _, t in parts["old_train"] for e in (h, t)}
    import_parts(layout, base, new_parts + ["all_train"], "import-new")  # grows the dictionary
    all_entities = old_entities | {e for h, _, t in parts["new_train"] for e in (h, t)}
    results = []
    for name in recipes:
        checkpoint = train_recipe(layout, base, name, epochs)
        old_after, new_after = (filtered_mrr(layout, base, checkpoint, part,
                                             old_parts + new_parts)
                                for part in ("old_test", "new_test"))
        results.append(Row(name, before, old_after, new_after))
        print(f"seed {seed} {name}: old triples {before:.3f} -> {old_after:.3f}, "
              f"new triples {new_after:.3f}", flush=True)
    known = {x for part in old_parts + new_parts for x in parts[part]}
    baselines = {"old_before": random_mrr(parts["old_test"], {
                     x for part in old_parts for x in parts[part]}, len(old_entities)),
                 "old_after": random_mrr(parts["old_test"], known, len(all_entities)),
                 "new_after": random_mrr(parts["new_test"], known, len(all_entities))}
    return results, baselines


def summary(values: list[float], sign: str = "") -> str:
    """The median and, of several runs, the range (`sign`: "+" for changes)."""
    median = f"{statistics.median(values):{sign}.3f}"
    if len(values) == 1:
        return median
    return f"{median} ({min(values):{sign}.3f} to {max(values):{sign}.3f})"


def print_table(rows: list[Row], baselines: list[dict[str, float]], runs: int) -> None:
    print(f"\nFiltered test MRR, median (range) of {runs} run(s):\n")
    print("| recipe | old triples before | old triples after | change | new triples |")
    print("|---|---|---|---|---|")
    for name in dict.fromkeys(row.recipe for row in rows):
        group = [row for row in rows if row.recipe == name]
        print(f"| {RECIPES[name].label} | {summary([r.old_before for r in group])} | "
              f"{summary([r.old_after for r in group])} | "
              f"{summary([r.old_after - r.old_before for r in group], '+')} | "
              f"{summary([r.new_after for r in group])} |")
    print(f"| random scores | {summary([b['old_before'] for b in baselines])} | "
          f"{summary([b['old_after'] for b in baselines])} | | "
          f"{summary([b['new_after'] for b in baselines])} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "umls",
                        help="a folder with train, valid and test files (.txt or .tsv), "
                        "named after its dataset")
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--runs", type=int, default=1, help="seeds 0..runs-1")
    parser.add_argument("--epochs", type=int, help="epochs of the grown run (default: the "
                        "config's num_epochs)")
    parser.add_argument("-p", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a key of the config (JSON value)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dataset = args.data.resolve().name
    overrides = {key: json.loads(value) for key, _, value in
                 (item.partition("=") for item in args.overrides)}
    base = {**tuned_config("umls"), **overrides}
    triples = read_triples(args.data)
    rows, baselines = [], []
    for seed in range(args.runs):
        run_rows, run_baselines = one_run(triples, base, args.recipes,
                                          args.epochs or base["num_epochs"], seed,
                                          dataset)
        rows += run_rows
        baselines.append(run_baselines)
    print(f"\n{dataset}: the tuned UMLS config, overrides {overrides or 'none'}; "
          f"grown runs of {args.epochs or base['num_epochs']} epochs.")
    print_table(rows, baselines, args.runs)


if __name__ == "__main__":
    main()
