"""`Directory` counts the bytes it moves, on every backend (the trainer's storage metrics)."""

from __future__ import annotations

import h5py
import numpy as np

from tessera.metrics import STORAGE_READ_BYTES, STORAGE_WRITTEN_BYTES
from tessera.storage.fs import Directory
from tessera.storage.hdf5 import reading_hdf5, writing_hdf5


def counted() -> tuple[float, float]:
    return STORAGE_READ_BYTES._value.get(), STORAGE_WRITTEN_BYTES._value.get()


def test_written_files_and_read_text_are_counted_exactly(directory: Directory) -> None:
    read_before, written_before = counted()
    directory.write_text("checkpoint_version.txt", "12\n")
    directory.write_text("names.json", '["é"]')  # 6 bytes: é takes two
    assert counted() == (read_before, written_before + 3 + 6)
    assert directory.read_text("names.json") == '["é"]'
    assert counted() == (read_before + 6, written_before + 9)


def test_streamed_reads_count_what_was_read(directory: Directory) -> None:
    payload = np.arange(50_000, dtype=np.int64)
    with writing_hdf5(directory, "edges.h5") as file:
        file.create_dataset("lhs", data=payload)
    size = directory.size("edges.h5")
    read_before, written_before = counted()
    assert written_before > 0
    with directory.open_read("edges.h5") as stream:
        assert len(stream.read()) == size
    assert counted() == (read_before + size, written_before)


def test_remote_hdf5_reads_are_counted(s3_directory: Directory) -> None:
    with writing_hdf5(s3_directory, "edges.h5") as file:
        file.create_dataset("lhs", data=np.arange(100_000, dtype=np.int64))
    read_before, _ = counted()
    with reading_hdf5(s3_directory, "edges.h5") as file:
        assert isinstance(file, h5py.File)
        assert int(file["lhs"][:].sum()) == 99_999 * 100_000 // 2
    assert counted()[0] - read_before >= 100_000 * 8  # the dataset, and HDF5's headers
