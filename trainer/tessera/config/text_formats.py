"""Parsing config text (YAML, JSON) strictly: what would be read silently wrong is refused.

Both formats let a key appear twice, the last one winning: a config that sets `lr` twice
trains with whichever came last, which is rarely what its author meant, so a repeated key is
an error naming it and its line. YAML aliases are kept (`<<: *defaults` is a fair way to
share relation settings), but a document whose aliases expand to more than `MAX_VALUES`
values (a "billion laughs": each alias repeating the one before) is refused before anything
walks it, as validation and printing would, for hours.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from ..errors import ConfigError

# Far above any real config (a few hundred values), far below what takes a second to walk.
MAX_VALUES = 100_000


class _YamlLoader(yaml.SafeLoader):
    """A SafeLoader that refuses repeated keys, and reads `1e-3` as a number (YAML 1.2), as
    users expect."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges; later keys override
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"the key {key!r} appears twice; keep one", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)$|^[-+]?(?:\d+\.\d*|\.\d+)$"),
    list("-+0123456789."),
)


def parse_yaml(text: str, source: str) -> Any:
    """The value a YAML document holds; ConfigError naming `source` and the line if wrong."""
    try:
        value = yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise ConfigError(source, f"not valid YAML: {_one_line(error)}") from None
    except RecursionError:
        raise ConfigError(source, "not valid YAML: nested too deeply") from None
    _check_expanded_size(value, source)
    return value


def parse_json(text: str, source: str) -> Any:
    """The value a JSON document holds; ConfigError naming `source` and the line if wrong."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, source))
    except json.JSONDecodeError as error:
        raise ConfigError(source, f"not valid JSON: {error}") from None
    except RecursionError:
        raise ConfigError(source, "not valid JSON: nested too deeply") from None


def _unique_keys(pairs: list[tuple[str, Any]], source: str) -> dict[str, Any]:
    keys: set[str] = set()
    for key, _ in pairs:
        if key in keys:  # json gives no position: the key and its neighbours say where
            raise ConfigError(source, f"not valid JSON: the key {key!r} appears twice in one "
                                      f"object (keys {', '.join(k for k, _ in pairs)}); keep "
                                      "one")
        keys.add(key)
    return dict(pairs)


def _check_expanded_size(value: Any, source: str) -> None:
    """Count the values `value` holds, aliases expanded, stopping at MAX_VALUES."""
    pending = [value]
    count = 0
    while pending:
        item = pending.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(source, f"the document expands to more than {MAX_VALUES} values "
                                      "(aliases repeating aliases?); write it out plainly")
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's message without its source excerpt, with the line and column it points at."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return " ".join(str(error).split())
    mark = error.problem_mark
    return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}" + (
        f" ({error.context})" if error.context else "")
