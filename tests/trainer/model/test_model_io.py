"""The model file: every operator's parameters, plain and dynamic, round-trip bit-exactly under
PBG's public names (`relations/{idx}/operator/{side}/{param}`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tessera.model import DYNAMIC_OPERATORS, OPERATORS, EmbeddingModel
from tessera.model.model_io import load_model, save_model
from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic"])
@pytest.mark.parametrize("operator", sorted(OPERATORS))
def test_operator_parameters_round_trip_under_pbgs_names(make_config, tmp_path: Path,
                                                         operator: str, dynamic: bool) -> None:
    config = make_config(relations=[{"name": "r", "lhs": "node", "rhs": "node",
                                     "operator": operator}], dynamic_relations=dynamic)
    saved = EmbeddingModel(config, 3 if dynamic else 1)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in saved.parameters():
            param.copy_(torch.randn(param.shape, generator=generator))
    store = CheckpointStore(Directory(str(tmp_path)))
    save_model(store, 1, saved, None, {})
    params, _ = store.read_model(1)
    template = DYNAMIC_OPERATORS[operator](4, 3) if dynamic else OPERATORS[operator](4)
    names = [name for name, _ in template.named_parameters()]
    sides = ["lhs", "rhs"] if dynamic else ["rhs"]
    operator_names = {public for public in params if public.startswith("relations/")}
    assert operator_names == {f"relations/0/operator/{side}/{name}"
                              for side in sides for name in names}
    loaded = EmbeddingModel(config, 3 if dynamic else 1)
    load_model(store, 1, loaded, None)
    for (name, expected), got in zip(saved.state_dict().items(),
                                     loaded.state_dict().values()):
        assert torch.equal(got, expected), name
