"""The training config: schema, loading, validation and its JSON Schema."""

from .json_schema import config_json_schema
from .load import apply_overrides, load_config, read_config_dict
from .schema import ConfigSchema, EntitySchema, RelationSchema
from .validate import parse_config

__all__ = [
    "ConfigSchema",
    "EntitySchema",
    "RelationSchema",
    "apply_overrides",
    "config_json_schema",
    "load_config",
    "parse_config",
    "read_config_dict",
]
