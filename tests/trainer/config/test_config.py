"""The config schema: PBG's keys and defaults, loading from every format, and useful errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import typing

import jsonschema
import pytest

from tessera.cli import main
from tessera.config import (
    ConfigSchema,
    apply_overrides,
    config_json_schema,
    load_config,
    parse_config,
)
from tessera.config.schema import BucketOrderName
from tessera.errors import EXIT_BAD_INPUT, ConfigError

MINIMAL = {
    "entities": {"user": {"num_partitions": 4}, "item": {"num_partitions": 1}},
    "relations": [{"name": "likes", "lhs": "user", "rhs": "item", "operator": "translation"}],
    "dimension": 16,
    "entity_path": "data/entities",
    "edge_paths": ["data/edges"],
    "checkpoint_path": "model",
}

# Every key of PBG 1.0's ConfigSchema with its default (None where PBG requires a value).
PBG_DEFAULTS = {
    "entities": None, "relations": None, "dimension": None, "init_scale": 1e-3,
    "max_norm": None, "global_emb": True, "comparator": "cos", "bias": False,
    "loss_fn": "ranking", "margin": 0.1, "regularization_coef": 0.0, "regularizer": "N3",
    "entity_path": None, "edge_paths": None, "checkpoint_path": None, "init_path": None,
    "checkpoint_preservation_interval": None, "num_epochs": 1, "num_edge_chunks": None,
    "max_edges_per_chunk": 1_000_000_000, "bucket_order": "inside_out", "workers": None,
    "batch_size": 1000, "num_batch_negs": 50, "num_uniform_negs": 50,
    "disable_lhs_negs": False, "disable_rhs_negs": False, "lr": 1e-2, "relation_lr": None,
    "eval_fraction": 0.05, "eval_num_batch_negs": 1000, "eval_num_uniform_negs": 1000,
    "early_stopping": False, "background_io": None, "verbose": 0, "hogwild_delay": 2.0,
    "dynamic_relations": False, "num_machines": 1, "num_partition_servers": -1,
    "distributed_init_method": None, "distributed_tree_init_order": True, "num_gpus": 0,
    "num_groups_for_partition_server": 16, "num_groups_per_sharded_partition_server": 1,
    "partition_shard_size": 250, "half_precision": False,
}


def with_changes(**changes: typing.Any) -> dict[str, typing.Any]:
    return {**json.loads(json.dumps(MINIMAL)), **changes}


def test_every_pbg_key_with_pbg_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(ConfigSchema)}
    assert set(PBG_DEFAULTS) <= set(fields)
    assert set(fields) - set(PBG_DEFAULTS) == {"storage_options", "storage_retry_timeout", "seed",
                                                  "init_old_edge_fraction", "replay_paths",
                                                  "partition_cache_gb", "tracking", "tracking_path",
                                                  "num_degree_negs", "eval_num_degree_negs",
                                                  "reciprocal_relations", "weight_averaging"}
    config = parse_config(MINIMAL)
    for key, default in PBG_DEFAULTS.items():
        if default is not None or fields[key].default is None:
            assert getattr(config, key) == default, key


@pytest.mark.parametrize(("num_gpus", "background_io", "in_background"), [
    (0, None, False), (1, None, True), (1, False, False), (0, True, True)])
def test_background_io_is_on_by_default_on_gpus_only(num_gpus: int, background_io: bool | None,
                                                     in_background: bool) -> None:
    """A GPU trains a chunk faster than its checkpoint is written: unless told otherwise,
    its writes go to the background; the CPU keeps PBG's memory use."""
    config = parse_config(with_changes(num_gpus=num_gpus, background_io=background_io))
    assert config.io_in_background() is in_background


def test_minimal_config_parses_into_typed_objects() -> None:
    config = parse_config(MINIMAL)
    assert config.entities["user"].num_partitions == 4
    assert config.relations[0].operator == "translation"
    assert config.relations[0].weight == 1.0
    assert config.num_partitions() == 4
    assert config.entity_dimension("item") == 16
    assert config.effective_relation_lr() == config.lr


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"dimensoin": 3}, "dimensoin", "did you mean 'dimension'"),
        ({"lr": "fast"}, "lr", "expected a number"),
        ({"num_epochs": 2.5}, "num_epochs", "expected an integer"),
        ({"global_emb": 1}, "global_emb", "true or false"),
        ({"edge_paths": "data/edges"}, "edge_paths", "expected a list"),
        ({"comparator": "dott"}, "comparator", "did you mean 'dot'"),
        ({"batch_size": 0}, "batch_size", "at least 1"),
        ({"num_uniform_negs": -1}, "num_uniform_negs", "at least 0"),
        ({"init_scale": 0}, "init_scale", "greater than 0"),
        ({"eval_fraction": 1.0}, "eval_fraction", "below 1"),
        ({"relations": [{"name": "r", "lhs": "usr", "rhs": "item"}]},
         "relations[0].lhs", "did you mean 'user'"),
        ({"relations": [{"name": "r", "lhs": "user", "rhs": "item", "opertor": "none"}]},
         "relations[0].opertor", "did you mean 'operator'"),
        ({"relations": [{"name": "r", "lhs": "user", "rhs": "item", "operator": "quaternion"}]},
         "relations[0].operator", "not one of"),
        ({"relations": [{"name": "r", "lhs": "user"}]}, "relations[0].rhs", "missing"),
        ({"entities": {"user": {"num_partitions": 4}, "item": {"num_partitions": 2}}},
         "entities", "same num_partitions"),
        ({"entities": {"user": {"num_partitions": 0}, "item": {"num_partitions": 1}}},
         "entities.user.num_partitions", "at least 1"),
        ({"relations": []}, "relations", "at least one relation"),
        ({"dynamic_relations": True, "relations": [
            {"name": "a", "lhs": "user", "rhs": "item"},
            {"name": "b", "lhs": "user", "rhs": "item"}]}, "relations", "exactly one"),
        ({"disable_lhs_negs": True, "disable_rhs_negs": True}, "disable_rhs_negs", "both"),
        ({"reciprocal_relations": True, "disable_rhs_negs": True}, "disable_rhs_negs",
         "reciprocal_relations"),
        ({"reciprocal_relations": True, "dynamic_relations": True, "relations": [
            {"name": "a", "lhs": "user", "rhs": "item", "all_negs": True}]},
         "reciprocal_relations", "disable_lhs_negs: true"),
        ({"num_degree_negs": -1}, "num_degree_negs", "at least 0"),
        ({"half_precision": True}, "half_precision", "GPU"),
        ({"partition_cache_gb": 4, "num_machines": 2}, "partition_cache_gb", "num_machines > 1"),
        ({"partition_cache_gb": -1}, "partition_cache_gb", "at least 0"),
        ({"init_old_edge_fraction": 1.5, "init_path": "first"}, "init_old_edge_fraction",
         "at most 1"),
    ],
)
def test_bad_configs_name_the_key_and_the_problem(
        changes: dict[str, typing.Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(with_changes(**changes))
    assert caught.value.path == path
    assert words in str(caught.value)


def test_missing_required_key_is_named() -> None:
    raw = with_changes()
    del raw["checkpoint_path"]
    with pytest.raises(ConfigError, match=r"^checkpoint_path: required key is missing"):
        parse_config(raw)


def test_yaml_json_and_python_configs_load_alike(tmp_path: typing.Any) -> None:
    yaml_file = tmp_path / "config.yaml"
    yaml_file.write_text(textwrap.dedent("""
        entities: {user: {num_partitions: 4}, item: {num_partitions: 1}}
        relations:
          - {name: likes, lhs: user, rhs: item, operator: translation}
        dimension: 16
        init_scale: 1e-3
        entity_path: data/entities
        edge_paths: [data/edges]
        checkpoint_path: model
    """))
    json_file = tmp_path / "config.json"
    json_file.write_text(json.dumps(MINIMAL))
    python_file = tmp_path / "config.py"
    python_file.write_text(f"def get_torchbiggraph_config():\n    return {MINIMAL!r}\n")
    loaded = [load_config(str(f)) for f in (yaml_file, json_file, python_file)]
    assert loaded[0] == loaded[1] == loaded[2] == parse_config(MINIMAL)
    assert isinstance(loaded[0].init_scale, float)


def test_python_config_does_not_change_sys_path(tmp_path: typing.Any) -> None:
    python_file = tmp_path / "pbg_config.py"
    python_file.write_text(f"def get_torchbiggraph_config():\n    return {MINIMAL!r}\n")
    before = list(sys.path)
    load_config(str(python_file))
    assert sys.path == before


def test_file_errors_name_the_file(tmp_path: typing.Any) -> None:
    with pytest.raises(ConfigError, match="missing.yaml: config file not found"):
        load_config(str(tmp_path / "missing.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("entities: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_config(str(broken))
    no_factory = tmp_path / "nofactory.py"
    no_factory.write_text("CONFIG = {}\n")
    with pytest.raises(ConfigError, match="get_torchbiggraph_config"):
        load_config(str(no_factory))


def test_overrides_follow_pbg_shape() -> None:
    raw = apply_overrides(with_changes(), [
        "num_epochs=7", "lr=0.5", "edge_paths=a,b", "relations.0.operator=complex_diagonal",
        "entities.user.num_partitions=1", "init_path=null", "bucket_order=random"])
    config = parse_config(raw)
    assert config.num_epochs == 7 and config.lr == 0.5
    assert config.edge_paths == ["a", "b"]
    assert config.relations[0].operator == "complex_diagonal"
    assert config.entities["user"].num_partitions == 1
    assert config.bucket_order == "random"


def test_bad_override_is_named() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(with_changes(), ["num_epochs"])
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides(with_changes(), ["relations.3.operator=none"])


def test_json_schema_accepts_valid_and_rejects_invalid_configs() -> None:
    schema = config_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(parse_config(MINIMAL).to_dict(), schema)
    jsonschema.validate(MINIMAL, schema)
    for bad in ({"dimensoin": 3}, {"comparator": "dott"}, {"batch_size": 0},
                {"relations": [{"name": "r", "lhs": "user"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(with_changes(**bad), schema)


def test_json_schema_covers_every_field_with_help() -> None:
    schema = config_json_schema()
    assert set(schema["properties"]) == {f.name for f in dataclasses.fields(ConfigSchema)}
    assert all(prop["description"] for prop in schema["properties"].values())
    assert schema["properties"]["bucket_order"]["enum"] == list(typing.get_args(BucketOrderName))


def test_config_module_does_not_import_torch() -> None:
    code = "import sys, tessera.config; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


TRANSPORT_KEYS = {"num_groups_for_partition_server": 32,
                  "num_groups_per_sharded_partition_server": 4, "partition_shard_size": 100}


def test_pbg_transport_keys_at_their_defaults_pass_silently() -> None:
    """PBG configs spell these keys out; at PBG's defaults they are accepted as they are."""
    defaults = {key: PBG_DEFAULTS[key] for key in TRANSPORT_KEYS}
    config = parse_config(with_changes(**defaults, num_machines=2, num_partition_servers=4))
    assert {key: getattr(config, key) for key in TRANSPORT_KEYS} == defaults


@pytest.mark.parametrize(("key", "value"), list(TRANSPORT_KEYS.items()))
def test_pbg_transport_keys_set_otherwise_are_refused_with_the_reason(
        key: str, value: int, tmp_path: typing.Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: is {value}, but .*(torch RPC|whole)"):
        parse_config(with_changes(**{key: value}))
    # From the command line: exit 65, one line naming the key, what to do, no traceback.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(with_changes(**{key: value})))
    assert main(["config", "check", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{key}: is {value}" in err and "remove the key" in err
