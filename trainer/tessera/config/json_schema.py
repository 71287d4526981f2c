"""Derive a JSON Schema of the config from the dataclasses, for the CRD and for editors."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from .schema import ConfigSchema

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def config_json_schema() -> dict[str, Any]:
    """A draft 2020-12 JSON Schema that accepts exactly the mappings the validator accepts
    (cross-field rules aside)."""
    schema = _dataclass_schema(ConfigSchema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Tessera training config"
    return schema


def _dataclass_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    properties = {}
    required = []
    for spec in dataclasses.fields(cls):
        prop = _type_schema(hints[spec.name])
        prop["description"] = spec.metadata["help"]
        for key, name in (("minimum", "minimum"), ("exclusive_minimum", "exclusiveMinimum"),
                          ("maximum", "maximum")):
            if spec.metadata.get(key) is not None:
                prop[name] = spec.metadata[key]
        if spec.default is not dataclasses.MISSING:
            prop["default"] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            prop["default"] = spec.default_factory()
        else:
            required.append(spec.name)
        properties[spec.name] = prop
    return {"type": "object", "description": (cls.__doc__ or "").strip(),
            "properties": properties, "required": required, "additionalProperties": False}


def _type_schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        (inner,) = [arg for arg in args if arg is not type(None)]
        schema = _type_schema(inner)
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        if args[1] is Any:
            return {"type": "object", "additionalProperties": True}
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint)  # type: ignore[arg-type]
    return {"type": _SCALARS[hint]}
