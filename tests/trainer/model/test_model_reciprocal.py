"""Reciprocal relations (`reciprocal_relations`): each edge (u, r, v) also trains as
(v, r_inverse, u), and left-hand sides are ranked through the inverse.

The reference is written out here: ComplEx scores (complex products of the embeddings'
halves) and the softmax loss over every other entity, summed over both directions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from tessera.edgelist import EdgeList
from tessera.errors import ConfigError, FormatError
from tessera.model import EmbeddingModel
from tessera.model.closed_form import supports_closed_form
from tessera.model.gradients import batch_gradients
from tessera.model.model_io import INIT_PATH, load_model, save_model
from tessera.model.reciprocal import query_direction, reversed_edges
from tessera.model.rows import RowGradients
from tessera.querying.scoring import ModelScoring, RelationSide
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory

ROWS, DIM = 7, 6
EDGES = EdgeList.from_ids(torch.zeros(5, dtype=torch.long), torch.tensor([0, 1, 2, 3, 3]),
                          torch.tensor([1, 2, 0, 5, 6]))


def moved(model: EmbeddingModel) -> EmbeddingModel:
    """Every parameter away from its initial value (identity operators would hide a mix-up)."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator))
    return model


def complex_times(x: torch.Tensor, real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    a, b = x[..., :DIM // 2], x[..., DIM // 2:]
    return torch.cat([a * real - b * imag, a * imag + b * real], dim=-1)


def softmax_loss(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """-log(e^pos / (e^pos + sum of e^neg)), summed over the rows."""
    return (torch.logsumexp(torch.cat([pos.unsqueeze(1), neg], dim=1), dim=1) - pos).sum()


def others(scores: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Scores [N, ROWS] against every entity, each row's own entity left out (-inf)."""
    return scores.scatter(1, own.unsqueeze(1), float("-inf"))


def complex_model(make_config, **overrides: Any) -> EmbeddingModel:
    config = make_config(
        dimension=DIM, comparator="dot", loss_fn="softmax", global_emb=False,
        reciprocal_relations=True,
        relations=[{"name": "r", "lhs": "node", "rhs": "node", "operator": "complex_diagonal",
                    "all_negs": True}], **overrides)
    return moved(EmbeddingModel(config, 1))


@pytest.mark.parametrize("disable_lhs_negs", [False, True])
def test_the_loss_is_both_directions_written_out(make_config, disable_lhs_negs: bool) -> None:
    model = complex_model(make_config, disable_lhs_negs=disable_lhs_negs)
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(1))
    u, v = table[EDGES.lhs.ids], table[EDGES.rhs.ids]
    expected = torch.zeros(())
    for operator, head, tail, head_ids, tail_ids in (
            (model.rhs_operators[0], u, v, EDGES.lhs.ids, EDGES.rhs.ids),  # r
            (model.rhs_operators[1], v, u, EDGES.rhs.ids, EDGES.lhs.ids)):  # r_inverse
        transformed = complex_times(table, operator.real, operator.imag)  # every f(x)
        pos = (head * complex_times(tail, operator.real, operator.imag)).sum(1)
        expected = expected + softmax_loss(pos, others(head @ transformed.T, tail_ids))
        if not disable_lhs_negs:
            tail_f = complex_times(tail, operator.real, operator.imag)
            expected = expected + softmax_loss(pos, others(tail_f @ table.T, head_ids))
    result = model(EDGES, table, table, num_batch_negs=0, num_uniform_negs=0)
    torch.testing.assert_close(result.loss, expected, rtol=1e-5, atol=1e-5)
    # Training's loss (fused scoring) is the same sum.
    training = model.training_loss(EDGES, table, table, num_batch_negs=0, num_uniform_negs=0)
    torch.testing.assert_close(training.loss, expected, rtol=1e-5, atol=1e-5)


def test_left_hand_sides_are_ranked_through_the_inverse(make_config) -> None:
    """(?, r, v) is ranked as (v, r_inverse, ?): the left-hand scores the evaluators read."""
    model = complex_model(make_config)
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        result = model(EDGES, table, table, num_batch_negs=0, num_uniform_negs=0,
                       mask_same_entity=True)
        inverse = model.rhs_operators[1]
        v = table[EDGES.rhs.ids]
        expected = others(v @ complex_times(table, inverse.real, inverse.imag).T,
                          EDGES.lhs.ids)
        forward = model.rhs_operators[0]
        expected_rhs = others(table[EDGES.lhs.ids]
                              @ complex_times(table, forward.real, forward.imag).T,
                              EDGES.rhs.ids)
    torch.testing.assert_close(result.lhs_neg_scores, expected)
    torch.testing.assert_close(result.rhs_neg_scores, expected_rhs)
    torch.testing.assert_close(result.lhs_pos_scores, (v * complex_times(
        table[EDGES.lhs.ids], inverse.real, inverse.imag)).sum(1))
    # Querying makes the same choice: (?, r, NAME) ranks as (NAME, r_inverse, ?).
    assert query_direction(0, "lhs", 1) == (1, "rhs")
    assert query_direction(0, "rhs", 1) == (0, "rhs")
    assert query_direction(0, "lhs", None) == (0, "lhs")
    scoring = ModelScoring(model.config, model)
    with torch.no_grad():
        comparison = scoring.relation(RelationSide(0, "lhs"), "node", table[EDGES.rhs.ids])
        scores = scoring.scores(comparison.queries, comparison.prepare_candidates(table))
    torch.testing.assert_close(others(scores, EDGES.lhs.ids), expected)


def dense(rows: list[RowGradients], table: torch.Tensor) -> torch.Tensor:
    total = torch.zeros_like(table)
    for entry in rows:
        assert entry.table is table
        total.index_add_(0, entry.rows, entry.grads)
    return total


@pytest.mark.parametrize(("comparator", "loss"), [("dot", "ranking"), ("cos", "softmax"),
                                                  ("l2", "logistic")])
def test_one_step_for_both_directions_equals_autograd(make_config, comparator: str,
                                                      loss: str) -> None:
    """Closed form (inner products) or autograd (`l2`): the gradients of the summed loss,
    one entry per table, against forward + backward of both directions."""
    config = make_config(dimension=DIM, comparator=comparator, loss_fn=loss, margin=0.3,
                         reciprocal_relations=True, relations=[
                             {"name": "r", "lhs": "node", "rhs": "node",
                              "operator": "translation"}])
    model = moved(EmbeddingModel(config, 1))
    assert supports_closed_form(model) == (comparator != "l2")
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(2))
    counts = {"num_batch_negs": 2, "num_uniform_negs": 3}
    reference = model(EDGES, table, table, generator=torch.Generator().manual_seed(4),
                      **counts)
    reference.loss.backward()
    expected = dense([RowGradients(t.table, t.rows, t.embeddings.grad)
                      for t in reference.touched], table)
    expected_params = {name: p.grad.clone() for name, p in model.named_parameters()}
    assert expected_params["rhs_operators.1.translation"].abs().sum() > 0  # the inverse's
    model.zero_grad(set_to_none=True)
    step = batch_gradients(model, EDGES, table, table,
                           generator=torch.Generator().manual_seed(4), **counts)
    assert len(step.rows) == 1  # one table, one optimizer step
    assert float(step.loss) == pytest.approx(float(reference.loss.detach()), rel=1e-5)
    torch.testing.assert_close(dense(step.rows, table), expected, rtol=1e-4, atol=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected_params[name], rtol=1e-4, atol=1e-5)


def test_the_model_holds_an_operator_per_relation_and_inverse(make_config) -> None:
    config = make_config(reciprocal_relations=True, relations=[
        {"name": "a", "lhs": "user", "rhs": "item", "operator": "diagonal"},
        {"name": "b", "lhs": "item", "rhs": "user", "operator": "translation"}],
        entities={"user": {"num_partitions": 1}, "item": {"num_partitions": 1}})
    model = EmbeddingModel(config, 2)
    assert [r.name for r in model.relations] == ["a", "b", "a_inverse", "b_inverse"]
    assert (model.relations[2].lhs, model.relations[2].rhs) == ("item", "user")
    names = model.public_parameter_names()
    assert {names[k] for k in model.state_dict() if k.startswith("rhs_operators")} == {
        "relations/0/operator/rhs/diagonal", "relations/1/operator/rhs/translation",
        "relations/2/operator/rhs/diagonal", "relations/3/operator/rhs/translation"}
    assert model.num_relations == 4 and model.inverse_offset == 2


def test_dynamic_relations_get_inverse_rows_and_the_inverse_types(make_config) -> None:
    """Three relation types of user -> item: six operator rows; a reversed batch is of
    item -> user, with each type's global embedding on its own side."""
    config = make_config(dynamic_relations=True, reciprocal_relations=True, dimension=DIM,
                         comparator="dot", global_emb=True,
                         entities={"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
                         relations=[{"name": "t", "lhs": "user", "rhs": "item",
                                     "operator": "diagonal"}])
    model = moved(EmbeddingModel(config, 3))
    assert model.lhs_operators[0].diagonals.shape == (6, DIM)
    users = torch.randn(4, DIM, generator=torch.Generator().manual_seed(1))
    items = torch.randn(5, DIM, generator=torch.Generator().manual_seed(2))
    edges = EdgeList.from_ids(torch.tensor([0, 2, 1]), torch.tensor([0, 1, 3]),
                              torch.tensor([4, 0, 2]))
    with torch.no_grad():
        result = model(edges, users, items, num_batch_negs=3, num_uniform_negs=0,
                       mask_same_entity=True)
        # The left-hand side ranked as the right-hand side of (v, r + 3, ?): the item's
        # left-hand operator row r + 3, against the users (their global embedding added).
        item = items[edges.rhs.ids] + model.global_embedding("item")
        user = users[edges.lhs.ids] + model.global_embedding("user")
        query = item * model.lhs_operators[0].diagonals[edges.rel + 3]
        expected = query @ user.T
    torch.testing.assert_close(result.lhs_pos_scores, expected.diagonal())
    assert reversed_edges(edges, 3).rel.tolist() == [3, 5, 4]
    assert model.relation_of(4).lhs == "item" and model.relation_of(1).lhs == "user"


def test_against_every_entity_an_inverse_only_mirrors_its_relation_so_it_is_refused(
        make_config) -> None:
    """Why `reciprocal_relations` is refused with dynamic relations, all_negs and both sides
    corrupted: r's left-hand operator ranks left-hand sides against every entity, as r⁻¹'s
    right-hand one ranks them. With r⁻¹'s operators r's exchanged, a batch gives r⁻¹ r's
    gradients exchanged and the entities twice the gradients of the model without reciprocal
    relations (which row-wise Adagrad's step does not see): the mirror holds step after
    step, and training twice the work trains the same model."""
    settings: dict[str, Any] = {
        "dynamic_relations": True, "dimension": DIM, "comparator": "dot", "loss_fn": "softmax",
        "global_emb": False, "regularization_coef": 0.1,
        "relations": [{"name": "r", "lhs": "node", "rhs": "node",
                       "operator": "complex_diagonal", "all_negs": True}]}
    with pytest.raises(ConfigError, match="reciprocal_relations: .* exact mirror"):
        make_config(reciprocal_relations=True, **settings)
    plain = moved(EmbeddingModel(make_config(**settings), 2))
    reciprocal = EmbeddingModel(dataclasses.replace(plain.config, reciprocal_relations=True), 2)
    mirrored = {("lhs", "real"): ("rhs", "real"), ("lhs", "imag"): ("rhs", "imag"),
                ("rhs", "real"): ("lhs", "real"), ("rhs", "imag"): ("lhs", "imag")}

    def parameter(model: EmbeddingModel, side: str, name: str) -> torch.nn.Parameter:
        return getattr(getattr(model, f"{side}_operators")[0], name)

    with torch.no_grad():
        for (side, name), (other, _) in mirrored.items():
            parameter(reciprocal, side, name)[:2] = parameter(plain, side, name)
            parameter(reciprocal, side, name)[2:] = parameter(plain, other, name)
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(4))
    edges = EdgeList.from_ids(torch.tensor([0, 1, 1, 0, 1]), EDGES.lhs.ids, EDGES.rhs.ids)

    def entity_gradients(model: EmbeddingModel) -> tuple[torch.Tensor, float]:
        step = batch_gradients(model, edges, table, table, num_batch_negs=0,
                               num_uniform_negs=0)
        dense = torch.zeros(ROWS, DIM)
        for rows in step.rows:
            dense.index_add_(0, rows.rows, rows.grads)
        return dense, float(step.loss)

    plain_gradients, plain_loss = entity_gradients(plain)
    reciprocal_gradients, reciprocal_loss = entity_gradients(reciprocal)
    torch.testing.assert_close(reciprocal_gradients, 2 * plain_gradients)
    assert reciprocal_loss == pytest.approx(2 * plain_loss)
    for (side, name), (other, _) in mirrored.items():
        gradient = parameter(reciprocal, side, name).grad
        assert gradient is not None
        torch.testing.assert_close(gradient[:2], parameter(plain, side, name).grad)
        torch.testing.assert_close(gradient[2:], parameter(plain, other, name).grad)


def test_training_ranks_both_sides_through_right_hand_corruptions_only(make_config) -> None:
    """A planted graph (user i bought item i) trained with right-hand negatives only, in both
    directions (the 1-vs-all setting): left-hand sides are ranked first too, through the
    inverse relation."""
    config = make_config(dimension=8, lr=0.1, comparator="dot", loss_fn="softmax",
                         reciprocal_relations=True, disable_lhs_negs=True,
                         entities={"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
                         relations=[{"name": "bought", "lhs": "user", "rhs": "item",
                                     "operator": "complex_diagonal", "all_negs": True}])
    model = EmbeddingModel(config, 1)
    generator = torch.Generator().manual_seed(0)
    users, items = (0.1 * torch.randn(8, 8, generator=generator) for _ in range(2))
    edges = EdgeList.from_ids(torch.zeros(8, dtype=torch.long), torch.arange(8),
                              torch.randperm(8, generator=generator))

    def worse_side_accuracy() -> float:
        with torch.no_grad():
            result = model(edges, users, items, num_batch_negs=0, num_uniform_negs=0,
                           mask_same_entity=True)
        return min(float(((pos.unsqueeze(1) > neg) & (neg > float("-inf"))).sum() / (8 * 7))
                   for pos, neg in ((result.lhs_pos_scores, result.lhs_neg_scores),
                                    (result.rhs_pos_scores, result.rhs_neg_scores)))

    assert worse_side_accuracy() < 0.7
    accumulators = {id(t): torch.zeros(len(t)) for t in (users, items)}
    for _ in range(40):
        step = batch_gradients(model, edges, users, items, num_batch_negs=0,
                               num_uniform_negs=0)
        for rows in step.rows:  # row-wise Adagrad, as training steps
            accumulator = accumulators[id(rows.table)]
            accumulator.index_add_(0, rows.rows, rows.grads.square().mean(1))
            rows.table.index_add_(0, rows.rows, -0.1 * rows.grads
                                  / (accumulator[rows.rows].sqrt().unsqueeze(1) + 1e-10))
    assert worse_side_accuracy() == 1.0


def test_the_model_file_round_trips_and_refuses_to_grow_relation_types(
        make_config, tmp_path: Path) -> None:
    """2R rows of each dynamic operator, saved and loaded bit-exactly; a checkpoint of
    fewer relation types is refused as `init_path` (new rows would not simply append)."""
    config = make_config(dynamic_relations=True, reciprocal_relations=True, relations=[
        {"name": "t", "lhs": "node", "rhs": "node", "operator": "translation"}])
    saved = moved(EmbeddingModel(config, 3))
    store = CheckpointStore(Directory(str(tmp_path)))
    save_model(store, 1, saved, None, {})
    loaded = EmbeddingModel(config, 3)
    load_model(store, 1, loaded, None)
    for (name, expected), got in zip(saved.state_dict().items(),
                                     loaded.state_dict().values()):
        assert torch.equal(got, expected), name
        assert got.shape[0] == 6 or name.startswith("global_embs"), name
    with pytest.raises(FormatError, match="does not fit this config"):
        load_model(store, 1, EmbeddingModel(config, 4), None, origin=INIT_PATH)
