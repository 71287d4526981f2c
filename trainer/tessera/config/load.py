"""Read a config file (YAML, JSON or a PBG-style Python file) and apply `-p key=value` overrides.

YAML and JSON may live at any fsspec URL, and are parsed strictly (`text_formats`). Python
configs are executed from a local path, as PBG does, but without touching `sys.path`.
"""

from __future__ import annotations

import importlib.util
import io
import os
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import fsspec

from ..errors import ConfigError
from ..os_errors import classify_local
from .schema import ConfigSchema
from .text_formats import parse_json, parse_yaml
from .validate import parse_config


def read_config_dict(location: str) -> dict[str, Any]:
    """The raw mapping a config file holds, before validation."""
    if location.endswith(".py"):
        return _read_python_config(location)
    text = _read_text(location)
    if location.endswith(".json"):
        raw = parse_json(text, location)
    else:
        raw = parse_yaml(text, location)
    if not isinstance(raw, dict):
        raise ConfigError(location, "the config must be a mapping of keys to values")
    return raw


def _read_text(location: str) -> str:
    """The file's text, decoded as UTF-8 (universal newlines, as a text-mode open reads)."""
    try:
        with fsspec.open(location, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise ConfigError(location, "config file not found") from None
    except IsADirectoryError:
        raise ConfigError(location, "this is a folder; give the config file in it") from None
    except OSError as error:  # a symlink loop, a file in the path, a refused permission...
        classified = classify_local(error, location)
        if classified is None:
            raise
        raise classified from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(location, f"line {line}: byte 0x{data[error.start]:02x} is not UTF-8 "
                                    "text; save the config as UTF-8") from None
    return io.StringIO(text, newline=None).read()


def _read_python_config(location: str) -> dict[str, Any]:
    path = Path(location)
    if not path.is_file():
        raise ConfigError(location, "config file not found")
    try:
        raw = _run_python_config(path)
    except ConfigError:
        raise
    except Exception as error:  # the user's code: any error is a mistake in the config
        raise _python_config_error(path, error) from None
    except SystemExit as error:  # sys.exit() in the config would end the command silently
        raise ConfigError(location, f"the config called sys.exit({error.code!r}); a config "
                                    "must return its dict, not exit") from None
    if not isinstance(raw, dict):
        raise ConfigError(location, "get_torchbiggraph_config() must return a dict")
    return raw


def _run_python_config(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_tessera_config_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    factory = getattr(module, "get_torchbiggraph_config", None)
    if factory is None:
        raise ConfigError(str(path), "a Python config must define get_torchbiggraph_config()")
    return factory()


def _python_config_error(path: Path, error: Exception) -> ConfigError:
    """`file, line N: Type: message`, the line being the config's own, not a library's."""
    line = _line_in_config(path, error)
    where = f"{path}, line {line}" if line else str(path)
    if isinstance(error, SyntaxError):
        return ConfigError(where, f"SyntaxError: {error.msg}; fix the Python config")
    problem = f"{type(error).__name__}: {error}"
    if isinstance(error, KeyError) and _raised_by_environ(error):
        problem += (f" (the environment variable {error.args[0]} is not set: set it, or "
                    "read it with os.environ.get and a default)")
    return ConfigError(where, f"the config raised {problem}")


def _line_in_config(path: Path, error: Exception) -> int | None:
    if isinstance(error, SyntaxError) and error.filename and _same_file(error.filename, path):
        return error.lineno
    frames = traceback.extract_tb(error.__traceback__)
    lines = [frame.lineno for frame in frames if _same_file(frame.filename, path)]
    return lines[-1] if lines else None


def _raised_by_environ(error: KeyError) -> bool:
    """Whether `os.environ[...]` raised it (the os module is frozen: no file to compare)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_globals.get("__name__") == "os"


def _same_file(filename: str, path: Path) -> bool:
    return os.path.realpath(filename) == os.path.realpath(path)


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply `key=value` overrides; keys are dotted paths (`relations.0.operator`)."""
    for override in overrides:
        key, sep, text = override.partition("=")
        if not sep or not key:
            raise ConfigError(override, "an override must look like key=value")
        value = parse_yaml(text, f"override {key}") if text else ""
        *parents, leaf = key.split(".")
        target: Any = raw
        for part in parents:
            target = _step(target, part, key)
        if isinstance(target, list):
            target[_index(target, leaf, key)] = value
        else:
            current = target.get(leaf) if isinstance(target, dict) else None
            if leaf == "edge_paths" or isinstance(current, list):
                if isinstance(value, str):  # PBG style: -p edge_paths=a,b
                    value = [item for item in value.split(",") if item]
            target[leaf] = value
    return raw


def _step(target: Any, part: str, key: str) -> Any:
    if isinstance(target, list):
        return target[_index(target, part, key)]
    if isinstance(target, dict):
        return target.setdefault(part, {})
    raise ConfigError(key, f"cannot descend into '{part}': it is not a mapping or a list")


def _index(target: list[Any], part: str, key: str) -> int:
    if not part.isdigit() or int(part) >= len(target):
        raise ConfigError(key, f"'{part}' is not an index of a list of {len(target)} items")
    return int(part)


def load_config(location: str, overrides: Iterable[str] = ()) -> ConfigSchema:
    """Read, override and validate a config; raise ConfigError naming the key if it is wrong."""
    return parse_config(apply_overrides(read_config_dict(location), overrides))
