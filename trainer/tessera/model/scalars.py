"""Per-batch numbers (loss, regularization) without making the host wait for a device.

Reading a scalar of a GPU tensor on the host waits for every queued kernel, which would
stall the device once per batch; there such numbers stay tensors, summed on the device and
read once per bucket. On the CPU reading one costs nothing, and a float is cheaper to add.
"""

from __future__ import annotations

import torch


def batch_scalar(value: torch.Tensor) -> float | torch.Tensor:
    """`value` as a float on the CPU, as a detached 0-d tensor on any other device."""
    return value.item() if value.is_cpu else value.detach()
