"""The names of the model's parameters: state-dict keys and PyTorch-BigGraph's public names.

The model file stores each parameter as the dataset `model/<public name>`, with its state-dict
key as the `state_dict_key` attribute. PBG reads the public names back and maps them to keys
with the same two patterns as here, so both directions must stay exactly PBG's.
"""

from __future__ import annotations

import re

# (state-dict key pattern, public name pattern); fields never contain "." or "/".
_PATTERNS = [
    ("{side}_operators.{idx}.{param}", "relations/{idx}/operator/{side}/{param}"),
    ("global_embs.emb_{type}", "entities/{type}/global_embedding"),
]


def _regex(pattern: str) -> re.Pattern[str]:
    escaped = re.escape(pattern).replace(r"\{", "{").replace(r"\}", "}")
    return re.compile(re.sub(r"{(\w+)}", r"(?P<\1>[^./]+)", escaped))


def _translate(name: str, source: int) -> str:
    for pattern in _PATTERNS:
        match = _regex(pattern[source]).fullmatch(name)
        if match is not None:
            return pattern[1 - source].format(**match.groupdict())
    raise KeyError(f"{name!r} is not a model parameter name Tessera or PyTorch-BigGraph knows")


def public_name(state_dict_key: str) -> str:
    """`rhs_operators.0.diagonal` -> `relations/0/operator/rhs/diagonal`."""
    return _translate(state_dict_key, 0)


def state_dict_key(public: str) -> str:
    """`entities/user/global_embedding` -> `global_embs.emb_user`."""
    return _translate(public, 1)
