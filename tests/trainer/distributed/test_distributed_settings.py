"""Roles, ranks and addresses of a distributed job, and the launcher's exit code."""

from __future__ import annotations

from typing import Any

import pytest

from tessera.config import parse_config
from tessera.distributed.local_cluster import exit_code_of, role_commands
from tessera.distributed.settings import (
    DEFAULT_PEER_TIMEOUT_S,
    INIT_METHOD_ENV,
    PEER_TIMEOUT_ENV,
    distributed_settings,
)
from tessera.distributed.world import Role, WorldLayout
from tessera.errors import ConfigError


def config(**overrides: Any) -> Any:
    return parse_config({
        "entities": {"node": {"num_partitions": 4}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node"}],
        "dimension": 4, "entity_path": "e", "edge_paths": ["p"], "checkpoint_path": "c",
        **overrides})


def test_ranks_and_names_of_every_role() -> None:
    layout = WorldLayout.from_config(config(num_machines=3, num_partition_servers=2))
    assert layout.world_size == 6
    assert [layout.name_of(rank) for rank in range(6)] == [
        "lock-server", "partition-server-0", "partition-server-1", "trainer-0", "trainer-1",
        "trainer-2"]
    assert layout.rank_of(Role.TRAINER, 2) == 5 and layout.role_of(5) == (Role.TRAINER, 2)
    with pytest.raises(ConfigError, match="num_machines: trainer rank 3 does not exist"):
        layout.rank_of(Role.TRAINER, 3)


def test_one_partition_server_per_machine_by_default_and_shards_by_partition() -> None:
    layout = WorldLayout.from_config(config(num_machines=2))  # num_partition_servers: -1
    assert layout.num_partition_servers == 2
    owners = [layout.partition_server_of(("node", part)) for part in range(4)]
    assert owners == ["partition-server-0", "partition-server-1"] * 2
    assert layout.parameter_server_names() == ["partition-server-0", "partition-server-1"]
    alone = WorldLayout.from_config(config(num_machines=2, num_partition_servers=0))
    assert alone.parameter_server_names() == ["lock-server"]


def test_the_rendezvous_address_comes_from_flag_then_environment_then_config() -> None:
    base = config(distributed_init_method="tcp://lock.jobs.svc:29500")
    assert distributed_settings(base, environ={}).init_method == "tcp://lock.jobs.svc:29500"
    env = {INIT_METHOD_ENV: "tcp://10.0.0.5:1234", PEER_TIMEOUT_ENV: "3.5"}
    from_env = distributed_settings(base, environ=env)
    assert (from_env.host, from_env.port, from_env.peer_timeout) == ("10.0.0.5", 1234, 3.5)
    flagged = distributed_settings(base, "tcp://127.0.0.1:9", peer_timeout=2, environ=env)
    assert flagged.init_method == "tcp://127.0.0.1:9" and flagged.peer_timeout == 2
    assert distributed_settings(base, environ={}).peer_timeout == DEFAULT_PEER_TIMEOUT_S


@pytest.mark.parametrize("method, problem", [
    (None, "the distributed roles need the lock server's address"),
    ("env://", "is not a rendezvous address"),
    ("tcp://host-without-port", "is not a rendezvous address"),
])
def test_a_missing_or_malformed_address_is_a_config_error(method: str | None,
                                                          problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        distributed_settings(config(distributed_init_method=method), environ={})
    assert raised.value.path == "distributed_init_method"


def test_a_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ConfigError, match=PEER_TIMEOUT_ENV):
        distributed_settings(config(distributed_init_method="tcp://h:1"),
                             environ={PEER_TIMEOUT_ENV: "0"})


def test_the_local_cluster_starts_every_role_with_the_same_counts() -> None:
    commands = role_commands("job.yaml", ["num_epochs=3"], WorldLayout(1, 2),
                             ["--log-format", "json"])
    assert [name for name, _ in commands] == ["lock-server", "partition-server-0",
                                              "trainer-0", "trainer-1"]
    for name, command in commands:
        assert "--param=num_machines=2" in command
        assert "--param=num_partition_servers=1" in command
        assert "--param=num_epochs=3" in command
        subcommand = command[command.index("job.yaml") - 1]
        assert name.startswith("trainer" if subcommand == "train" else subcommand)
    assert commands[-1][1][-2:] == ["--rank", "1"]


@pytest.mark.parametrize("first, codes, expected", [
    (None, [0, 0, 0], 0),
    (-9, [75, 75, -9], 75),     # a killed role is a lost peer
    (75, [75, 65, 75], 65),     # bad input beats transient
    (1, [1, 75, 75], 1),        # the first failure's code otherwise
    (-15, [None, None, -15], 75),
])
def test_the_local_cluster_exits_with_the_failure_that_matters(
        first: int | None, codes: list[int | None], expected: int) -> None:
    assert exit_code_of(first, codes) == expected
