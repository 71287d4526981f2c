"""Who is who in a distributed job: roles, their ranks and names, and who owns what.

The world is one lock server (rank 0, which hosts the rendezvous), `num_partition_servers`
partition servers (ranks 1..P) and `num_machines` trainers (ranks P+1..P+M). Each process is
named after its role and rank within the role (`lock-server`, `partition-server-1`,
`trainer-0`), which is also how its peers address it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigSchema
from ..errors import ConfigError
from ..vocabulary import PartitionKey, Role, process_name


@dataclass(frozen=True)
class WorldLayout:
    num_partition_servers: int
    num_trainers: int

    @classmethod
    def from_config(cls, config: ConfigSchema) -> WorldLayout:
        """The layout a config describes; `num_partition_servers: -1` means one per machine."""
        servers = config.num_partition_servers
        return cls(config.num_machines if servers == -1 else servers, config.num_machines)

    @property
    def world_size(self) -> int:
        return 1 + self.num_partition_servers + self.num_trainers

    def count(self, role: Role) -> int:
        return {Role.LOCK_SERVER: 1, Role.PARTITION_SERVER: self.num_partition_servers,
                Role.TRAINER: self.num_trainers}[role]

    def check_rank(self, role: Role, role_rank: int) -> None:
        count = self.count(role)
        if not 0 <= role_rank < count:
            key = "num_machines" if role is Role.TRAINER else "num_partition_servers"
            raise ConfigError(key, f"{role.value} rank {role_rank} does not exist: the config "
                              f"has {count} {role.value}(s), ranks 0 to {count - 1}")

    def rank_of(self, role: Role, role_rank: int = 0) -> int:
        self.check_rank(role, role_rank)
        if role is Role.LOCK_SERVER:
            return 0
        if role is Role.PARTITION_SERVER:
            return 1 + role_rank
        return 1 + self.num_partition_servers + role_rank

    def role_of(self, rank: int) -> tuple[Role, int]:
        if rank == 0:
            return Role.LOCK_SERVER, 0
        if rank <= self.num_partition_servers:
            return Role.PARTITION_SERVER, rank - 1
        return Role.TRAINER, rank - 1 - self.num_partition_servers

    def name_of(self, rank: int) -> str:
        role, role_rank = self.role_of(rank)
        return process_name(role, role_rank)

    def names(self, role: Role) -> list[str]:
        return [self.name_of(self.rank_of(role, r)) for r in range(self.count(role))]

    def partition_server_of(self, key: PartitionKey) -> str:
        """The partition server that keeps a partition when no trainer holds it."""
        _, part = key
        return self.name_of(self.rank_of(Role.PARTITION_SERVER,
                                         part % self.num_partition_servers))

    def parameter_server_names(self) -> list[str]:
        """Where the shards of the shared parameters live: in the partition servers, or in
        the lock server when there are none."""
        return self.names(Role.PARTITION_SERVER) or [Role.LOCK_SERVER.value]


@dataclass(frozen=True)
class PeerInfo:
    """What a process tells the others about itself when it joins, for error messages."""

    rank: int
    name: str
    host: str
    address: str
    pid: int

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid} on {self.host}, {self.address})"
