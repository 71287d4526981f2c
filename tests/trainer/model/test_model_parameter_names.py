"""State-dict keys <-> PBG's public parameter names, both ways."""

from __future__ import annotations

import pytest

from tessera.model.parameter_names import public_name, state_dict_key

PAIRS = [
    ("rhs_operators.0.diagonal", "relations/0/operator/rhs/diagonal"),
    ("rhs_operators.12.linear_transformation", "relations/12/operator/rhs/linear_transformation"),
    ("lhs_operators.0.translations", "relations/0/operator/lhs/translations"),
    ("rhs_operators.3.phase", "relations/3/operator/rhs/phase"),  # Tessera's rotate
    ("lhs_operators.0.phases", "relations/0/operator/lhs/phases"),
    ("global_embs.emb_user", "entities/user/global_embedding"),
    ("global_embs.emb_page_view", "entities/page_view/global_embedding"),
]


@pytest.mark.parametrize(("key", "public"), PAIRS)
def test_names_translate_both_ways(key: str, public: str) -> None:
    assert public_name(key) == public
    assert state_dict_key(public) == key


@pytest.mark.parametrize("name", ["lhs_embs.emb_user.weight", "relations/0/operator/rhs",
                                  "global_embs.emb_a.b", "model/entities/user/global_embedding"])
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(KeyError):
        public_name(name)
    with pytest.raises(KeyError):
        state_dict_key(name)
