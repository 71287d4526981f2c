"""Turn a plain mapping (from YAML, JSON or a PBG Python config) into a checked ConfigSchema.

Type errors and unknown keys are reported against the key's path (`relations[0].lhs`);
cross-field rules that make a config impossible to train are checked afterwards.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal, Union

from ..errors import ConfigError
from .redaction import check_not_redacted
from .schema import COMPLEX_OPERATORS, UNREGULARIZED_OPERATORS, ConfigSchema
from .transport_keys import check_transport_keys

T = typing.TypeVar("T")


def parse_config(raw: Any) -> ConfigSchema:
    """Check `raw` against the schema and the cross-field rules; raise ConfigError if wrong."""
    config = _parse_dataclass(ConfigSchema, raw, "")
    check_consistency(config)
    return config


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    matches = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{matches[0]}'?)" if matches else ""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _parse_dataclass(cls: type[T], raw: Any, path: str) -> T:
    if not isinstance(raw, dict):
        raise ConfigError(path or "config", f"expected a mapping, got {_describe(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in fields:
            raise ConfigError(_join(path, str(key)), "unknown key" + did_you_mean(str(key), fields)
                              + "; remove it or fix its spelling")
    values = {}
    for name, spec in fields.items():
        key_path = _join(path, name)
        if name not in raw:
            if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise ConfigError(key_path, f"required key is missing ({spec.metadata['help']})")
            continue
        value = _parse_value(hints[name], raw[name], key_path)
        _check_bounds(spec.metadata, value, key_path)
        values[name] = value
    return cls(**values)


def _parse_value(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _parse_value(inner, value, path)
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, f"{value!r} is not one of {', '.join(map(repr, args))}"
                              + did_you_mean(str(value), map(str, args)))
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {_describe(value)}")
        return [_parse_value(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {_describe(value)}")
        if args[1] is Any:
            return dict(value)
        return {str(k): _parse_value(args[1], v, _join(path, str(k))) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _parse_dataclass(hint, value, path)
    return _parse_scalar(hint, value, path)


def _parse_scalar(hint: type, value: Any, path: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN passes every bound; no key means infinity
                raise ConfigError(path, f"expected a finite number, got {value}; for no "
                                  "limit, give a large one")
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - a schema field of an unsupported type is a programming error
        raise TypeError(f"unsupported schema type {hint!r} at {path}")
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    raise ConfigError(path, f"expected {names[hint]}, got {_describe(value)}")


def _check_bounds(metadata: typing.Mapping[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if metadata.get("minimum") is not None and value < metadata["minimum"]:
        raise ConfigError(path, f"must be at least {metadata['minimum']}, got {value}")
    if metadata.get("exclusive_minimum") is not None and value <= metadata["exclusive_minimum"]:
        raise ConfigError(path, f"must be greater than {metadata['exclusive_minimum']}, "
                          f"got {value}")
    if metadata.get("maximum") is not None and value > metadata["maximum"]:
        raise ConfigError(path, f"must be at most {metadata['maximum']}, got {value}")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _check_paths_named(config: ConfigSchema) -> None:
    """An empty path would read and write the current directory, as if it had been named."""
    named = {"entity_path": config.entity_path, "checkpoint_path": config.checkpoint_path,
             **{f"edge_paths[{i}]": path for i, path in enumerate(config.edge_paths)}}
    if config.init_path is not None:
        named["init_path"] = config.init_path
    for key, path in named.items():
        if not path.strip():
            raise ConfigError(key, "is empty; name a directory (a path or a URL)")


def check_consistency(config: ConfigSchema) -> None:
    """Rules that involve several keys; each error names the key to change."""
    if not config.entities:
        raise ConfigError("entities", "at least one entity type is required")
    if not config.relations:
        raise ConfigError("relations", "at least one relation type is required")
    _check_paths_named(config)
    for i, relation in enumerate(config.relations):
        for side in ("lhs", "rhs"):
            entity = getattr(relation, side)
            if entity not in config.entities:
                raise ConfigError(
                    f"relations[{i}].{side}", f"unknown entity type '{entity}'"
                    + did_you_mean(entity, config.entities)
                    + f"; declared types are: {', '.join(sorted(config.entities))}")
    partition_counts = {name: e.num_partitions for name, e in config.entities.items()
                        if e.num_partitions != 1}
    if len(set(partition_counts.values())) > 1:
        listing = ", ".join(f"{name}={count}" for name, count in sorted(partition_counts.items()))
        raise ConfigError("entities", f"partitioned entity types must all use the same "
                          f"num_partitions (or 1, unpartitioned); got {listing}")
    if config.dynamic_relations and len(config.relations) != 1:
        raise ConfigError("relations", "with dynamic_relations: true, exactly one relation must "
                          "be declared (it is the template of all relation types); got "
                          f"{len(config.relations)}")
    _check_corrupted_sides(config)
    _check_relations_trainable(config)
    if config.half_precision and config.num_gpus == 0:
        raise ConfigError("half_precision", "half precision needs GPU training; set num_gpus "
                          "> 0 or half_precision: false")
    if config.partition_cache_gb and config.num_machines > 1:
        raise ConfigError("partition_cache_gb", "keeps partitions in one trainer's memory, but "
                          "with num_machines > 1 the trainers share them through partition "
                          "servers or the checkpoint; set partition_cache_gb: 0")
    if config.eval_fraction >= 1:
        raise ConfigError("eval_fraction", "must be below 1, or no edge is left to train on")
    check_transport_keys(config)
    check_not_redacted(config.to_dict())


def _check_relations_trainable(config: ConfigSchema) -> None:
    """What the model needs of each relation: checked with the config, so that `config check`
    and the operator refuse what training would (PBG fails inside the first batch)."""
    relations = config.relations[:1] if config.dynamic_relations else config.relations
    for index, relation in enumerate(relations):
        path = f"relations[{index}]"
        lhs_dim = config.entity_dimension(relation.lhs)
        rhs_dim = config.entity_dimension(relation.rhs)
        if lhs_dim != rhs_dim:
            raise ConfigError(path, f"its entity types '{relation.lhs}' (dimension {lhs_dim}) "
                              f"and '{relation.rhs}' (dimension {rhs_dim}) cannot be compared; "
                              "give them the same dimension")
        if relation.operator in COMPLEX_OPERATORS and rhs_dim % 2 != 0:
            raise ConfigError(f"{path}.operator", f"{relation.operator} splits embeddings into "
                              "real and imaginary halves, so it needs an even dimension, not "
                              f"{rhs_dim}")
        featurized = [side for side in (relation.lhs, relation.rhs)
                      if config.entities[side].featurized]
        if relation.all_negs and featurized:
            raise ConfigError(f"{path}.all_negs", f"entity type '{featurized[0]}' is featurized, "
                              "so its entities cannot be listed as negatives; set all_negs: false")
        if config.regularization_coef > 0 and relation.operator in UNREGULARIZED_OPERATORS:
            raise ConfigError("regularization_coef", f"the {config.regularizer} regularizer is not "
                              f"defined for the {relation.operator} operator of {path}; set "
                              "regularization_coef: 0 or use another operator")


def _check_corrupted_sides(config: ConfigSchema) -> None:
    """Some side must be corrupted; with reciprocal relations the right-hand one, which ranks
    both sides (one per direction)."""
    if config.disable_lhs_negs and config.disable_rhs_negs:
        raise ConfigError("disable_rhs_negs", "disable_lhs_negs and disable_rhs_negs are both "
                          "true, so no negatives would be sampled; enable at least one side")
    if config.reciprocal_relations and config.disable_rhs_negs:
        raise ConfigError("disable_rhs_negs", "with reciprocal_relations each side is ranked as "
                          "the right-hand side of one direction, so right-hand negatives are "
                          "needed; set disable_rhs_negs: false (disable_lhs_negs: true "
                          "trains each direction on its right-hand side only)")
    if (config.reciprocal_relations and config.dynamic_relations and not config.disable_lhs_negs
            and config.relations[0].all_negs):
        # Each relation's left-hand operator already ranks left-hand sides; against every
        # entity (no draws), r's inverse is trained as that operator's exact mirror.
        raise ConfigError("reciprocal_relations", "with dynamic_relations, all_negs and both "
                          "sides corrupted, each inverse relation trains as an exact mirror of "
                          "its relation's left-hand operator: the model trained without "
                          "reciprocal_relations, for twice the work; set disable_lhs_negs: true "
                          "(the 1-vs-all setting), or reciprocal_relations: false")
