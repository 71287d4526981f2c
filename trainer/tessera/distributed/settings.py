"""Where the rendezvous is and how long to wait for peers: the config, then flags and env.

The config's `distributed_init_method` is the default address; `--init-method` or
`TESSERA_INIT_METHOD` override it (a pod, a test or `--local-cluster` may reach the lock
server at another address than the config names). Time-outs bound every wait: a peer that
never joins, stops answering, or dies produces an error naming it instead of a hang.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from ..config import ConfigSchema
from ..errors import ConfigError

INIT_METHOD_ENV = "TESSERA_INIT_METHOD"
PEER_TIMEOUT_ENV = "TESSERA_PEER_TIMEOUT_S"
RENDEZVOUS_TIMEOUT_ENV = "TESSERA_RENDEZVOUS_TIMEOUT_S"

# Pods of one job start within minutes of each other (image pulls, scheduling).
DEFAULT_RENDEZVOUS_TIMEOUT_S = 600.0
# A peer silent for this long is lost; heartbeats go out several times within it.
DEFAULT_PEER_TIMEOUT_S = 20.0
# One call: a lock request, or moving one partition (large ones take a while).
CALL_TIMEOUT_S = 300.0
# Writing a partition server's share of a checkpoint to (possibly remote) storage.
CHECKPOINT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DistributedSettings:
    init_method: str
    rendezvous_timeout: float = DEFAULT_RENDEZVOUS_TIMEOUT_S
    peer_timeout: float = DEFAULT_PEER_TIMEOUT_S
    call_timeout: float = CALL_TIMEOUT_S
    checkpoint_timeout: float = CHECKPOINT_TIMEOUT_S

    @property
    def heartbeat_interval(self) -> float:
        return min(1.0, self.peer_timeout / 5)

    @property
    def poll_interval(self) -> float:
        """How often a waiting trainer asks the lock server again."""
        return 0.02

    @property
    def host(self) -> str:
        return urlparse(self.init_method).hostname or ""

    @property
    def port(self) -> int:
        return urlparse(self.init_method).port or 0


def distributed_settings(config: ConfigSchema, init_method: str | None = None,
                         peer_timeout: float | None = None,
                         rendezvous_timeout: float | None = None,
                         environ: Mapping[str, str] | None = None) -> DistributedSettings:
    """Settings from the flags, else the environment, else the config (and defaults)."""
    env = os.environ if environ is None else environ
    method = init_method or env.get(INIT_METHOD_ENV) or config.distributed_init_method
    if not method:
        raise ConfigError("distributed_init_method", "the distributed roles need the lock "
                          "server's address, e.g. tcp://lock-server-host:29500 (or pass "
                          f"--init-method, or set {INIT_METHOD_ENV})")
    check_init_method(method)
    return DistributedSettings(
        init_method=method,
        rendezvous_timeout=_seconds(rendezvous_timeout, env, RENDEZVOUS_TIMEOUT_ENV,
                                    DEFAULT_RENDEZVOUS_TIMEOUT_S),
        peer_timeout=peer_timeout_setting(peer_timeout, env))


def peer_timeout_setting(flag: float | None, environ: Mapping[str, str] | None = None) -> float:
    """The peer time-out: the flag, else TESSERA_PEER_TIMEOUT_S, else the default."""
    env = os.environ if environ is None else environ
    return _seconds(flag, env, PEER_TIMEOUT_ENV, DEFAULT_PEER_TIMEOUT_S)


def check_init_method(method: str) -> None:
    parsed = urlparse(method)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "tcp" or not parsed.hostname or not port:
        raise ConfigError("distributed_init_method", f"{method!r} is not a rendezvous "
                          "address of the form tcp://HOST:PORT")


def _seconds(flag: float | None, env: Mapping[str, str], name: str, default: float) -> float:
    if flag is not None:
        value, source = flag, "the flag"
    elif env.get(name):
        try:
            value, source = float(env[name]), name
        except ValueError as error:
            raise ConfigError(name, f"{env[name]!r} is not a number of seconds") from error
    else:
        return default
    if value <= 0:
        raise ConfigError(name, f"a time-out must be positive, {source} gives {value}")
    return value
