"""Seeded synthetic graphs for the benchmarks: planted communities and power-law degrees.

Nodes get Chung-Lu style weights (degree exponent `gamma`) and a random community. A source is
drawn in proportion to its weight; its target is drawn, again by weight, from the source's own
community with probability `intra_community` and from the whole graph otherwise. An embedding
model can therefore recover the communities, which makes held-out ranking quality meaningful.

A share of the edges is withheld as a test set before anything is imported; test edges whose
endpoints never occur in the training edges are dropped, so every test node has an embedding.
Graphs are written as two-column TSV files (`n{id}\\tn{id}`), with the names of the training
nodes in `nodes.txt`, and cached by their parameters.

With `relations` R > 0 the graph is a knowledge graph: each node also gets one of `types`
types, each relation a seeded source type and target type, and each edge a relation, drawn
with Zipf frequencies (relation r in proportion to 1 / (r + 1)). An edge's source is drawn by
weight among the nodes of its relation's source type, its target among those of the target
type: in the source's community with probability `intra_community`, in any otherwise. The
relation thus decides which nodes can be targets, as in a typed knowledge base, and a model
with per-relation operators can learn it. (Relations that instead map each community to
another, by a seeded permutation, were learnt much more slowly by complex_diagonal: after 2
epochs of 20,000 edges over 5,000 nodes, a held-out MRR of 0.006 to 0.03 with communities of
1000 to 50 nodes, against 0.46 for these with communities of 100.) Such a graph is written
as three-column TSV (`n{id}\\tn{id}\\tr{relation}`: both importers take the relation as
`--rel-col 2`); test edges whose relation never occurs in the training edges are dropped too.
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
    relations: int = 0  # 0: a graph of one relation, in two columns
    types: int = 10  # node types of a graph with relations

    @property
    def key(self) -> str:
        planted = ""
        if self.relations:
            planted = f"_r{self.relations}_t{self.types}_c{self.nodes_per_community}"
        return f"e{self.edges}_n{self.nodes}{planted}_s{self.seed}"


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
    lhs, rhs, rel = EdgeSampler.of(spec, rng).draw_with_relations(spec.edges + num_test, rng)
    order = rng.permutation(lhs.size)
    train, test = order[:spec.edges], order[spec.edges:]
    seen = np.zeros(spec.nodes, dtype=bool)
    seen[lhs[train]] = seen[rhs[train]] = True
    test = test[seen[lhs[test]] & seen[rhs[test]]]
    relations = None
    if spec.relations:
        relations = rel  # written as a third column
        trained = np.zeros(spec.relations, dtype=bool)
        trained[rel[train]] = True
        test = test[trained[rel[test]]]
    write_tsv(folder / "train.tsv", lhs[train], rhs[train],
              None if relations is None else relations[train])
    write_tsv(folder / "test.tsv", lhs[test], rhs[test],
              None if relations is None else relations[test])
    (folder / "nodes.txt").write_text("".join(map("n{}\n".format, np.flatnonzero(seen))))
    summary = asdict(spec)
    if not spec.relations:  # the summary of a one-relation graph stays as it was
        del summary["relations"], summary["types"]
    summary_path.write_text(json.dumps({**summary, "num_train": int(train.size),
                                        "num_test": int(test.size)}, indent=2))
    return GraphFiles(folder / "train.tsv", folder / "test.tsv", folder / "nodes.txt",
                      int(train.size), int(test.size))


def sample_edges(spec: GraphSpec, count: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` edges without self-loops, as (source ids, target ids)."""
    return EdgeSampler.of(spec, rng).draw(count, rng)


@dataclass(frozen=True)
class PlantedRelations:
    """A knowledge graph's relations, as in typed knowledge bases: relation r links nodes of
    type `source_types[r]` to nodes of type `target_types[r]`, in the source's community with
    probability `intra_community` (in any community otherwise). Nodes are sorted by type, then
    community: each type's nodes, and each (type, community) block, are one slice."""

    cumulative: np.ndarray  # cumulative Zipf weights of the relations
    source_types: np.ndarray
    target_types: np.ndarray
    num_communities: int

    @classmethod
    def of(cls, spec: GraphSpec, num_communities: int,
           rng: np.random.Generator) -> PlantedRelations:
        return cls(np.cumsum(1.0 / np.arange(1, spec.relations + 1)),
                   rng.integers(spec.types, size=spec.relations),
                   rng.integers(spec.types, size=spec.relations), num_communities)

    def type_blocks(self, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first and last block of each type's slice."""
        return types * self.num_communities, (types + 1) * self.num_communities - 1


@dataclass(frozen=True)
class EdgeSampler:
    """The graph's node weights and communities, from which edges are drawn block by block
    (a graph too large to draw at once is drawn a block at a time from one sampler)."""

    community: np.ndarray  # of each node
    by_community: np.ndarray  # node ids sorted by community (with relations: type, community)
    cumulative: np.ndarray  # cumulative weights in that order
    starts: np.ndarray  # each community's (type and community's) weight range in
    ends: np.ndarray  # `cumulative`: (start, end]
    intra_community: float  # share of targets drawn from the source's own community
    relations: PlantedRelations | None = None

    @classmethod
    def of(cls, spec: GraphSpec, rng: np.random.Generator) -> EdgeSampler:
        weights = rng.permutation(np.arange(1, spec.nodes + 1) ** (-1.0 / (spec.gamma - 1.0)))
        num_communities = max(1, spec.nodes // spec.nodes_per_community)
        community = rng.integers(num_communities, size=spec.nodes)
        # (Drawing nothing more without relations keeps those graphs as they were.)
        relations = PlantedRelations.of(spec, num_communities, rng) if spec.relations else None
        block, num_blocks = community, num_communities
        if relations is not None:
            block = rng.integers(spec.types, size=spec.nodes) * num_communities + community
            num_blocks = spec.types * num_communities
        # Nodes sorted by block make every block a contiguous slice of one cumulative weight
        # array, so sampling inside a block is one vectorised searchsorted.
        by_community = np.argsort(block, kind="stable")
        cumulative = np.cumsum(weights[by_community])
        # The weight up to each block's last node (an empty block's range is empty).
        ends = np.concatenate([[0.0], cumulative])[
            np.searchsorted(block[by_community], np.arange(num_blocks), side="right")]
        starts = np.concatenate([[0.0], ends[:-1]])
        return cls(community, by_community, cumulative, starts, ends, spec.intra_community,
                   relations)

    def draw(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`count` edges without self-loops, as (source ids, target ids)."""
        lhs, rhs, _ = self.draw_with_relations(count, rng)
        return lhs, rhs

    def draw_with_relations(self, count: int, rng: np.random.Generator
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`count` edges without self-loops, as (source ids, target ids, relations); the
        relations are all 0 in a graph without them."""
        cumulative, by_community = self.cumulative, self.by_community
        lhs_parts, rhs_parts, rel_parts, found = [], [], [], 0
        while found < count:
            wanted = int((count - found) * 1.05) + 16  # a few spare edges for the self-loops
            relation = np.zeros(wanted, dtype=np.int64)
            anywhere = np.zeros(wanted), np.full(wanted, cumulative[-1])
            if self.relations is None:
                source = _draw(cumulative, *anywhere, rng)
                intra = rng.random(wanted) < self.intra_community
                block = self.community[by_community[source]]
            else:
                relations = self.relations
                relation = _draw(relations.cumulative, np.zeros(wanted),
                                 np.full(wanted, relations.cumulative[-1]), rng)
                first, last = relations.type_blocks(relations.source_types[relation])
                source = _draw(cumulative, self.starts[first], self.ends[last], rng)
                intra = rng.random(wanted) < self.intra_community
                first, last = relations.type_blocks(relations.target_types[relation])
                anywhere = self.starts[first], self.ends[last]  # of the target type
                block = first + self.community[by_community[source]]
            low = np.where(intra, self.starts[block], anywhere[0])
            high = np.where(intra, self.ends[block], anywhere[1])
            target = _draw(cumulative, low, high, rng)
            keep = (source != target) & (high > low)  # (an empty block has no target)
            lhs_parts.append(by_community[source[keep]])
            rhs_parts.append(by_community[target[keep]])
            rel_parts.append(relation[keep])
            found += int(keep.sum())
        return (np.concatenate(lhs_parts)[:count], np.concatenate(rhs_parts)[:count],
                np.concatenate(rel_parts)[:count])


def _draw(cumulative: np.ndarray, low: np.ndarray, high: np.ndarray,
          rng: np.random.Generator) -> np.ndarray:
    """Positions in `cumulative` drawn by weight, each within its (low, high] weight range."""
    points = low + rng.random(low.size) * (high - low)
    return np.minimum(np.searchsorted(cumulative, points, side="right"), cumulative.size - 1)


def write_tsv(path: Path, lhs: np.ndarray, rhs: np.ndarray,
              rel: np.ndarray | None = None) -> None:
    """Write `n{lhs}\\tn{rhs}` lines, or `n{lhs}\\tn{rhs}\\tr{rel}` ones with relations; a
    temporary name until complete."""
    partial = path.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as file:
        for start in range(0, lhs.size, WRITE_BLOCK):
            block = slice(start, start + WRITE_BLOCK)
            columns = [lhs[block].tolist(), rhs[block].tolist()]
            line = "n{}\tn{}\n"
            if rel is not None:
                columns.append(rel[block].tolist())
                line = "n{}\tn{}\tr{}\n"
            file.write("".join(map(line.format, *columns)))
    partial.replace(path)
