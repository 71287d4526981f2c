"""Edge bucket files: PBG's layout, appends, partial reads, atomic publication, bad files."""

from __future__ import annotations

import gc
import tracemalloc
import zlib

import h5py
import numpy as np
import pytest
import s3fs
from support.corruption import flip_a_bit

from tessera.errors import BadInputError, FormatError
from tessera.storage import edges as edges_module
from tessera.storage import fs as fs_module
from tessera.storage.edges import (
    CHUNK_ROWS,
    bucket_file,
    open_bucket_writer,
    read_bucket,
    read_bucket_size,
    write_bucket,
)


def random_edges(num_edges: int, seed: int = 0, num_entities: int = 50, num_relations: int = 3):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, num_relations, num_edges), rng.integers(0, num_entities, num_edges),
            rng.integers(0, num_entities, num_edges))


def write_raw_bucket(directory, name="edges_0_1.h5", attrs=None, **datasets):
    """A bucket made with h5py alone, to hand-craft what the writer would never produce."""
    with directory.writing(name) as path, h5py.File(path, "w") as file:
        for key, value in ({"format_version": 1} if attrs is None else attrs).items():
            file.attrs[key] = value
        for key, values in datasets.items():
            file.create_dataset(key, data=np.asarray(values))


def test_bucket_file_name():
    assert bucket_file(0, 3) == "edges_0_3.h5"


def test_bucket_round_trips_and_reads_any_row_range_on_every_backend(directory):
    rel, lhs, rhs = random_edges(1000)
    write_bucket(directory, 1, 0, rel, lhs, rhs)

    assert read_bucket_size(directory, 1, 0) == 1000
    whole = read_bucket(directory, 1, 0, num_lhs=50, num_rhs=50, num_relations=3)
    assert whole.rel.dtype == whole.lhs.dtype == whole.rhs.dtype == np.int64
    np.testing.assert_array_equal(whole.rel, rel)
    np.testing.assert_array_equal(whole.lhs, lhs)
    np.testing.assert_array_equal(whole.rhs, rhs)
    assert whole.lhs_offsets is None and whole.rhs_data is None

    chunk = read_bucket(directory, 1, 0, 250, 500)
    assert len(chunk) == 250
    np.testing.assert_array_equal(chunk.lhs, lhs[250:500])
    np.testing.assert_array_equal(read_bucket(directory, 1, 0, 900).rhs, rhs[900:])


def test_row_ranges_follow_slice_semantics(local_dir):
    rel, lhs, rhs = random_edges(10)
    write_bucket(local_dir, 0, 0, rel, lhs, rhs)
    assert len(read_bucket(local_dir, 0, 0, 8, 100)) == 2
    assert len(read_bucket(local_dir, 0, 0, 20, 30)) == 0
    np.testing.assert_array_equal(read_bucket(local_dir, 0, 0, -3).rel, rel[-3:])


def test_an_empty_bucket_is_valid(local_dir):
    write_bucket(local_dir, 0, 0, [], [], [])
    assert read_bucket_size(local_dir, 0, 0) == 0
    assert len(read_bucket(local_dir, 0, 0, num_lhs=1, num_rhs=1, num_relations=1)) == 0


def test_many_small_appends_are_gathered_into_few_writes(local_dir, monkeypatch):
    writes = []
    original_write = edges_module._AppendableDataset._write

    def counting_write(self, values):
        writes.append((f"/{self.name}", len(values)))
        original_write(self, values)

    monkeypatch.setattr(edges_module._AppendableDataset, "_write", counting_write)
    rel, lhs, rhs = random_edges(7 * 10_000)
    with open_bucket_writer(local_dir, 0, 1) as writer:
        for start in range(0, len(rel), 7):
            writer.append(rel[start:start + 7], lhs[start:start + 7], rhs[start:start + 7])
        assert writer.num_edges == 70_000

    # Per dataset: one write once a chunk's worth is pending, one for the rest at the end.
    first = -(-CHUNK_ROWS // 7) * 7
    assert sorted(writes) == sorted((f"/{key}", rows) for key in ("rel", "lhs", "rhs")
                                    for rows in (first, 70_000 - first))
    edges = read_bucket(local_dir, 0, 1)
    np.testing.assert_array_equal(edges.rel, rel)
    np.testing.assert_array_equal(edges.rhs, rhs)


def test_the_writer_copies_what_the_caller_may_reuse(local_dir):
    block = np.array([1, 2, 3])
    with open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append(block, block, block)
        block[:] = 0  # an importer refilling its buffer
        writer.append(block, block, block)
    np.testing.assert_array_equal(read_bucket(local_dir, 0, 0).lhs, [1, 2, 3, 0, 0, 0])


@pytest.mark.parametrize("num_edges", [100, CHUNK_ROWS + 100])
def test_writer_files_are_exactly_pbgs_layout_when_opened_with_h5py_alone(tmp_path, num_edges):
    directory = fs_module.Directory(str(tmp_path))
    rel, lhs, rhs = random_edges(num_edges)
    with open_bucket_writer(directory, 2, 3) as writer:
        for start in range(0, num_edges, 1000):
            writer.append(rel[start:start + 1000], lhs[start:start + 1000],
                          rhs[start:start + 1000])

    with h5py.File(tmp_path / "edges_2_3.h5", "r") as file:
        assert sorted(file.keys()) == ["lhs", "rel", "rhs"]
        assert dict(file.attrs) == {"format_version": 1}
        for key, expected in (("rel", rel), ("lhs", lhs), ("rhs", rhs)):
            dataset = file[key]
            assert dataset.dtype == np.int64 and dataset.shape == (num_edges,)
            # Less than a chunk: written at its exact size; more: in chunks, as it grew.
            assert dataset.chunks == (None if num_edges < CHUNK_ROWS else (CHUNK_ROWS,))
            assert dataset.fletcher32 == (num_edges >= CHUNK_ROWS)  # a checksum per chunk
            np.testing.assert_array_equal(dataset[...], expected)


@pytest.mark.parametrize("num_edges", [100, CHUNK_ROWS + 100])
def test_each_column_carries_the_crc32_of_its_rows_as_read(tmp_path, num_edges):
    directory = fs_module.Directory(str(tmp_path))
    rel, lhs, rhs = random_edges(num_edges)
    with open_bucket_writer(directory, 0, 1) as writer:
        for start in range(0, num_edges, 1000):  # relation ids given as int32, read as int64
            writer.append(rel[start:start + 1000].astype(np.int32), lhs[start:start + 1000],
                          rhs[start:start + 1000])
    with h5py.File(tmp_path / "edges_0_1.h5", "r") as file:
        for key, values in (("rel", rel), ("lhs", lhs), ("rhs", rhs)):
            assert file[key].attrs["crc32"] == zlib.crc32(values.astype(np.int64))
    assert len(read_bucket(directory, 0, 1, num_relations=3)) == num_edges


def test_a_bit_flipped_at_rest_in_a_column_is_found_by_a_whole_read(tmp_path):
    directory = fs_module.Directory(str(tmp_path))
    rel, lhs, rhs = random_edges(100)
    write_bucket(directory, 0, 1, rel, lhs, rhs)
    path = tmp_path / "edges_0_1.h5"
    flip_a_bit(path, "lhs", byte=8 * 5)  # row 5's lowest byte: an id in range all the same
    with pytest.raises(FormatError, match=r"edges_0_1.h5: corrupt: the rows of 'lhs' read do "
                                          "not match the CRC-32 written with them"):
        read_bucket(directory, 0, 1, num_lhs=51)
    # A part of the column has nothing to be checked against.
    assert read_bucket(directory, 0, 1, 0, 50).lhs[5] == lhs[5] ^ 1
    with h5py.File(path, "r+") as file:  # changed on purpose: the attribute goes
        del file["lhs"].attrs["crc32"]
    assert read_bucket(directory, 0, 1).lhs[5] == lhs[5] ^ 1


@pytest.mark.parametrize("num_relations", [3, 1])  # one relation type: rel is read by blocks
@pytest.mark.parametrize("column", ["rel", "lhs"])
def test_a_bit_flipped_in_a_chunk_is_found_by_reading_that_chunk_alone(tmp_path, column,
                                                                        num_relations):
    directory = fs_module.Directory(str(tmp_path))
    rel, lhs, rhs = random_edges(3 * CHUNK_ROWS, num_relations=num_relations)
    write_bucket(directory, 0, 1, rel, lhs, rhs)
    row = CHUNK_ROWS + 5  # in the second of three HDF5 chunks
    flip_a_bit(tmp_path / "edges_0_1.h5", column, byte=8 * row)
    bounds = {"num_relations": num_relations, "num_lhs": 51}
    with pytest.raises(FormatError, match=rf"edges_0_1.h5: corrupt: rows \d+\.\.\d+ of "
                                          f"'{column}' fail the Fletcher-32 checksum"):
        read_bucket(directory, 0, 1, row - 10, row + 10, **bounds)  # an edge chunk's read
    # Rows in the other chunks are read as written.
    np.testing.assert_array_equal(
        read_bucket(directory, 0, 1, 0, CHUNK_ROWS, **bounds).lhs, lhs[:CHUNK_ROWS])
    np.testing.assert_array_equal(
        read_bucket(directory, 0, 1, 2 * CHUNK_ROWS, None, **bounds).rhs, rhs[2 * CHUNK_ROWS:])


def test_a_bit_flipped_in_a_featurized_column_is_found(local_dir, tmp_path):
    with open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append([0, 1, 2], [-1, -1, -1], [7, 8, 9], lhs_features=([0, 2, 2, 3], [4, 5, 6]))
    flip_a_bit(tmp_path / "store" / "edges_0_0.h5", "lhsd_data", byte=8)  # 5 becomes 4
    with pytest.raises(FormatError, match="corrupt: the rows of 'lhsd_data' read"):
        read_bucket(local_dir, 0, 0, num_lhs=7)


def test_a_small_bucket_takes_the_disk_its_edges_need(tmp_path):
    """A chunked dataset takes a whole chunk (512 KiB) however few rows it holds: a graph
    with many buckets and a few edges in each (a held-out set) took 1.5 MB per bucket."""
    directory = fs_module.Directory(str(tmp_path))
    write_bucket(directory, 0, 0, *random_edges(10))
    assert (tmp_path / "edges_0_0.h5").stat().st_size < 16 * 1024
    assert len(read_bucket(directory, 0, 0)) == 10


def test_featurized_sides_use_pbgs_ragged_datasets(local_dir, tmp_path):
    # Three edges whose lhs entities have features [4, 5], [], [6]; the rhs side is plain.
    with open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append([0, 1], [-1, -1], [7, 8], lhs_features=([0, 2, 2], [4, 5]))
        writer.append([2], [-1], [9], lhs_features=([0, 1], [6]))

    with h5py.File(tmp_path / "store" / "edges_0_0.h5", "r") as file:
        assert sorted(file.keys()) == ["lhs", "lhsd_data", "lhsd_offsets", "rel", "rhs"]
        np.testing.assert_array_equal(file["lhsd_offsets"][...], [0, 2, 2, 3])
        np.testing.assert_array_equal(file["lhsd_data"][...], [4, 5, 6])

    tail = read_bucket(local_dir, 0, 0, 1, 3, num_lhs=7, num_rhs=10, num_relations=3)
    np.testing.assert_array_equal(tail.lhs_offsets, [0, 0, 1])  # rebased to the first row
    np.testing.assert_array_equal(tail.lhs_data, [6])
    np.testing.assert_array_equal(tail.rhs, [8, 9])
    assert tail.rhs_offsets is None
    with pytest.raises(FormatError, match=r"lhs feature id 6 at row 2 is out of range \[0, 6\)"):
        read_bucket(local_dir, 0, 0, num_lhs=6)


def test_featurized_appends_must_be_consistent(local_dir):
    with pytest.raises(ValueError, match="featurized in every append"), \
            open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append([0], [-1], [1], lhs_features=([0, 1], [3]))
        writer.append([0], [2], [1])
    assert local_dir.listdir() == []


def test_unequal_appended_arrays_are_refused(local_dir):
    with pytest.raises(ValueError, match="one length"), \
            open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append([0, 0], [1], [2, 3])


def test_a_failure_inside_the_writer_publishes_nothing(directory):
    write_bucket(directory, 0, 0, *random_edges(5))
    before = directory.listdir()
    with pytest.raises(RuntimeError, match="source went away"), \
            open_bucket_writer(directory, 0, 1) as writer:
        writer.append(*random_edges(10))
        raise RuntimeError("source went away")
    assert directory.listdir() == before  # no bucket, no temporary file


def test_a_failure_while_flushing_publishes_nothing(local_dir, monkeypatch):
    def failing_close(self):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"), \
            open_bucket_writer(local_dir, 0, 0) as writer:
        writer.append(*random_edges(10))
        monkeypatch.setattr(edges_module._AppendableDataset, "close", failing_close)
    assert local_dir.listdir() == []


@pytest.mark.parametrize(("datasets", "attrs", "problem"), [
    ({"rel": [0], "lhs": [0]}, None, "dataset 'rhs' is missing"),
    ({"rel": [0] * 9, "lhs": [0] * 10, "rhs": [0] * 9}, None, "'lhs' has 10 rows but 'rel' has 9"),
    ({"rel": [0], "lhs": [0], "rhs": [0.5]}, None, "'rhs' must be 1-D integers"),
    ({"rel": [0], "lhs": [0], "rhs": [0]}, {}, "attribute 'format_version' is missing"),
    ({"rel": [0], "lhs": [0], "rhs": [0]}, {"format_version": 2}, "format_version is 2"),
    ({"rel": [0], "lhs": [0], "rhs": [0], "lhsd_offsets": [0, 1]}, None,
     "dataset 'lhsd_data' is missing"),
    ({"rel": [0], "lhs": [0], "rhs": [0], "rhsd_offsets": [0], "rhsd_data": [1]}, None,
     "'rhsd_offsets' has 1 rows, expected 2"),
    ({"rel": [0, 0], "lhs": [0, 0], "rhs": [0, 0], "rhsd_offsets": [0, 2, 1],
      "rhsd_data": [1, 1]}, None, "'rhsd_offsets' rows 0..2 are not increasing"),
])
def test_malformed_buckets_name_the_file_and_the_problem(local_dir, datasets, attrs, problem):
    write_raw_bucket(local_dir, attrs=attrs, **datasets)
    with pytest.raises(FormatError, match=problem) as caught:
        read_bucket(local_dir, 0, 1)
    assert caught.value.file == local_dir.url_of("edges_0_1.h5")
    assert str(caught.value).startswith(local_dir.url_of("edges_0_1.h5") + ": ")


@pytest.mark.parametrize(("bounds", "message"), [
    ({"num_lhs": 50}, r"lhs id 57 at row 3 is out of range \[0, 50\)"),
    ({"num_rhs": 5}, r"rhs id -1 at row 1 is out of range \[0, 5\)"),
    ({"num_relations": 2}, r"rel id 2 at row 4 is out of range \[0, 2\)"),
])
def test_ids_out_of_range_are_reported_with_their_row(local_dir, bounds, message):
    write_raw_bucket(local_dir, rel=[0, 1, 0, 0, 2], lhs=[1, 2, 3, 57, 4], rhs=[0, -1, 2, 3, 4])
    with pytest.raises(FormatError, match=message):
        read_bucket(local_dir, 0, 1, **bounds)
    # Rows outside the range read are not checked (nor read).
    assert len(read_bucket(local_dir, 0, 1, 0, 1, num_lhs=50, num_rhs=5, num_relations=2)) == 1


def test_with_one_relation_type_a_bucket_holds_no_relation_column(local_dir):
    """Its relation ids are checked a chunk at a time (all 0) and stand as a broadcast view
    of one 0: reading n edges allocates the two id columns, 16 bytes an edge, not 24."""
    num_edges = 3 * CHUNK_ROWS + 17
    _, lhs, rhs = random_edges(num_edges)
    write_bucket(local_dir, 0, 1, np.zeros(num_edges, dtype=np.int64), lhs, rhs)
    tracemalloc.start()
    try:
        edges = read_bucket(local_dir, 0, 1, 5, num_relations=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(edges) == num_edges - 5 and edges.rel.strides == (0,)
    np.testing.assert_array_equal(edges.rel, np.zeros(num_edges - 5))
    np.testing.assert_array_equal(edges.lhs, lhs[5:])
    assert 16 * num_edges < peak < 17 * num_edges


def test_with_one_relation_type_a_stray_relation_id_is_reported_with_its_row(local_dir):
    rel = np.zeros(CHUNK_ROWS + 10, dtype=np.int64)
    rel[CHUNK_ROWS + 3] = 1
    write_raw_bucket(local_dir, rel=rel, lhs=np.zeros_like(rel), rhs=np.zeros_like(rel))
    with pytest.raises(FormatError, match=rf"rel id 1 at row {CHUNK_ROWS + 3} is out of range "
                                          r"\[0, 1\)"):
        read_bucket(local_dir, 0, 1, num_relations=1)
    assert len(read_bucket(local_dir, 0, 1, 0, CHUNK_ROWS, num_relations=1)) == CHUNK_ROWS


def test_size_checks_the_format_too(local_dir):
    write_raw_bucket(local_dir, rel=[0, 0], lhs=[0], rhs=[0, 0])
    with pytest.raises(FormatError, match="'lhs' has 1 rows but 'rel' has 2"):
        read_bucket_size(local_dir, 0, 1)


def test_missing_and_non_hdf5_buckets(local_dir):
    with pytest.raises(BadInputError, match=r"edges_0_1\.h5: file not found.*tessera import"):
        read_bucket(local_dir, 0, 1)
    local_dir.write_text("edges_0_1.h5", "rel,lhs,rhs\n0,1,2\n")
    with pytest.raises(FormatError, match=r"edges_0_1\.h5: not a readable HDF5 file"):
        read_bucket_size(local_dir, 0, 1)


def test_reading_a_chunk_of_a_remote_bucket_fetches_only_a_small_part(s3_directory,
                                                                       monkeypatch):
    num_edges = 1_000_000  # three int64 datasets: about 25 MB
    rel, lhs, rhs = random_edges(num_edges, num_entities=1000)
    write_bucket(s3_directory, 0, 0, rel, lhs, rhs)
    file_size = s3_directory.size("edges_0_0.h5")

    fetched = []
    original_fetch = s3fs.core.S3File._fetch_range

    def counting_fetch(self, start, end):
        fetched.append(end - start)
        return original_fetch(self, start, end)

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counting_fetch)
    # Blocks smaller than the file, as they are relative to a real multi-GB bucket.
    monkeypatch.setattr(fs_module, "REMOTE_BLOCK_SIZE", 256 * 1024)

    chunk = read_bucket(s3_directory, 0, 0, 200_000, 201_000)
    np.testing.assert_array_equal(chunk.lhs, lhs[200_000:201_000])
    assert 0 < sum(fetched) < file_size / 4

    fetched.clear()
    whole = read_bucket(s3_directory, 0, 0)
    np.testing.assert_array_equal(whole.rhs, rhs)
    assert sum(fetched) >= 3 * num_edges * 8  # the counter does see every byte


def test_remote_reads_pause_the_cyclic_garbage_collector(s3_directory, monkeypatch):
    # h5py issue #2019: h5py holds its global lock while fsspec's IO thread fetches bytes; a
    # collection on that thread that frees an h5py object needs the lock: a deadlock.
    write_bucket(s3_directory, 0, 0, *random_edges(1000))
    collector_enabled = []
    original_fetch = s3fs.core.S3File._fetch_range

    def recording_fetch(self, start, end):
        collector_enabled.append(gc.isenabled())
        return original_fetch(self, start, end)

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", recording_fetch)
    assert len(read_bucket(s3_directory, 0, 0)) == 1000
    assert collector_enabled and not any(collector_enabled)
    assert gc.isenabled()
