"""Bit rot on demand: one bit of an HDF5 dataset's stored values flipped in place."""

from __future__ import annotations

from pathlib import Path

import h5py


def flip_a_bit(path: Path, dataset: str = "embeddings", byte: int = 0) -> None:
    """Flip the lowest bit of byte `byte` of `dataset`'s data (contiguous, so its values lie
    in one run of the file): the file is as readable as before, one number differs."""
    with h5py.File(path, "r") as file:
        offset = file[dataset].id.get_offset()
    with open(path, "r+b") as file:
        file.seek(offset + byte)
        value = file.read(1)[0]
        file.seek(offset + byte)
        file.write(bytes([value ^ 1]))
