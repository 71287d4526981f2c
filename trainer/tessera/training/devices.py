"""Where a trainer computes: the CPU (Hogwild workers, compiled kernels) or CUDA devices.

`num_gpus: 0` trains on the CPU. With `num_gpus: N` a trainer trains on N CUDA devices of
its machine; trainers that share a machine (`--local-cluster`) take different devices, trainer
`rank` starting at device `rank * N` modulo the devices there. A config asking for more
devices than the machine has is refused before any data is read.
"""

from __future__ import annotations

import torch

from ..config import ConfigSchema
from ..errors import ConfigError


def cuda_device_count() -> int:
    """CUDA devices this process can use (0 with a CPU-only torch build)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_devices(config: ConfigSchema) -> None:
    """Refuse `num_gpus` beyond the CUDA devices of this machine, naming the key."""
    wanted, found = config.num_gpus, cuda_device_count()
    if wanted == 0 or wanted <= found:
        return
    if found == 0:
        raise ConfigError("num_gpus", f"{wanted} GPU(s) asked for, but no CUDA device was found "
                          "(no GPU here, or a torch build without CUDA); set num_gpus: 0 to "
                          "train on the CPU")
    raise ConfigError("num_gpus", f"{wanted} GPUs asked for, but only {found} CUDA device(s) "
                      f"were found; set num_gpus: {found} or fewer (0 trains on the CPU)")


def device_indices(rank: int, num_gpus: int, count: int) -> list[int]:
    """The CUDA device indices of trainer `rank` with `num_gpus` each, on a machine with
    `count` devices: consecutive, starting at `rank * num_gpus`, wrapping around."""
    return [(rank * num_gpus + index) % count for index in range(num_gpus)] if count else []


def training_devices(config: ConfigSchema, rank: int = 0) -> list[torch.device]:
    """The CUDA devices trainer `rank` trains on; empty: the CPU path."""
    return [torch.device("cuda", index)
            for index in device_indices(rank, config.num_gpus, cuda_device_count())]


def embedding_dtype(config: ConfigSchema) -> torch.dtype:
    """How embeddings are stored on a device: float16 with `half_precision` (scores,
    gradients and Adagrad state stay float32), else float32."""
    return torch.float16 if config.half_precision else torch.float32


# The share of a GPU's memory the partitions may take to be held there: a checkpoint written
# in the background copies them once more, and training needs room of its own.
HOLDER_SHARE = 1 / 3


def holder_device(config: ConfigSchema, devices: list[torch.device],
                  entity_counts: dict[str, list[int]]) -> torch.device | None:
    """The device whose memory holds the partitions, so that buckets train them in place
    (None: the host's memory, each bucket's partitions copied to the device and back): the
    one device trained on, where every partition fits `HOLDER_SHARE` of the memory this
    process may use there, with float32 embeddings (half precision keeps float32 copies on
    the host) and no featurized entity type."""
    if len(devices) != 1 or config.half_precision \
            or any(entity.featurized for entity in config.entities.values()):
        return None
    device = devices[0]
    if device.type != "cuda":
        return device  # the tests' device: the host's memory either way
    model_bytes = sum(sum(entity_counts[name]) * (config.entity_dimension(name) + 1) * 4
                      for name in config.entities)
    # A cap set for the process (`set_per_process_memory_fraction`; torch before 2.6 cannot
    # say: uncapped).
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda _: 1.0)(device)
    usable = torch.cuda.get_device_properties(device).total_memory * fraction
    budget = usable * HOLDER_SHARE
    return device if model_bytes <= budget else None
