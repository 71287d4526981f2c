"""Where a /metrics endpoint listens: one syntax, `[HOST:]PORT`, for the trainer's roles and
for the operator (which imports this without the trainer's metrics)."""

from __future__ import annotations

from .errors import ConfigError

METRICS_PORT_ENV = "TESSERA_METRICS_PORT"
ALL_INTERFACES = "0.0.0.0"


def parse_address(value: str, source: str) -> tuple[str, int]:
    """(host, port) of `PORT` (every interface) or `HOST:PORT`; `source` names the flag or
    variable the value came from."""
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(source, f"{value!r} is not a port or HOST:PORT (e.g. 9464 or "
                                  "127.0.0.1:9464)")
    return host.strip("[]") or ALL_INTERFACES, int(port)
