"""The search space of `tessera tune`: which config keys a trial varies, and over what.

A space file is a YAML (or JSON) mapping from config keys, dotted as `-p` takes them (`lr`,
`relations.0.operator`), to a range `{low: L, high: H}` (optionally `log: true` or a `step`)
or to `{choices: [...]}`. A range of an integer key draws integers. Every mistake is found
before the first trial trains, and named by the file and the key: a misspelt key, a range
whose ends are swapped, a value the config itself would refuse.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from ..config import ConfigSchema, parse_config
from ..config.text_formats import parse_yaml
from ..config.validate import did_you_mean
from ..errors import ConfigError

SPEC_KEYS = ("low", "high", "log", "step", "choices")
# Where a trial reads its data and writes its checkpoints is the tuner's to set, not to tune.
NOT_TUNABLE = frozenset({"entity_path", "checkpoint_path", "init_path"})
DEFAULT_ORIGIN = "the default space"

# What matters most on a knowledge graph (see docs/cli.md, "Tuning a knowledge graph"): the
# learning rate, the dimension, N3's weight, the negatives and the epochs.
DEFAULT_SPACE: dict[str, dict[str, Any]] = {
    "lr": {"low": 0.01, "high": 2.0, "log": True},
    "dimension": {"choices": [100, 200, 400, 1000]},
    "regularization_coef": {"low": 1e-4, "high": 0.1, "log": True},
    "num_uniform_negs": {"choices": [0, 100, 1000]},
    "num_epochs": {"low": 10, "high": 100, "step": 10},
}


@dataclass(frozen=True)
class Dimension:
    """One key of the space: a range (`low`, `high`, `log`, `step`) or `choices`."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    integer: bool = False  # a range of an int key draws ints

    def suggest(self, trial: Any) -> Any:
        """This key's value for an Optuna trial."""
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low or 0), int(self.high or 0),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, float(self.low or 0), float(self.high or 0),
                                   step=self.step, log=self.log)

    def candidates(self) -> dict[str, Any]:
        """The values a trial may take that checking them all finds every bad one: the
        choices, or a range's ends, and in a range of integers the one after low too (the
        config's rules on an integer are bounds and evenness: complex operators)."""
        if self.choices is not None:
            return {f"choices[{i}]": value for i, value in enumerate(self.choices)}
        ends = {"low": self.low, "high": self.high}
        after_low = (self.low or 0) + int(self.step or 1)
        if self.integer and after_low <= (self.high or 0):
            return {**ends, "low + step": after_low}
        return ends


@dataclass(frozen=True)
class SearchSpace:
    dimensions: tuple[Dimension, ...]
    origin: str  # the space file, or DEFAULT_ORIGIN

    def suggest(self, trial: Any) -> dict[str, Any]:
        return {dimension.key: dimension.suggest(trial) for dimension in self.dimensions}


def load_space(location: str | None, raw_config: dict[str, Any],
               config: ConfigSchema) -> SearchSpace:
    """The space of a file (None: the default space), checked against the user's config."""
    if location is None:
        raw = default_space(config)
        origin = DEFAULT_ORIGIN
    else:
        raw = read_space_file(location)
        origin = location
    space = parse_space(raw, origin)
    check_candidates(space, raw_config)
    return space


def default_space(config: ConfigSchema) -> dict[str, dict[str, Any]]:
    """DEFAULT_SPACE, without sampled negatives where every relation ranks against all
    entities (`all_negs`): there they change nothing."""
    if all(relation.all_negs for relation in config.relations):
        return {key: spec for key, spec in DEFAULT_SPACE.items() if key != "num_uniform_negs"}
    return dict(DEFAULT_SPACE)


def read_space_file(location: str) -> Any:
    try:
        text = Path(location).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(location, "space file not found; fix --space") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(location, f"cannot read the space file ({error})") from None
    return parse_yaml(text, location)


def parse_space(raw: Any, origin: str) -> SearchSpace:
    """Check the shape of a space (keys known and tunable, ranges well formed)."""
    if raw is None or raw == {}:
        raise ConfigError(origin, "the space is empty; name at least one key to tune, e.g. "
                                  "lr: {low: 0.01, high: 1.0, log: true}")
    if not isinstance(raw, dict):
        raise ConfigError(origin, "the space must be a mapping of config keys to "
                                  "{low: L, high: H} or {choices: [...]}")
    return SearchSpace(tuple(_dimension(str(key), spec, origin) for key, spec in raw.items()),
                       origin)


def _dimension(key: str, spec: Any, origin: str) -> Dimension:
    where = f"{origin}: {key}"
    kind = tunable_type(key, where)
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(where, "give {low: L, high: H} (with log: true or a step if you "
                                 "like) or {choices: [...]}")
    for name in spec:
        if name not in SPEC_KEYS:
            raise ConfigError(f"{where}.{name}", "unknown" + did_you_mean(str(name), SPEC_KEYS)
                              + f"; a key's range takes {', '.join(SPEC_KEYS)}")
    if "choices" in spec:
        return _choices(key, spec, where)
    return _range(key, spec, where, integer=kind is int)


def _choices(key: str, spec: dict[str, Any], where: str) -> Dimension:
    extra = [name for name in spec if name != "choices"]
    if extra:
        raise ConfigError(f"{where}.{extra[0]}", "give either choices or a range, not both")
    choices = spec["choices"]
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{where}.choices", "expected a non-empty list of values")
    for i, value in enumerate(choices):
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise ConfigError(f"{where}.choices[{i}]", "expected a single value (a number, "
                              "a string, true, false or null)")
    return Dimension(key, choices=tuple(choices))


def _range(key: str, spec: dict[str, Any], where: str, *, integer: bool) -> Dimension:
    for end in ("low", "high"):
        if end not in spec:
            raise ConfigError(where, f"a range needs low and high; {end} is missing")
    number = int if integer else (int, float)
    for name in ("low", "high", "step"):
        value = spec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, number)):
            expected = "an integer (the key is one)" if integer else "a number"
            raise ConfigError(f"{where}.{name}", f"expected {expected}, got {value!r}")
    low, high, step, log = spec["low"], spec["high"], spec.get("step"), spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log", f"expected true or false, got {log!r}")
    if low > high:
        raise ConfigError(where, f"low ({low}) is above high ({high}); swap them")
    if log and low <= 0:
        raise ConfigError(f"{where}.low", f"a log range needs low > 0, got {low}")
    if log and step is not None:
        raise ConfigError(where, "give log: true or a step, not both")
    if step is not None and step <= 0:
        raise ConfigError(f"{where}.step", f"must be above 0, got {step}")
    return Dimension(key, low=low, high=high, log=log, step=step, integer=integer)


def tunable_type(key: str, where: str) -> Any:
    """The schema type of a dotted config key (int, float, bool, str or a Literal), or a
    ConfigError naming it: unknown, a path, or not a single value."""
    hint: Any = ConfigSchema
    for part in key.split("."):
        hint = _without_none(hint)
        origin = typing.get_origin(hint)
        if dataclasses.is_dataclass(hint):
            fields = typing.get_type_hints(hint)
            if part not in fields:
                raise ConfigError(where, "unknown config key" + did_you_mean(part, fields))
            hint = fields[part]
        elif origin is list and part.isdigit():
            hint = typing.get_args(hint)[0]
        elif origin is dict:
            hint = typing.get_args(hint)[1]
        else:
            raise ConfigError(where, "unknown config key (lists take an index: relations.0.lr)")
    hint = _without_none(hint)
    if key in NOT_TUNABLE:
        raise ConfigError(where, "a path is not tuned: each trial trains into a folder of "
                                 "its own under the tune folder")
    if hint in (int, float, bool, str) or typing.get_origin(hint) is Literal:
        return hint
    raise ConfigError(where, "not a single value; name a key inside it (relations.0.operator)")


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (Union, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return inner
    return hint


def check_candidates(space: SearchSpace, raw_config: dict[str, Any]) -> None:
    """Refuse a space with a value the config itself refuses (`dimension: {low: 0}`), each
    value tried in the user's config alone."""
    for dimension in space.dimensions:
        for name, value in dimension.candidates().items():
            try:
                parse_config(with_values(raw_config, {dimension.key: value}))
            except ConfigError as error:
                raise ConfigError(f"{space.origin}: {dimension.key}.{name}",
                                  f"{value!r} makes the config wrong ({error})") from None


def with_values(raw_config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of a raw config with dotted keys set (a missing mapping on the way is made)."""
    raw = copy.deepcopy(raw_config)
    for key, value in values.items():
        *parents, leaf = key.split(".")
        target: Any = raw
        for part in parents:
            target = target[_index(target, part, key)] if isinstance(target, list) else \
                target.setdefault(part, {})
        if isinstance(target, list):
            target[_index(target, leaf, key)] = value
        else:
            target[leaf] = value
    return raw


def _index(items: list[Any], part: str, key: str) -> int:
    if int(part) >= len(items):
        raise ConfigError(key, f"no item {part}: the config's list has {len(items)}")
    return int(part)
