"""Reading an import back: entity names per partition, edges as (relation, lhs, rhs) names."""

from __future__ import annotations

from collections import Counter

from tessera.config import ConfigSchema
from tessera.storage.edges import read_bucket
from tessera.storage.entities import (
    read_entity_count,
    read_entity_names,
    read_relation_names,
)
from tessera.storage.fs import Directory

FOLLOWS_AND_LIKES = [{"name": "follows", "lhs": "user", "rhs": "user"},
                     {"name": "likes", "lhs": "user", "rhs": "item"}]


def grid(config: ConfigSchema) -> tuple[int, int]:
    return config.partition_grid()


def entity_names(config: ConfigSchema) -> dict[tuple[str, int], list[str]]:
    """Every (type, partition)'s names, checked against its count file."""
    directory = Directory(config.entity_path, config.storage_options)
    names = {}
    for entity_type, entity in config.entities.items():
        for part in range(entity.num_partitions):
            names[entity_type, part] = read_entity_names(directory, entity_type, part)
            assert read_entity_count(directory, entity_type, part) == len(
                names[entity_type, part])
    return names


def imported_edges(config: ConfigSchema, edge_path_index: int = 0) -> Counter:
    """The edges of one edge path as a multiset of (relation, lhs name, rhs name)."""
    names = entity_names(config)
    if config.dynamic_relations:
        relation_names = read_relation_names(Directory(config.entity_path,
                                                       config.storage_options))
        sides = [(config.relations[0].lhs, config.relations[0].rhs)] * len(relation_names)
    else:
        relation_names = [relation.name for relation in config.relations]
        sides = [(relation.lhs, relation.rhs) for relation in config.relations]
    edge_dir = Directory(config.edge_paths[edge_path_index], config.storage_options)
    edges: Counter = Counter()
    num_lhs, num_rhs = grid(config)
    for lhs_part in range(num_lhs):
        for rhs_part in range(num_rhs):
            bucket = read_bucket(edge_dir, lhs_part, rhs_part)
            for rel, lhs, rhs in zip(bucket.rel.tolist(), bucket.lhs.tolist(),
                                     bucket.rhs.tolist()):
                lhs_type, rhs_type = sides[rel]
                # An unpartitioned type lives in partition 0 whatever the bucket.
                lhs_names = names[lhs_type, lhs_part if (lhs_type, lhs_part) in names else 0]
                rhs_names = names[rhs_type, rhs_part if (rhs_type, rhs_part) in names else 0]
                edges[relation_names[rel], lhs_names[lhs], rhs_names[rhs]] += 1
    return edges
