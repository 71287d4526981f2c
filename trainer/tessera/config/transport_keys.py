"""PBG keys that tune a transport Tessera does not have: accepted at their defaults only.

PBG moves partitions between trainers and partition servers over torch.distributed process
groups (several per server, for bandwidth) and, with more partition servers than machines,
splits each partition into fixed-size shards spread over the servers. Tessera moves each
partition whole over torch RPC, to and from the one partition server that keeps it (partition
p on server p mod num_partition_servers). PBG configs set these keys, so their defaults pass
silently; any other value would change nothing here, and is refused rather than ignored.
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from .schema import ConfigSchema

WHY_REFUSED = {
    "num_groups_for_partition_server":
        "PBG talks to partition servers over this many torch.distributed process groups; "
        "Tessera moves partitions over torch RPC, which has no process groups",
    "num_groups_per_sharded_partition_server":
        "it sets the process groups of PBG's sharded partition servers; Tessera moves "
        "partitions over torch RPC and never shards them",
    "partition_shard_size":
        "PBG splits partitions into shards of this many MiB across partition servers; "
        "Tessera keeps each partition whole on one partition server",
}


def check_transport_keys(config: ConfigSchema) -> None:
    """Refuse a non-default value of a key in WHY_REFUSED, naming the key and why."""
    defaults = {field.name: field.default for field in dataclasses.fields(ConfigSchema)}
    for key, why in WHY_REFUSED.items():
        value = getattr(config, key)
        if value != defaults[key]:
            raise ConfigError(key, f"is {value}, but {why}; remove the key (or set it to its "
                              f"default, {defaults[key]})")
