"""`tessera eval`: rank the edges of edge sets with the latest checkpoint.

Raw mode ranks each edge against sampled negatives, bucket by bucket, so it works at any
scale: PBG's `torchbiggraph_eval` protocol, with the training negative counts
(`num_batch_negs`, `num_uniform_negs`; the `eval_num_*` counts are for the evaluation during
training). Filtered mode ranks each edge against every entity of the corrupted side's type,
and does not count as errors the other true edges found in the filter edge sets: the protocol
of link-prediction papers. It holds all embeddings of the types involved in memory; a
featurized type's are its entities', each the mean of its features' (see `featurized`). The
result says in words what was ranked against what, because the two modes' figures differ
widely: sampled negatives repeat entities (drawn with replacement) and include true edges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..config import ConfigSchema
from ..data.batching import iter_batches
from ..data.graph_data import GraphData, check_edge_paths, check_has_edges
from ..edgelist import EdgeList
from ..log_records import EVALUATION_FINISHED
from ..model import EmbeddingModel
from ..model.model_io import load_model
from ..model.negatives import degree_negatives, degree_pools
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore, read_consistently, unread
from ..storage.entity_features import EntityFeatures
from .featurized import entity_tables, featurized_side_ids, read_featurized_entities
from .filtering import KnownEdges, mask_known
from .metrics import RankingMetrics
from .sampled import DegreeOf, TablesOf, rank_against_sampled

# Upper bound on batch x candidates scores computed at once in filtered mode.
MAX_SCORES_PER_BATCH = 20_000_000


def evaluate_checkpoint(config: ConfigSchema, reporter: Reporter, *, filtered: bool = False,
                        filter_paths: list[str] | None = None) -> dict[str, Any]:
    """Metrics of the config's edge_paths under the latest checkpoint."""
    check_edge_paths(config)
    data = GraphData(config)
    check_has_edges(data)
    store = CheckpointStore.from_config(config)
    total = sum(sum(sizes.values()) for sizes in data.bucket_sizes)

    def evaluate(version: int) -> tuple[int, RankingMetrics]:
        with reporter.task("eval", total=total, unit="edges") as task:
            if filtered:
                return version, _filtered(config, data, store, version,
                                          filter_paths or config.edge_paths, task)
            return version, _raw(config, data, store, version, task)

    version, metrics = read_consistently(store, "evaluate", evaluate)
    result = {"mode": "filtered" if filtered else "raw", "checkpoint_version": version,
              "ranked_against": _ranked_against(config, data, filtered,
                                                filter_paths or config.edge_paths),
              **metrics.summary(standard_error=True)}
    reporter.event(EVALUATION_FINISHED, **result)
    return result


def _raw(config: ConfigSchema, data: GraphData, store: CheckpointStore, version: int,
         task: Any) -> RankingMetrics:
    model = _load_model(config, data, store, version)
    metrics = RankingMetrics()
    tables: dict[tuple[str, int], torch.Tensor] = {}
    for edge_path_idx in range(len(config.edge_paths)):
        for bucket in data.bucket_grid():
            edges = data.read_edges(edge_path_idx, bucket)
            if len(edges) == 0:
                continue
            lhs_keys, rhs_keys = data.partition_keys(bucket)
            _hold_partitions(tables, set(lhs_keys) | set(rhs_keys),
                             lambda key: _read_partition(config, data, store, version, key))
            metrics.merge(rank_against_sampled(
                model, edges, _tables_of(tables, lhs_keys, rhs_keys),
                batch_size=config.batch_size, num_batch_negs=config.num_batch_negs,
                num_uniform_negs=config.num_uniform_negs,
                dynamic_relations=config.dynamic_relations, ranked=task.advance,
                degree_of=_degree_of(config, edges, tables, lhs_keys, rhs_keys)))
    return metrics


def _degree_of(config: ConfigSchema, edges: EdgeList, tables: dict[tuple[str, int], torch.Tensor],
               lhs_keys: list[tuple[str, int]], rhs_keys: list[tuple[str, int]]
               ) -> DegreeOf | None:
    """Each relation's degree negatives (`num_degree_negs`), by degree among the edges of the
    bucket ranked; None without any."""
    if not config.num_degree_negs:
        return None
    pools = degree_pools(edges, lhs_keys, rhs_keys, tables.__getitem__)
    return lambda relation: degree_negatives(config.num_degree_negs, pools, lhs_keys[relation],
                                             rhs_keys[relation])


def _hold_partitions(tables: dict[tuple[str, int], torch.Tensor],
                     wanted: set[tuple[str, int]],
                     read: Callable[[tuple[str, int]], torch.Tensor]) -> None:
    """Make `tables` hold exactly the `wanted` partitions. The others are dropped before any
    is read, so memory follows one bucket's partitions (not the last bucket's as well), and a
    partition the previous bucket used is kept rather than read again."""
    for key in [key for key in tables if key not in wanted]:
        del tables[key]
    for key in sorted(wanted - tables.keys()):
        tables[key] = read(key)


def _ranked_against(config: ConfigSchema, data: GraphData, filtered: bool,
                    filter_paths: list[str]) -> str:
    """What each edge was ranked against, in words, for the output."""
    sides = " and ".join(side for side, disabled in (("lhs", config.disable_lhs_negs),
                                                     ("rhs", config.disable_rhs_negs))
                         if not disabled)
    if config.reciprocal_relations:  # each side is the right-hand side of one direction
        sides = "lhs (as the rhs of the relation's inverse) and rhs"
    if filtered:
        return (f"each edge's {sides} against every entity of its type, other true edges "
                f"(of {', '.join(filter_paths)}) not counted (filtered)")
    if any(relation.all_negs for relation in config.relations):
        return (f"each edge's {sides} against every entity of its partition (all_negs), "
                "other true edges counted as mistakes (unfiltered; see --filtered)")
    batch = max(min(config.num_batch_negs, config.batch_size, data.max_bucket_size()) - 1, 0)
    words = (f"each edge's {sides} against up to {batch} batch + {config.num_uniform_negs} "
             "uniform sampled negatives (num_batch_negs, num_uniform_negs; uniform ones drawn "
             "with replacement, the true entity itself not counted), other true edges counted "
             "as mistakes (unfiltered; see --filtered)")
    if config.num_degree_negs:
        words += (f"; also {config.num_degree_negs} negatives drawn by degree in the bucket "
                  "(num_degree_negs)")
    largest = max(max(counts) for counts in data.entity_counts.values())
    repeats = (batch + config.num_uniform_negs + config.num_degree_negs) / largest
    if repeats > 1.5:
        words += (f"; with at most {largest} entities per partition each wrong entity is "
                  f"counted about {repeats:.0f} times, so ranks are about {repeats:.0f} times "
                  "those against each entity once")
    return words


def _filtered(config: ConfigSchema, data: GraphData, store: CheckpointStore, version: int,
              filter_paths: list[str], task: Any) -> RankingMetrics:
    featurized = read_featurized_entities(data)
    # Every relation scores against all entities; nothing is sampled. A featurized type is
    # ranked as a plain one whose rows are its entities' embeddings (from their features).
    # With reciprocal relations both sides are ranked as right-hand sides (of r and of its
    # inverse): left-hand corruptions would be scored for nothing.
    plain_config = dataclasses.replace(
        config, disable_lhs_negs=config.disable_lhs_negs or config.reciprocal_relations,
        relations=[dataclasses.replace(relation, all_negs=True)
                   for relation in config.relations],
        entities={name: dataclasses.replace(entity, featurized=False)
                  for name, entity in config.entities.items()})
    model = _load_model(plain_config, data, store, version)
    tables = entity_tables(config, {
        entity: torch.cat([_read_partition(config, data, store, version, (entity, part))
                           for part in range(len(counts))])
        for entity, counts in data.entity_counts.items()}, featurized)
    known = KnownEdges.from_edge_sets([
        _global_edges(GraphData(dataclasses.replace(config, edge_paths=[path])), 0, featurized)
        for path in filter_paths])
    metrics = RankingMetrics()
    lhs_types, rhs_types = data.relation_types("lhs"), data.relation_types("rhs")
    for edge_path_idx in range(len(config.edge_paths)):
        lhs, rel, rhs = _global_edges(data, edge_path_idx, featurized)
        edges = EdgeList.from_ids(torch.from_numpy(rel), torch.from_numpy(lhs),
                                  torch.from_numpy(rhs))
        largest = max(len(t) for t in tables.values())
        batch_size = max(1, min(config.batch_size, MAX_SCORES_PER_BATCH // largest))
        with torch.no_grad():
            for batch in iter_batches(edges, batch_size, config.dynamic_relations,
                                      torch.Generator().manual_seed(0)):
                relation = 0 if config.dynamic_relations else int(batch.rel[0])
                result = model(batch, tables[lhs_types[relation]], tables[rhs_types[relation]],
                               num_batch_negs=0, num_uniform_negs=0)
                _rank_filtered(result, batch, known, metrics)
                task.advance(len(batch))
    return metrics


def _rank_filtered(result: Any, batch: EdgeList, known: KnownEdges,
                   metrics: RankingMetrics) -> None:
    lhs, rel, rhs = batch.lhs.ids, batch.rel, batch.rhs.ids
    for pos, neg, lookup in ((result.lhs_pos_scores, result.lhs_neg_scores, known.known_lhs),
                             (result.rhs_pos_scores, result.rhs_neg_scores, known.known_rhs)):
        if neg.shape[1] == 0:
            continue
        neg = neg.clone()
        rows, entities = lookup(lhs, rel, rhs)
        mask_known(neg, rows, entities)
        metrics.add(pos, neg)


def _global_edges(data: GraphData, edge_path_idx: int,
                  featurized: dict[str, EntityFeatures]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lhs, rel, rhs) of an edge set with entity ids made global (partition offsets added);
    a featurized side's ids are its entities' indices (featurized types are unpartitioned)."""
    offsets = {entity: np.concatenate([[0], np.cumsum(counts)[:-1]])
               for entity, counts in data.entity_counts.items()}
    lhs_types = np.array(data.relation_types("lhs"))
    rhs_types = np.array(data.relation_types("rhs"))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for bucket in data.bucket_grid():
        edges = data.read_edges(edge_path_idx, bucket)
        lhs, rhs = (featurized_side_ids(data, edge_path_idx, bucket, side, entity_list, featurized)
                    if entity_list.is_featurized else entity_list.ids.numpy()
                    for side, entity_list in (("lhs", edges.lhs), ("rhs", edges.rhs)))
        rel = edges.rel.numpy()
        lhs = lhs + _offset_of(offsets, lhs_types, rel, bucket.lhs, data)
        rhs = rhs + _offset_of(offsets, rhs_types, rel, bucket.rhs, data)
        parts.append((lhs, rel, rhs))
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    lhs, rel, rhs = (np.concatenate(column) for column in zip(*parts))
    return lhs, rel, rhs


def _offset_of(offsets: dict[str, np.ndarray], types: np.ndarray, rel: np.ndarray, part: int,
               data: GraphData) -> np.ndarray:
    per_relation = np.array([offsets[t][data.partition_of(t, part)] for t in types],
                            dtype=np.int64)
    return per_relation[rel] if len(rel) else np.zeros(0, np.int64)


def _tables_of(tables: dict[tuple[str, int], torch.Tensor], lhs_keys: list[tuple[str, int]],
               rhs_keys: list[tuple[str, int]]) -> TablesOf:
    return lambda relation: (tables[lhs_keys[relation]], tables[rhs_keys[relation]])


def _read_partition(config: ConfigSchema, data: GraphData, store: CheckpointStore,
                    version: int, key: tuple[str, int]) -> torch.Tensor:
    """A partition's embeddings, checked against the entity count and the config's dimension."""
    entity, part = key
    embeddings, _ = store.read_embeddings(entity, part, version,
                                          num_entities=data.entity_counts[entity][part],
                                          dimension=config.entity_dimension(entity),
                                          read_state=unread)
    return torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))


def _load_model(config: ConfigSchema, data: GraphData, store: CheckpointStore,
                version: int) -> EmbeddingModel:
    model = EmbeddingModel(config, data.num_relations)
    load_model(store, version, model, None)
    model.eval()
    return model

