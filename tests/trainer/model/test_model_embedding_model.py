"""The embedding model: parameter names, batch scores checked edge by edge, masks, gradients.

The reference scores are computed one pair at a time from the definition (row + global
embedding, operator, prepare, compare), so they check the wiring of chunks, negatives, masks
and operators independently of the batched code.
"""

from __future__ import annotations

import pytest
import torch

from tessera.edgelist import EdgeList, EntityList
from tessera.errors import ConfigError
from tessera.model import EmbeddingModel
from tessera.model.operators import OPERATORS

INF = float("-inf")
BIPARTITE = {"entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}}}


def bipartite(make_config, operator: str = "translation", **overrides):
    relations = [{"name": "buys", "lhs": "user", "rhs": "item", "operator": operator}]
    return make_config(relations=relations, **BIPARTITE, **overrides)


def randomize(model: EmbeddingModel, seed: int) -> None:
    """Move every parameter away from its initial value, so operators and globals matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator))


def tables(seed: int, *rows: int, dim: int = 4) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(count, dim, generator=generator) for count in rows]


def score(model: EmbeddingModel, lhs: torch.Tensor, rhs: torch.Tensor) -> float:
    """c(lhs, rhs) for two single embeddings, both already through their operator."""
    prepare = model.comparator.prepare
    empty = torch.empty(1, 0, lhs.shape[-1])
    with torch.no_grad():
        pos, _, _ = model.comparator(prepare(lhs).view(1, 1, -1), prepare(rhs).view(1, 1, -1),
                                     empty, empty)
    return pos.item()


def embedding(model: EmbeddingModel, table: torch.Tensor, entity_type: str,
              row: int) -> torch.Tensor:
    global_embs = model.global_embs
    key = f"emb_{entity_type}"
    return table[row] + (global_embs[key].detach() if key in global_embs else 0)


def edges(rel: list[int], lhs: list[int], rhs: list[int]) -> EdgeList:
    return EdgeList.from_ids(torch.tensor(rel), torch.tensor(lhs), torch.tensor(rhs))


def test_parameter_names_are_pbgs(make_config) -> None:
    relations = [{"name": "follows", "lhs": "user", "rhs": "user", "operator": "affine"},
                 {"name": "buys", "lhs": "user", "rhs": "item", "operator": "none"},
                 {"name": "likes", "lhs": "user", "rhs": "item", "operator": "diagonal"}]
    model = EmbeddingModel(make_config(relations=relations, **BIPARTITE), 3)
    assert model.public_parameter_names() == {
        "global_embs.emb_user": "entities/user/global_embedding",
        "global_embs.emb_item": "entities/item/global_embedding",
        "rhs_operators.0.linear_transformation": "relations/0/operator/rhs/linear_transformation",
        "rhs_operators.0.translation": "relations/0/operator/rhs/translation",
        "rhs_operators.2.diagonal": "relations/2/operator/rhs/diagonal",
    }
    assert model.lhs_operators[0] is None


def test_dynamic_parameter_names_are_pbgs(make_config) -> None:
    config = bipartite(make_config, "translation", dynamic_relations=True, global_emb=False)
    model = EmbeddingModel(config, 5)
    assert model.public_parameter_names() == {
        "lhs_operators.0.translations": "relations/0/operator/lhs/translations",
        "rhs_operators.0.translations": "relations/0/operator/rhs/translations",
    }
    assert model.rhs_operators[0].translations.shape == (5, 4)


@pytest.mark.parametrize(("overrides", "path"), [
    ({"entities": {"user": {"num_partitions": 1, "dimension": 3},
                   "item": {"num_partitions": 1}}}, "relations[0]"),
    ({"dimension": 5, "relations": [{"name": "r", "lhs": "user", "rhs": "item",
                                     "operator": "complex_diagonal"}]}, "relations[0].operator"),
    ({"dimension": 5, "relations": [{"name": "r", "lhs": "user", "rhs": "item",
                                     "operator": "rotate"}]}, "relations[0].operator"),
    ({"entities": {"user": {"num_partitions": 1, "featurized": True},
                   "item": {"num_partitions": 1}},
      "relations": [{"name": "r", "lhs": "user", "rhs": "item", "all_negs": True}]},
     "relations[0].all_negs"),
])
def test_impossible_models_are_refused_naming_the_key(make_config, overrides: dict,
                                                      path: str) -> None:
    options = {"relations": [{"name": "r", "lhs": "user", "rhs": "item"}], **BIPARTITE}
    options.update(overrides)
    with pytest.raises(ConfigError) as raised:
        EmbeddingModel(make_config(**options), 1)
    assert raised.value.path == path


@pytest.mark.parametrize("operator", sorted(OPERATORS))
@pytest.mark.parametrize("comparator", ["cos", "l2", "l1"])
@pytest.mark.parametrize("same_entity", [False, True], ids=["training", "evaluation"])
def test_scores_match_the_definition_edge_by_edge(make_config, operator: str,
                                                  comparator: str, same_entity: bool) -> None:
    """Training masks, among the batch negatives, the edge itself (PBG's rule); evaluation
    also every other edge of the chunk with the positive's entity."""
    config = bipartite(make_config, operator, comparator=comparator, bias=comparator == "l2")
    model = EmbeddingModel(config, 1)
    randomize(model, 0)
    users, items = tables(1, 5, 6)
    batch = edges([0] * 7, [0, 1, 2, 0, 4, 3, 3], [0, 1, 2, 3, 4, 5, 1])
    with torch.no_grad():
        result = model(batch, users, items, num_batch_negs=3, num_uniform_negs=0,
                       mask_same_entity=same_entity)
    f = model.rhs_operators[0]
    u = [embedding(model, users, "user", int(i)) for i in batch.lhs.ids]
    v = [f(embedding(model, items, "item", int(i))) for i in batch.rhs.ids]
    assert result.lhs_neg_scores.shape == result.rhs_neg_scores.shape == (7, 3)

    def masked(ids: torch.Tensor, i: int, j: int) -> bool:
        return j >= 7 or j == i or (same_entity and bool(ids[j] == ids[i]))

    for i in range(7):
        assert result.lhs_pos_scores[i].item() == pytest.approx(score(model, u[i], v[i]), abs=1e-5)
        chunk_start = i - i % 3
        for k in range(3):
            j = chunk_start + k  # the k-th edge of edge i's chunk supplies the negative
            if masked(batch.lhs.ids, i, j):
                assert result.lhs_neg_scores[i, k] == INF
            else:
                assert result.lhs_neg_scores[i, k].item() == pytest.approx(
                    score(model, u[j], v[i]), abs=1e-5)
            if masked(batch.rhs.ids, i, j):
                assert result.rhs_neg_scores[i, k] == INF
            else:
                assert result.rhs_neg_scores[i, k].item() == pytest.approx(
                    score(model, u[i], v[j]), abs=1e-5)
    assert torch.equal(result.lhs_pos_scores, result.rhs_pos_scores)


def test_uniform_draws_of_the_positive_count_in_training_and_are_masked_in_evaluation(
        make_config) -> None:
    """PBG masks no uniform draw in training: one that is the positive's entity scores as
    the positive does. Ranking (evaluation) leaves it out."""
    model = EmbeddingModel(bipartite(make_config, "diagonal"), 1)
    randomize(model, 1)
    users, items = tables(2, 2, 3)  # two users: every draw is user 0 or user 1
    batch = edges([0] * 4, [0, 0, 0, 0], [0, 1, 2, 0])
    results = [model(batch, users, items, num_batch_negs=0, num_uniform_negs=8,
                     generator=torch.Generator().manual_seed(0), mask_same_entity=same_entity)
               for same_entity in (False, True)]
    training, evaluation = (result.lhs_neg_scores for result in results)  # left: user 0
    assert training.shape == evaluation.shape == (4, 8)
    masked = evaluation == INF
    assert masked.any() and not masked.all(), "the seed should draw both users"
    assert torch.equal(masked, masked[:1].expand(4, -1)), "one draw is shared by the chunk"
    assert not (training == INF).any()
    f = model.rhs_operators[0]
    for i in range(4):
        rhs = f(embedding(model, items, "item", int(batch.rhs.ids[i])))
        other, itself = (score(model, embedding(model, users, "user", user), rhs)
                         for user in (1, 0))
        assert evaluation[i][~masked[i]].tolist() == pytest.approx(
            [other] * int((~masked[i]).sum()), abs=1e-5)
        assert training[i].tolist() == pytest.approx(
            [itself if drawn else other for drawn in masked[i].tolist()], abs=1e-5)
        assert itself == pytest.approx(results[0].lhs_pos_scores[i].item(), abs=1e-5)


def test_all_negs_scores_every_entity_but_the_positive(make_config) -> None:
    config = make_config(relations=[{"name": "buys", "lhs": "user", "rhs": "item",
                                     "operator": "translation", "all_negs": True}], **BIPARTITE)
    model = EmbeddingModel(config, 1)
    randomize(model, 2)
    users, items = tables(3, 4, 5)
    batch = edges([0] * 3, [1, 3, 1], [4, 0, 2])
    result = model(batch, users, items, num_batch_negs=2, num_uniform_negs=2)
    assert result.lhs_neg_scores.shape == (3, 4) and result.rhs_neg_scores.shape == (3, 5)
    f = model.rhs_operators[0]
    for i in range(3):
        own = int(batch.rhs.ids[i])
        for item in range(5):
            got = result.rhs_neg_scores[i, item].item()
            if item == own:
                assert got == INF
            else:
                expected = score(model, embedding(model, users, "user", int(batch.lhs.ids[i])),
                                 f(embedding(model, items, "item", item)))
                assert got == pytest.approx(expected, abs=1e-5)
    # Rows are gathered as named: each side's entities, then every row of its partition.
    assert [t.rows.tolist() for t in result.touched] == [[1, 3, 1, 0, 1, 2, 3],
                                                        [4, 0, 2, 0, 1, 2, 3, 4]]


def test_gradients_reach_the_gathered_rows_and_the_parameters(make_config) -> None:
    model = EmbeddingModel(bipartite(make_config, "complex_diagonal"), 1)
    users, items = tables(4, 6, 6)
    batch = edges([0] * 4, [0, 1, 2, 3], [3, 2, 1, 0])
    result = model(batch, users, items, num_batch_negs=4, num_uniform_negs=3,
                   generator=torch.Generator().manual_seed(1))
    result.loss.backward()
    assert torch.isfinite(result.loss)
    for touched in result.touched:
        assert touched.embeddings.grad is not None
        assert torch.isfinite(touched.embeddings.grad).all()
        assert (touched.embeddings.grad.abs().sum(dim=1) > 0).all(), "every gathered row is used"
        assert torch.equal(touched.embeddings.detach(), touched.table[touched.rows])
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_a_table_shared_by_both_sides_is_gathered_once(make_config) -> None:
    model = EmbeddingModel(make_config(), 1)
    (nodes,) = tables(5, 6)
    result = model(edges([0] * 3, [0, 1, 2], [2, 3, 4]), nodes, nodes, num_batch_negs=3,
                   num_uniform_negs=0)
    assert len(result.touched) == 1 and result.touched[0].rows.tolist() == [0, 1, 2, 2, 3, 4]


def test_evaluation_uses_its_own_counts_without_gradients(make_config) -> None:
    model = EmbeddingModel(bipartite(make_config, "linear"), 1)
    users, items = tables(6, 8, 8)
    batch = edges([0] * 6, [0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0])
    with torch.no_grad():
        result = model(batch, users, items, num_batch_negs=6, num_uniform_negs=5)
    assert result.lhs_neg_scores.shape == (6, 11)
    assert not result.loss.requires_grad and torch.isfinite(result.loss)
    assert not any(t.embeddings.requires_grad for t in result.touched)


def test_a_disabled_side_has_no_negatives(make_config) -> None:
    config = bipartite(make_config, "none", disable_lhs_negs=True)
    model = EmbeddingModel(config, 1)
    users, items = tables(7, 5, 5)
    batch = edges([0] * 4, [0, 1, 2, 3], [0, 1, 2, 3])
    result = model(batch, users, items, num_batch_negs=4, num_uniform_negs=2)
    assert result.lhs_neg_scores.shape == (4, 0) and result.rhs_neg_scores.shape == (4, 6)
    expected = model.loss_fn(result.rhs_pos_scores, result.rhs_neg_scores)
    assert result.loss.item() == pytest.approx(expected.item())


def test_the_relation_weight_and_the_regularizer_add_up_to_the_loss(make_config) -> None:
    users, items = tables(8, 5, 5)
    batch = edges([0] * 4, [0, 1, 2, 3], [1, 2, 3, 4])
    plain = EmbeddingModel(bipartite(make_config, "diagonal"), 1)
    relations = [{"name": "buys", "lhs": "user", "rhs": "item", "operator": "diagonal",
                  "weight": 3.0}]
    weighted = EmbeddingModel(make_config(relations=relations, regularization_coef=0.01,
                                          **BIPARTITE), 1)
    base = plain(batch, users, items, num_batch_negs=4, num_uniform_negs=0)
    result = weighted(batch, users, items, num_batch_negs=4, num_uniform_negs=0)
    assert result.regularization > 0
    assert result.loss.item() == pytest.approx(3 * base.loss.item() + result.regularization,
                                               rel=1e-5)


def test_a_batch_mixing_relations_needs_dynamic_relations(make_config) -> None:
    relations = [{"name": "a", "lhs": "node", "rhs": "node"},
                 {"name": "b", "lhs": "node", "rhs": "node"}]
    model = EmbeddingModel(make_config(relations=relations), 2)
    (nodes,) = tables(9, 4)
    with pytest.raises(ValueError, match="one relation type"):
        model(edges([0, 1], [0, 1], [1, 2]), nodes, nodes, num_batch_negs=2, num_uniform_negs=0)


@pytest.mark.parametrize(("operator", "comparator"), [
    ("translation", "dot"), ("complex_diagonal", "dot"), ("affine", "dot"),
    ("rotate", "l2"), ("translation", "l1")])  # RotatE and TransE-L1
def test_dynamic_relations_transform_the_side_that_is_not_corrupted(
        make_config, operator: str, comparator: str) -> None:
    config = bipartite(make_config, operator, dynamic_relations=True, comparator=comparator)
    model = EmbeddingModel(config, 3)
    randomize(model, 3)
    users, items = tables(10, 5, 5)
    batch = edges([2, 0, 1, 1], [0, 1, 2, 3], [4, 3, 2, 1])
    with torch.no_grad():
        result = model(batch, users, items, num_batch_negs=4, num_uniform_negs=0)
    g, h = model.lhs_operators[0], model.rhs_operators[0]
    rel = batch.rel
    u = [embedding(model, users, "user", int(i)) for i in batch.lhs.ids]
    v = [embedding(model, items, "item", int(i)) for i in batch.rhs.ids]
    for i in range(4):
        r = rel[i:i + 1]
        h_v, g_u = h(v[i].view(1, -1), r)[0], g(u[i].view(1, -1), r)[0]
        assert result.lhs_pos_scores[i].item() == pytest.approx(score(model, u[i], h_v), abs=1e-5)
        assert result.rhs_pos_scores[i].item() == pytest.approx(score(model, g_u, v[i]), abs=1e-5)
        for j in range(4):
            if j == i:
                assert result.lhs_neg_scores[i, j] == INF and result.rhs_neg_scores[i, j] == INF
                continue
            # Negatives are never passed through another edge's relation operator.
            assert result.lhs_neg_scores[i, j].item() == pytest.approx(
                score(model, u[j], h_v), abs=1e-5)
            assert result.rhs_neg_scores[i, j].item() == pytest.approx(
                score(model, g_u, v[j]), abs=1e-5)


def test_featurized_entities_are_the_mean_of_their_features(make_config) -> None:
    entities = {"doc": {"num_partitions": 1, "featurized": True}, "tag": {"num_partitions": 1}}
    relations = [{"name": "tagged", "lhs": "doc", "rhs": "tag", "operator": "diagonal"}]
    model = EmbeddingModel(make_config(entities=entities, relations=relations,
                                       comparator="dot"), 1)
    randomize(model, 4)
    features, tags = tables(11, 6, 4)
    # Three documents: features {0, 5}, {2}, {5, 5, 3} (a repeated feature counts twice).
    docs = EntityList.from_features(torch.tensor([0, 2, 3, 6]), torch.tensor([0, 5, 2, 5, 5, 3]))
    batch = EdgeList(rel=torch.zeros(3, dtype=torch.long), lhs=docs,
                     rhs=EntityList.from_ids(torch.tensor([1, 1, 3])))
    result = model(batch, features, tags, num_batch_negs=3, num_uniform_negs=2,
                   generator=torch.Generator().manual_seed(0))
    f = model.rhs_operators[0]
    global_doc = model.global_embs["emb_doc"].detach()
    means = [features[[0, 5]].mean(0), features[2], features[[5, 5, 3]].mean(0)]
    for i, mean in enumerate(means):
        v = f(embedding(model, tags, "tag", int(batch.rhs.ids[i])))
        assert result.lhs_pos_scores[i].item() == pytest.approx(
            score(model, mean + global_doc, v), abs=1e-5)
    # A featurized side is corrupted by the other documents of the chunk only: the edge itself
    # is masked, identical tags elsewhere are not (documents have no identity to compare).
    assert result.lhs_neg_scores.shape == (3, 3)
    assert (result.lhs_neg_scores.diagonal() == INF).all()
    assert torch.isfinite(result.lhs_neg_scores[0, 1:]).all()
    result.loss.backward()
    doc_rows = result.touched[0]
    assert doc_rows.rows.tolist() == [0, 5, 2, 5, 5, 3] and doc_rows.table is features
    assert torch.isfinite(doc_rows.embeddings.grad).all()
