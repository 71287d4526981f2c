"""Seeded synthetic graphs for the benchmarks: planted communities and power-law degrees.

Nodes get Chung-Lu style weights (degree exponent `gamma`) and a random community. A source is
drawn in proportion to its weight; its target is drawn, again by weight, from the source's own
community with probability `intra_community` and from the whole graph otherwise. An embedding
model can therefore recover the communities, which makes held-out ranking quality meaningful.

A share of the edges is withheld as a test set before anything is imported; test edges whose
endpoints never occur in the training edges are dropped, so every test node has an embedding.
Graphs are written as two-column TSV files (`n{id}\\tn{id}`), with the names of the training
nodes in `nodes.txt`, and cached by their parameters.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# Edges are formatted and written this many at a time, to bound memory on large graphs.
WRITE_BLOCK = 1_000_000


@dataclass(frozen=True)
class GraphSpec:
    """What to generate; `edges` is the number of training edges."""

    edges: int
    nodes: int
    seed: int = 0
    test_fraction: float = 0.01
    intra_community: float = 0.8
    nodes_per_community: int = 1000
    gamma: float = 2.5

    @property
    def key(self) -> str:
        return f"e{self.edges}_n{self.nodes}_s{self.seed}"


@dataclass(frozen=True)
class GraphFiles:
    """A generated graph on disk."""

    train: Path
    test: Path
    nodes: Path  # the names of the nodes that occur in the training edges, one a line
    num_train: int
    num_test: int


def ensure_graph(spec: GraphSpec, root: Path) -> GraphFiles:
    """Generate the graph under `root/spec.key` unless a complete copy is already there."""
    folder = root / spec.key
    summary_path = folder / "graph.json"  # written last: its presence marks a complete graph
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        return GraphFiles(folder / "train.tsv", folder / "test.tsv", folder / "nodes.txt",
                          summary["num_train"], summary["num_test"])
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    num_test = round(spec.edges * spec.test_fraction)
    lhs, rhs = sample_edges(spec, spec.edges + num_test, rng)
    order = rng.permutation(lhs.size)
    train, test = order[:spec.edges], order[spec.edges:]
    seen = np.zeros(spec.nodes, dtype=bool)
    seen[lhs[train]] = seen[rhs[train]] = True
    test = test[seen[lhs[test]] & seen[rhs[test]]]
    write_tsv(folder / "train.tsv", lhs[train], rhs[train])
    write_tsv(folder / "test.tsv", lhs[test], rhs[test])
    (folder / "nodes.txt").write_text("".join(map("n{}\n".format, np.flatnonzero(seen))))
    summary_path.write_text(json.dumps({**asdict(spec), "num_train": int(train.size),
                                        "num_test": int(test.size)}, indent=2))
    return GraphFiles(folder / "train.tsv", folder / "test.tsv", folder / "nodes.txt",
                      int(train.size), int(test.size))


def sample_edges(spec: GraphSpec, count: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` edges without self-loops, as (source ids, target ids)."""
    return EdgeSampler.of(spec, rng).draw(count, rng)


@dataclass(frozen=True)
class EdgeSampler:
    """The graph's node weights and communities, from which edges are drawn block by block
    (a graph too large to draw at once is drawn a block at a time from one sampler)."""

    community: np.ndarray  # of each node
    by_community: np.ndarray  # node ids sorted by community
    cumulative: np.ndarray  # cumulative weights in that order
    starts: np.ndarray  # each community's weight range in `cumulative`: (start, end]
    ends: np.ndarray
    intra_community: float  # share of targets drawn from the source's own community

    @classmethod
    def of(cls, spec: GraphSpec, rng: np.random.Generator) -> EdgeSampler:
        weights = rng.permutation(np.arange(1, spec.nodes + 1) ** (-1.0 / (spec.gamma - 1.0)))
        num_communities = max(1, spec.nodes // spec.nodes_per_community)
        community = rng.integers(num_communities, size=spec.nodes)
        # Nodes sorted by community make every community a contiguous slice of one cumulative
        # weight array, so sampling inside a community is one vectorised searchsorted.
        by_community = np.argsort(community, kind="stable")
        cumulative = np.cumsum(weights[by_community])
        ends = cumulative[np.searchsorted(community[by_community], np.arange(num_communities),
                                          side="right") - 1]
        starts = np.concatenate([[0.0], ends[:-1]])
        return cls(community, by_community, cumulative, starts, ends, spec.intra_community)

    def draw(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`count` edges without self-loops, as (source ids, target ids)."""
        cumulative, by_community = self.cumulative, self.by_community
        lhs_parts, rhs_parts, found = [], [], 0
        while found < count:
            wanted = int((count - found) * 1.05) + 16  # a few spare edges for the self-loops
            source = _draw(cumulative, np.zeros(wanted), np.full(wanted, cumulative[-1]), rng)
            intra = rng.random(wanted) < self.intra_community
            own = self.community[by_community[source]]
            low = np.where(intra, self.starts[own], 0.0)
            high = np.where(intra, self.ends[own], cumulative[-1])
            target = _draw(cumulative, low, high, rng)
            keep = source != target
            lhs_parts.append(by_community[source[keep]])
            rhs_parts.append(by_community[target[keep]])
            found += int(keep.sum())
        return np.concatenate(lhs_parts)[:count], np.concatenate(rhs_parts)[:count]


def _draw(cumulative: np.ndarray, low: np.ndarray, high: np.ndarray,
          rng: np.random.Generator) -> np.ndarray:
    """Positions in `cumulative` drawn by weight, each within its (low, high] weight range."""
    points = low + rng.random(low.size) * (high - low)
    return np.minimum(np.searchsorted(cumulative, points, side="right"), cumulative.size - 1)


def write_tsv(path: Path, lhs: np.ndarray, rhs: np.ndarray) -> None:
    """Write `n{lhs}\\tn{rhs}` lines; a temporary name until complete."""
    partial = path.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as file:
        for start in range(0, lhs.size, WRITE_BLOCK):
            block = slice(start, start + WRITE_BLOCK)
            file.write("".join(map("n{}\tn{}\n".format, lhs[block].tolist(),
                                   rhs[block].tolist())))
    partial.replace(path)
