"""Bit rot on demand: one bit of an HDF5 dataset's stored values flipped in place."""

from __future__ import annotations

from pathlib import Path

import h5py


def flip_a_bit(path: Path, dataset: str = "embeddings", byte: int = 0) -> None:
    """Flip the lowest bit of byte `byte` of `dataset`'s data: the file is as readable as
    before, one number differs. A chunked 1-D dataset's byte is found in its chunk (stored
    unfiltered but for a checksum, so its values lie in one run of the file)."""
    with h5py.File(path, "r") as file:
        data = file[dataset]
        if data.chunks is None:
            offset = data.id.get_offset() + byte
        else:
            chunk_bytes = data.chunks[0] * data.dtype.itemsize
            first_row = byte // chunk_bytes * data.chunks[0]
            chunk = data.id.get_chunk_info_by_coord((first_row,))
            offset = chunk.byte_offset + byte % chunk_bytes
    with open(path, "r+b") as file:
        file.seek(offset)
        value = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([value ^ 1]))
