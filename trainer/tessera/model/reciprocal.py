"""Reciprocal relations (`reciprocal_relations`, Tessera only): every relation r has an inverse.

An edge (u, r, v) trains as itself and as (v, r + R, u), R being the number of relation types
of the edge files: relation r + R is r's inverse, with the types of r's sides exchanged and
operator parameters of its own (the model holds 2R relations; with dynamic relations, 2R rows
of each operator). A query is answered by the direction that predicts its missing side as a
right-hand side, the protocol of Lacroix et al. (2018): (u, r, ?) through r, (?, r, v) as
(v, r + R, ?). `query_direction` makes that choice for evaluation and `neighbors`;
`directions` makes it for a batch, for training and for the evaluators' scores.

Edge files, entity files and embeddings are unchanged: the inverse edges are made batch by
batch, in memory, from the edges as read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..config import ConfigSchema, RelationSchema
from ..edgelist import EdgeList
from .negatives import DegreeNegatives

INVERSE_SUFFIX = "_inverse"


def inverse_relation(relation: RelationSchema) -> RelationSchema:
    """Relation r's inverse: its sides exchanged, the rest (operator, weight, negatives) kept."""
    return dataclasses.replace(relation, name=relation.name + INVERSE_SUFFIX, lhs=relation.rhs,
                               rhs=relation.lhs)


def model_relations(config: ConfigSchema) -> list[RelationSchema]:
    """The relations the model holds settings for: the config's, then their inverses with
    reciprocal relations (with dynamic relations, the template and its inverse)."""
    relations = list(config.relations)
    if config.reciprocal_relations:
        relations += [inverse_relation(relation) for relation in relations]
    return relations


def model_relation_names(config: ConfigSchema, names: list[str]) -> list[str]:
    """The names of the model's relation types, from the edge files' `names`."""
    if not config.reciprocal_relations:
        return names
    return names + [name + INVERSE_SUFFIX for name in names]


def reversed_edges(edges: EdgeList, num_relations: int) -> EdgeList:
    """(v, r + R, u) for each edge (u, r, v), R = `num_relations` (where `rel` is: the host,
    for a device batch of one relation type)."""
    return EdgeList(rel=edges.rel + num_relations, lhs=edges.rhs, rhs=edges.lhs)


@dataclass(frozen=True)
class Direction:
    """A batch as one direction scores it: its edges, the tables of their sides, its degree
    negatives, and whether it is the inverse direction."""

    edges: EdgeList
    lhs_table: torch.Tensor
    rhs_table: torch.Tensor
    degree: DegreeNegatives | None
    inverse: bool = False


def directions(edges: EdgeList, lhs_table: torch.Tensor, rhs_table: torch.Tensor,
               degree: DegreeNegatives | None, num_relations: int | None) -> list[Direction]:
    """The directions a batch trains and is scored in: itself, and with reciprocal relations
    (`num_relations`, R, given) its reversal on the exchanged tables."""
    forward = Direction(edges, lhs_table, rhs_table, degree)
    if num_relations is None:
        return [forward]
    return [forward, Direction(reversed_edges(edges, num_relations), rhs_table, lhs_table,
                               None if degree is None else degree.swapped(), inverse=True)]


def query_direction(relation: int, side: str, inverse_offset: int | None) -> tuple[int, str]:
    """The model relation and side that rank `side` ("lhs" or "rhs") of edges of `relation`:
    the same, or with reciprocal relations (`inverse_offset`, R, given) the right-hand side
    of the inverse for "lhs"."""
    if inverse_offset is not None and side == "lhs":
        return relation + inverse_offset, "rhs"
    return relation, side
