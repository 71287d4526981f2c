"""Checkpoints: PBG's files bit for bit, atomic commits, crash leftovers, preservation."""

from __future__ import annotations

import dataclasses
import fcntl
import io
import itertools
import json
import os
import tracemalloc
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import s3fs
from support.corruption import flip_a_bit

from tessera.config import parse_config
from tessera.errors import BadInputError, FormatError
from tessera.storage import checkpoint as checkpoint_module
from tessera.storage import fs as fs_module
from tessera.storage.checkpoint import CheckpointStore, should_preserve
from tessera.storage.fs import Directory
from tessera.storage.hdf5 import DatasetFile

CONFIG = {
    "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
    "relations": [{"name": "likes", "lhs": "user", "rhs": "item", "operator": "translation"}],
    "dimension": 4,
}
COUNTS = {("user", 0): 5, ("user", 1): 3, ("item", 0): 7}
METADATA = {"config/json": json.dumps(CONFIG), "iteration/epoch_idx": 2,
            "iteration/num_epochs": 5, "iteration/edge_path_idx": 0,
            "iteration/num_edge_paths": 1, "iteration/edge_chunk_idx": 0,
            "iteration/num_edge_chunks": 1}


def embeddings_of(version, entity_type, part):
    rng = np.random.default_rng([version, part, len(entity_type)])
    return rng.standard_normal((COUNTS[entity_type, part], 4)).astype(np.float32)


def params_of(version):
    return {
        "relations/0/operator/rhs/translation": (
            "rhs_operators.0.translation", np.full(4, version, dtype=np.float32)),
        "entities/user/global_embedding": (
            "global_embs.emb_user", np.arange(4, dtype=np.float32) * version),
    }


def optimizer_state_of(version, entity_type="model", part=0):
    # Any bytes, zeros and high bytes included, as torch.save would produce.
    return bytes([0, 255, version % 256]) + f"{entity_type}/{part}".encode() + b"\x00\x80"


def write_version(store, version, metadata=METADATA):
    for entity_type, part in COUNTS:
        store.write_embeddings(version, entity_type, part,
                               embeddings_of(version, entity_type, part),
                               optimizer_state_of(version, entity_type, part), metadata)
    store.write_model(version, params_of(version), optimizer_state_of(version), metadata)


def assert_holds_version(store, version):
    assert store.current_version() == version
    for entity_type, part in COUNTS:
        embeddings, state = store.read_embeddings(entity_type, part,
                                                  num_entities=COUNTS[entity_type, part],
                                                  dimension=4)
        np.testing.assert_array_equal(embeddings, embeddings_of(version, entity_type, part))
        assert state == optimizer_state_of(version, entity_type, part)
    params, state = store.read_model()
    assert state == optimizer_state_of(version)
    assert params.keys() == params_of(version).keys()
    for name, (key, values) in params_of(version).items():
        assert params[name][0] == key
        np.testing.assert_array_equal(params[name][1], values)


def test_a_committed_checkpoint_round_trips_bit_exactly_on_every_backend(directory):
    store = CheckpointStore(directory)
    assert store.current_version() == 0
    write_version(store, 1)
    store.commit(1, CONFIG)

    reopened = CheckpointStore(Directory(directory.url, directory.storage_options))
    assert_holds_version(reopened, 1)
    assert reopened.read_config() == CONFIG
    assert reopened.read_metadata() == METADATA
    assert reopened.read_metadata(entity=("user", 1)) == METADATA


def test_files_are_exactly_pbgs_format_when_opened_with_h5py_alone(tmp_path):
    store = CheckpointStore(Directory(str(tmp_path)))
    write_version(store, 1)
    store.commit(1, CONFIG)

    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_version.txt", "config.json", "embeddings_item_0.v1.h5",
        "embeddings_user_0.v1.h5", "embeddings_user_1.v1.h5", "model.v1.h5"]
    assert (tmp_path / "checkpoint_version.txt").read_text() == "1\n"
    assert (tmp_path / "config.json").read_text() == json.dumps(CONFIG, indent=4)

    with h5py.File(tmp_path / "embeddings_user_1.v1.h5", "r") as file:
        assert dict(file.attrs) == {"format_version": 1, **METADATA}
        assert sorted(file.keys()) == ["embeddings", "optimizer"]
        assert file["embeddings"].dtype == np.float32 and file["embeddings"].shape == (3, 4)
        state = file["optimizer/state_dict"]
        assert state.ndim == 1 and state.dtype == np.dtype("V1")  # opaque bytes, as PBG
        assert state[()].tobytes() == optimizer_state_of(1, "user", 1)

    with h5py.File(tmp_path / "model.v1.h5", "r") as file:
        assert dict(file.attrs) == {"format_version": 1, **METADATA}
        names = []
        file["model"].visititems(
            lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        assert sorted(names) == ["entities/user/global_embedding",
                                 "relations/0/operator/rhs/translation"]
        translation = file["model/relations/0/operator/rhs/translation"]
        assert translation.attrs["state_dict_key"] == "rhs_operators.0.translation"
        np.testing.assert_array_equal(translation[()], np.ones(4, dtype=np.float32))
        assert file["optimizer/state_dict"][()].tobytes() == optimizer_state_of(1)


def test_a_checkpoint_locked_by_another_program_is_read_not_called_corrupt(local_dir):
    """A program holding an HDF5 lock on a file (h5py opened it for writing; a file system
    without locks says ENOLCK instead) made HDF5's own locking refuse it, which the reader
    took for a corrupt file to restore from a copy; Tessera's writers never share a file,
    so it takes no HDF5 locks."""
    store = CheckpointStore(local_dir)
    write_version(store, 1)
    store.commit(1, {})
    held = []
    for path in sorted((Path(local_dir.url)).glob("*.h5")):
        descriptor = os.open(path, os.O_RDWR)
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as HDF5 takes it
        held.append(descriptor)
    try:
        assert_holds_version(store, 1)
        write_version(store, 2)  # its own new files: nothing to wait for
        store.commit(2, {})
        assert_holds_version(store, 2)
    finally:
        for descriptor in held:
            os.close(descriptor)


def test_commit_deletes_the_previous_version(directory):
    store = CheckpointStore(directory)
    write_version(store, 1)
    store.commit(1, CONFIG)
    write_version(store, 2)
    store.commit(2, CONFIG)
    assert_holds_version(store, 2)
    assert not any(".v1." in name for name in directory.listdir())
    assert sum(".v2." in name for name in directory.listdir()) == 4


def test_a_failure_while_writing_leaves_the_committed_version_and_no_partial_file(
        directory, monkeypatch):
    store = CheckpointStore(directory)
    write_version(store, 1)
    store.commit(1, CONFIG)
    before = directory.listdir()

    def failing_state_write(file, state):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "_write_optimizer_state", failing_state_write)
    with pytest.raises(OSError, match="disk full"):
        store.write_embeddings(2, "user", 0, embeddings_of(2, "user", 0), b"state")
    assert directory.listdir() == before  # no embeddings_user_0.v2.h5, no temporary file
    assert_holds_version(store, 1)


def test_a_crash_before_commit_keeps_the_old_version_and_is_cleaned_up(tmp_path):
    directory = Directory(str(tmp_path))
    store = CheckpointStore(directory)
    write_version(store, 1)
    store.commit(1, CONFIG)
    write_version(store, 2)  # ...and the process dies before commit(2)
    (tmp_path / ".embeddings_item_0.v3.h5.x1y2.tmp").write_bytes(b"half a file")
    (tmp_path / "model.v0.h5").write_bytes(b"an old leftover")  # a deletion cut short

    restarted = CheckpointStore(Directory(str(tmp_path)))
    assert_holds_version(restarted, 1)
    restarted.remove_uncommitted(CONFIG)
    assert sorted(directory.listdir()) == [
        "checkpoint_version.txt", "config.json", "embeddings_item_0.v1.h5",
        "embeddings_user_0.v1.h5", "embeddings_user_1.v1.h5", "model.v1.h5"]
    assert_holds_version(restarted, 1)


def contents(directory):
    """Every file of a directory, name -> bytes."""
    return {name: directory.fs.cat_file(directory.path(name)) for name in directory.listdir()}


def test_a_version_file_naming_missing_files_deletes_nothing_and_names_the_complete_version(
        directory):
    store = CheckpointStore(directory)
    write_version(store, 1)
    store.commit(1, CONFIG)
    store.write_model(2, params_of(2))  # a partial copy of version 2...
    directory.write_text("checkpoint_version.txt", "2\n")  # ...that the version file names
    before = contents(directory)

    with pytest.raises(FormatError) as raised:
        CheckpointStore(directory).remove_uncommitted(CONFIG)
    message = str(raised.value)
    assert message == (
        f"{directory.url}/checkpoint_version.txt: names version 2, but its file(s) "
        "embeddings_user_0.v2.h5, embeddings_user_1.v2.h5, embeddings_item_0.v2.h5 are "
        "missing; complete version(s) here: 1. Nothing was deleted: put the missing file(s) "
        "back, or write 1 into checkpoint_version.txt to resume from version 1")
    assert contents(directory) == before  # byte for byte

    directory.write_text("checkpoint_version.txt", "1\n")  # what the message says to do
    store.remove_uncommitted(CONFIG)
    assert "model.v2.h5" not in directory.listdir()
    assert_holds_version(store, 1)


def test_an_incomplete_version_with_no_complete_one_beside_it_keeps_everything(local_dir):
    store = CheckpointStore(local_dir)
    store.write_model(3, params_of(3))
    store.write_embeddings(2, "user", 0, embeddings_of(2, "user", 0))
    local_dir.write_text("checkpoint_version.txt", "3\n")
    before = contents(local_dir)
    with pytest.raises(FormatError, match=r"names version 3, but its file\(s\) "
                       r"embeddings_user_0\.v3\.h5, embeddings_user_1\.v3\.h5, "
                       r"embeddings_item_0\.v3\.h5 are missing; no other version here is "
                       r"complete\. Nothing was deleted: put the missing file\(s\) back, or "
                       r"delete checkpoint_version\.txt to start from scratch$"):
        store.remove_uncommitted(CONFIG)
    assert contents(local_dir) == before


def test_a_committed_version_is_judged_by_the_checkpoints_own_config(local_dir):
    """A run whose config has more partitions than the checkpoint is not told that files are
    missing: the checkpoint is complete, and loading it says what does not fit."""
    store = CheckpointStore(local_dir)
    write_version(store, 1)
    store.commit(1, CONFIG)
    more = {**CONFIG, "entities": {**CONFIG["entities"], "item": {"num_partitions": 4}}}
    store.remove_uncommitted(more)
    assert_holds_version(store, 1)


def test_a_crash_while_committing_keeps_the_old_version(directory, monkeypatch):
    store = CheckpointStore(directory)
    write_version(store, 1)
    store.commit(1, CONFIG)
    write_version(store, 2)
    original_write_text = Directory.write_text

    def crashing_write_text(self, name, text):
        if name == "checkpoint_version.txt":
            raise ConnectionError("connection reset")
        original_write_text(self, name, text)

    monkeypatch.setattr(Directory, "write_text", crashing_write_text)
    with pytest.raises(ConnectionError):
        store.commit(2, CONFIG)
    monkeypatch.undo()
    assert_holds_version(CheckpointStore(directory), 1)


def test_an_incomplete_version_cannot_be_committed(local_dir):
    store = CheckpointStore(local_dir)
    write_version(store, 1)
    store.commit(1, CONFIG)
    store.write_model(2, params_of(2))
    store.write_embeddings(2, "user", 0, embeddings_of(2, "user", 0))
    with pytest.raises(FormatError, match=r"embeddings_user_1\.v2\.h5: missing, so version 2 "
                                          r"cannot be committed \(2 file"):
        store.commit(2, CONFIG)
    assert_holds_version(store, 1)


def test_committed_versions_are_never_overwritten(local_dir):
    store = CheckpointStore(local_dir)
    write_version(store, 1)
    store.commit(1, CONFIG)
    with pytest.raises(ValueError, match="not above the committed version 1"):
        store.write_embeddings(1, "user", 0, np.zeros((5, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="not above the committed version 1"):
        store.commit(1, CONFIG)
    assert_holds_version(store, 1)


def test_every_kth_epoch_is_preserved_as_a_loadable_checkpoint(directory):
    store = CheckpointStore(directory)
    for epoch in range(1, 6):
        write_version(store, epoch)
        store.commit(epoch, CONFIG)
        if should_preserve(epoch, interval=2):
            store.preserve(epoch)

    assert_holds_version(store, 5)
    assert not any(".v2." in name or ".v4." in name for name in directory.listdir())
    for epoch in (2, 4):
        snapshot = CheckpointStore(directory.subdirectory(f"epoch_{epoch}"))
        assert_holds_version(snapshot, epoch)
        assert snapshot.read_config() == CONFIG
    assert "epoch_1" not in directory.listdir() and "epoch_3" not in directory.listdir()


@pytest.mark.parametrize(("epochs_done", "interval", "expected"), [
    (2, 2, True), (3, 2, False), (4, 2, True), (0, 2, False), (5, None, False), (1, 1, True)])
def test_should_preserve_follows_pbgs_rule(epochs_done, interval, expected):
    assert should_preserve(epochs_done, interval) is expected


def test_an_init_path_without_version_file_uses_unversioned_names(tmp_path):
    embeddings = np.arange(12, dtype=np.float32).reshape(3, 4)
    with h5py.File(tmp_path / "embeddings_user_0.h5", "w") as file:
        file.attrs["format_version"] = 1
        file.create_dataset("embeddings", data=embeddings)
        # Another tool's uint8 blob reads like PBG's opaque bytes.
        file.create_dataset("optimizer/state_dict", data=np.frombuffer(b"\x00pbg\xff", np.uint8))
    with h5py.File(tmp_path / "model.h5", "w") as file:
        file.attrs["format_version"] = 1
        dataset = file.create_dataset("model/entities/user/global_embedding", data=np.ones(4))
        dataset.attrs["state_dict_key"] = "global_embs.emb_user"

    store = CheckpointStore(Directory(str(tmp_path)))
    assert store.current_version() == 0
    values, state = store.read_embeddings("user", 0, num_entities=3)
    np.testing.assert_array_equal(values, embeddings)
    assert state == b"\x00pbg\xff"
    params, state = store.read_model()
    assert state is None
    assert params["entities/user/global_embedding"][0] == "global_embs.emb_user"
    assert store.has_embeddings("user", 0) and not store.has_embeddings("user", 1)
    with pytest.raises(BadInputError, match=r"embeddings_user_1\.h5: file not found \(there is "
                                            r"no checkpoint_version\.txt"):
        store.read_embeddings("user", 1)


def test_embeddings_are_read_into_a_given_array(local_dir):
    store = CheckpointStore(local_dir)
    write_version(store, 1)
    store.commit(1, CONFIG)
    out = np.zeros((5, 4), dtype=np.float32)
    values, _ = store.read_embeddings("user", 0, out=out)
    assert values is out
    np.testing.assert_array_equal(out, embeddings_of(1, "user", 0))
    with pytest.raises(FormatError, match=r"shape \(5, 4\), expected \(6, 4\)"):
        store.read_embeddings("user", 0, out=np.zeros((6, 4), dtype=np.float32))


def test_a_bit_flipped_at_rest_is_found_by_every_whole_read(tmp_path):
    store = CheckpointStore(Directory(str(tmp_path)))
    write_version(store, 1)
    store.commit(1, CONFIG)
    path = tmp_path / "embeddings_user_0.v1.h5"
    with h5py.File(path, "r") as file:
        assert file["embeddings"].attrs["crc32"] == zlib.crc32(embeddings_of(1, "user", 0))
    flip_a_bit(path, byte=4 * 4 * 3 + 1)  # row 3 of 5
    corrupt = r"embeddings_user_0.v1.h5: corrupt: the embeddings read do not match the CRC-32"
    with pytest.raises(FormatError, match=corrupt):
        store.read_embeddings("user", 0)
    blocks = store.embedding_blocks("user", 0, 1, block_rows=2)
    assert [start for start, _ in itertools.islice(blocks, 3)] == [0, 2, 4]
    with pytest.raises(FormatError, match=corrupt):  # once the last block was handed out
        next(blocks)
    # A few rows are read without the whole: nothing to check them against.
    assert store.read_embedding_rows("user", 0, 1, np.array([0])).shape == (1, 4)
    with h5py.File(path, "r+") as file:  # changed on purpose: the attribute goes
        del file["embeddings"].attrs["crc32"]
    store.read_embeddings("user", 0)


def test_a_bit_flipped_in_a_parameter_or_an_optimizer_state_is_found(tmp_path):
    store = CheckpointStore(Directory(str(tmp_path)))
    write_version(store, 1)
    store.commit(1, CONFIG)
    model, embeddings = tmp_path / "model.v1.h5", tmp_path / "embeddings_user_0.v1.h5"
    parameter = "model/relations/0/operator/rhs/translation"
    with h5py.File(model, "r") as file:
        assert file[parameter].attrs["crc32"] == zlib.crc32(params_of(1)[parameter[6:]][1])
        assert file["optimizer/state_dict"].attrs["crc32"] == zlib.crc32(optimizer_state_of(1))
    flip_a_bit(model, parameter, byte=5)
    with pytest.raises(FormatError, match=rf"model.v1.h5: corrupt: the values of '/{parameter}' "
                                          "read do not match the CRC-32"):
        store.read_model()
    flip_a_bit(embeddings, "optimizer/state_dict", byte=3)
    state = r"embeddings_user_0.v1.h5: corrupt: the optimizer state's bytes read do not match"
    with pytest.raises(FormatError, match=state):
        store.read_embeddings("user", 0)
    with pytest.raises(FormatError, match=state):  # when torch.load would read it, too
        store.read_embeddings("user", 0, read_state=lambda file: file.read())
    with h5py.File(model, "r+") as file:  # changed on purpose: the attributes go
        del file[parameter].attrs["crc32"]
    with h5py.File(embeddings, "r+") as file:
        del file["optimizer/state_dict"].attrs["crc32"]
    assert store.read_model()[0]["relations/0/operator/rhs/translation"][1][1] != 1
    assert store.read_embeddings("user", 0)[1] != optimizer_state_of(1, "user", 0)


def test_a_state_saved_in_pieces_has_the_crc32_of_them_all(tmp_path):
    def save(file):
        for piece in (b"ab", memoryview(np.arange(3, dtype=np.int64)), b"", b"z"):
            file.write(piece)

    store = CheckpointStore(Directory(str(tmp_path)))
    store.write_embeddings(1, "user", 0, embeddings_of(1, "user", 0), save)
    whole = b"ab" + np.arange(3, dtype=np.int64).tobytes() + b"z"
    with h5py.File(tmp_path / "embeddings_user_0.v1.h5", "r") as file:
        assert file["optimizer/state_dict"].attrs["crc32"] == zlib.crc32(whole)
    assert store.read_embeddings("user", 0, 1)[1] == whole


def write_raw_embeddings(tmp_path, attrs=None, **datasets):
    (tmp_path / "checkpoint_version.txt").write_text("3\n")
    with h5py.File(tmp_path / "embeddings_user_0.v3.h5", "w") as file:
        for key, value in ({"format_version": 1} if attrs is None else attrs).items():
            file.attrs[key] = value
        for key, values in datasets.items():
            file.create_dataset(key, data=values)


@pytest.mark.parametrize(("datasets", "attrs", "bounds", "problem"), [
    ({"weights": np.zeros((5, 4))}, None, {}, "dataset 'embeddings' is missing"),
    ({"embeddings": np.zeros((5, 4))}, {"format_version": 2}, {}, "format_version is 2"),
    ({"embeddings": np.zeros((5, 4))}, {}, {}, "attribute 'format_version' is missing"),
    ({"embeddings": np.zeros((6, 4))}, None, {"num_entities": 5},
     r"has shape \(6, 4\), expected \(5, 4\) \(5 entities, as entity_path counts them\)"),
    ({"embeddings": np.zeros((5, 3))}, None, {"dimension": 4},
     r"has shape \(5, 3\), expected \(5, 4\) \(dimension 4\): the checkpoint was trained "
     r"with dimension 3"),
    ({"embeddings": np.zeros(20)}, None, {}, "must be a 2-D float array"),
    ({"embeddings": np.zeros((5, 4), dtype=np.int32)}, None, {}, "must be a 2-D float array"),
])
def test_malformed_embeddings_name_the_file_and_the_problem(tmp_path, datasets, attrs, bounds,
                                                             problem):
    write_raw_embeddings(tmp_path, attrs, **datasets)
    store = CheckpointStore(Directory(str(tmp_path)))
    with pytest.raises(FormatError, match=problem) as caught:
        store.read_embeddings("user", 0, **bounds)
    assert caught.value.file == str(tmp_path / "embeddings_user_0.v3.h5")


@pytest.mark.parametrize("text", ["abc\n", "-1\n", "", "2.0"])
def test_a_version_file_that_is_not_an_integer_is_a_format_error(local_dir, text):
    local_dir.write_text("checkpoint_version.txt", text)
    with pytest.raises(FormatError, match=r"checkpoint_version\.txt: expected a checkpoint "
                                          r"version \(an integer\)"):
        CheckpointStore(local_dir).current_version()


def test_a_missing_file_of_the_committed_version_says_the_version_is_incomplete(local_dir):
    local_dir.write_text("checkpoint_version.txt", "4\n")
    with pytest.raises(BadInputError, match=r"model\.v4\.h5: file not found \(checkpoint "
                                            r"version 4 is incomplete\)"):
        CheckpointStore(local_dir).read_model()


def test_a_model_parameter_without_its_state_dict_key_is_a_format_error(tmp_path):
    with h5py.File(tmp_path / "model.h5", "w") as file:
        file.attrs["format_version"] = 1
        file.create_dataset("model/relations/0/operator/rhs/diagonal", data=np.ones(4))
    with pytest.raises(FormatError, match="'model/relations/0/operator/rhs/diagonal' has no "
                                          "'state_dict_key'"):
        CheckpointStore(Directory(str(tmp_path))).read_model()


def test_a_broken_config_json_is_a_format_error(local_dir):
    local_dir.write_text("config.json", "{entities: }")
    with pytest.raises(FormatError, match=r"config\.json: invalid JSON"):
        CheckpointStore(local_dir).read_config()


def test_parameter_names_are_relative_to_the_model_group(local_dir):
    with pytest.raises(ValueError, match="relative to the 'model' group"):
        CheckpointStore(local_dir).write_model(1, {"model/entities/user/global_embedding": (
            "global_embs.emb_user", np.ones(4))})


def test_training_stats_accumulate_as_json_lines_on_every_backend(directory):
    store = CheckpointStore(directory)
    assert store.read_stats() == []
    store.append_stats([{"epoch_idx": 0, "loss": np.float32(0.5)}])
    store.append_stats([{"epoch_idx": 1, "loss": 0.25}, {"epoch_idx": 1, "count": np.int64(9)}])
    assert store.read_stats() == [{"epoch_idx": 0, "loss": 0.5}, {"epoch_idx": 1, "loss": 0.25},
                                  {"epoch_idx": 1, "count": 9}]
    assert directory.read_text("training_stats.json").count("\n") == 3


def test_stats_survive_an_append_cut_short_but_not_a_corrupt_line(local_dir):
    local_dir.write_text("training_stats.json", '{"loss": 1}\n{"loss": 0.')
    assert CheckpointStore(local_dir).read_stats() == [{"loss": 1}]
    local_dir.write_text("training_stats.json", '{"loss": 1}\nnot json\n{"loss": 2}\n')
    with pytest.raises(FormatError, match=r"training_stats\.json: line 2 is not JSON"):
        CheckpointStore(local_dir).read_stats()


def test_a_version_committed_by_another_process_is_seen_at_once(s3_dir):
    store = CheckpointStore(Directory(s3_dir.url, s3_dir.storage_options))
    write_version(store, 1)
    store.commit(1, CONFIG)
    assert store.current_version() == 1

    # Another trainer (its own connection, its own caches) commits version 10.
    other = s3fs.S3FileSystem(skip_instance_cache=True, **s3_dir.storage_options)
    other.pipe(f"{s3_dir.url}/checkpoint_version.txt", b"10\n")
    other.pipe(f"{s3_dir.url}/model.v10.h5", b"written elsewhere")
    assert store.current_version() == 10
    assert "model.v10.h5" in store.directory.listdir()


def test_remote_embeddings_are_streamed_in_slices_not_held_twice(s3_directory, monkeypatch):
    store = CheckpointStore(s3_directory)
    embeddings = np.random.default_rng(0).standard_normal((32_768, 128)).astype(np.float32)
    store.write_embeddings(1, "user", 0, embeddings)  # 16 MiB
    # Sizes scaled down with the file, as they are relative to a real multi-GB partition.
    monkeypatch.setattr(fs_module, "REMOTE_BLOCK_SIZE", 1 << 20)
    monkeypatch.setattr(checkpoint_module, "READ_SLICE_BYTES", 1 << 20)
    out = np.empty_like(embeddings)

    tracemalloc.start()
    try:
        store.read_embeddings("user", 0, version=1, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, embeddings)
    assert peak < embeddings.nbytes / 2


def test_an_empty_partition_and_a_model_without_parameters_round_trip(local_dir):
    store = CheckpointStore(local_dir)
    store.write_embeddings(1, "user", 0, np.zeros((0, 4), dtype=np.float32), b"")
    store.write_model(1, {})
    store.commit(1, {"entities": {"user": {"num_partitions": 1}}})
    embeddings, state = store.read_embeddings("user", 0, num_entities=0, dimension=4)
    assert embeddings.shape == (0, 4) and state == b""
    assert store.read_model() == ({}, None)


def test_the_stores_of_a_config_are_at_its_checkpoint_and_init_paths(tmp_path) -> None:
    config = parse_config({**CONFIG, "entity_path": str(tmp_path), "edge_paths": [],
                           "checkpoint_path": str(tmp_path / "run"),
                           "storage_options": {"auto_mkdir": True},
                           "storage_retry_timeout": 7})
    store = CheckpointStore.from_config(config)
    assert store.directory.url == str(tmp_path / "run")
    assert store.directory.storage_options == {"auto_mkdir": True}
    assert store.directory.retry_timeout == 7
    assert CheckpointStore.init_from_config(config) is None
    init = CheckpointStore.init_from_config(
        dataclasses.replace(config, init_path=str(tmp_path / "init")))
    assert init is not None and init.directory.url == str(tmp_path / "init")
    assert init.directory.retry_timeout == 7


def test_a_state_is_saved_and_read_through_a_file_over_its_dataset(local_dir):
    """What torch.save and torch.load do with the optimizer state: write it piece by piece,
    read it back by seeking and reading into their own buffers."""
    store = CheckpointStore(local_dir)

    def save(file):
        file.write(b"\x00head")
        file.write(memoryview(np.arange(4, dtype=np.float32)))

    def read(file):
        header = file.read(5)
        values = np.empty(4, dtype=np.float32)
        assert file.readinto(memoryview(values).cast("B")) == 16
        file.seek(-4, io.SEEK_END)
        return header, values, file.tell(), file.read(), file.read(), file.seek(0)

    store.write_embeddings(1, "user", 0, embeddings_of(1, "user", 0), save)
    _, state = store.read_embeddings("user", 0, 1, read_state=read)
    header, values, position, last, after_end, start = state
    assert header == b"\x00head" and position == 17 and after_end == b"" and start == 0
    np.testing.assert_array_equal(values, np.arange(4, dtype=np.float32))
    assert last == np.float32(3).tobytes()
    # Stored as the bytes themselves (opaque bytes, as PBG stores a torch.save blob).
    _, blob = store.read_embeddings("user", 0, 1)
    assert blob == b"\x00head" + np.arange(4, dtype=np.float32).tobytes()


def test_a_state_that_saves_other_bytes_when_saved_again_is_refused(local_dir):
    store = CheckpointStore(local_dir)

    def saving(sizes):
        sizes = iter(sizes)
        return lambda file: file.write(b"x" * next(sizes))

    with pytest.raises(ValueError, match="2 bytes, then 1 when saved again"):
        store.write_embeddings(1, "user", 0, embeddings_of(1, "user", 0), saving([2, 1]))
    with pytest.raises(OSError, match="writing 2 bytes at 0 would pass the end of a dataset "
                                      "of 1"):
        store.write_embeddings(1, "user", 0, embeddings_of(1, "user", 0), saving([1, 2]))
    assert not store.has_embeddings("user", 0, 1)  # nothing was published


def test_a_file_over_a_dataset_stops_at_its_end(tmp_path):
    with h5py.File(tmp_path / "state.h5", "w") as file:
        target = DatasetFile(file.create_dataset("state", shape=(3,), dtype="V1"))
        assert target.writable() and target.write(b"ab") == 2
        with pytest.raises(OSError, match="writing 2 bytes at 2 would pass the end of a "
                                          "dataset of 3"):
            target.write(b"cd")
        with pytest.raises(ValueError, match="negative seek position -1"):
            target.seek(-1)
        with pytest.raises(ValueError, match="1-D dataset of bytes"):
            DatasetFile(file.create_dataset("table", shape=(2, 2), dtype=np.float32))
    with h5py.File(tmp_path / "state.h5", "r") as file:
        source = DatasetFile(file["state"])
        assert not source.writable()
        buffer = bytearray(5)
        assert source.readinto(buffer) == 3 and buffer[:2] == b"ab"
        assert source.readinto(buffer) == 0


def test_a_reader_without_use_for_the_state_leaves_it_in_the_file(local_dir):
    """Evaluation and export read embeddings only: the state (megabytes per partition) is
    not read into memory for them."""
    store = CheckpointStore(local_dir)
    state = bytes(4 * 2**20)
    store.write_embeddings(1, "user", 0, embeddings_of(1, "user", 0), state)
    out = np.empty((5, 4), dtype=np.float32)
    peaks = []
    for read_state in (None, checkpoint_module.unread):
        tracemalloc.start()
        try:
            _, read = store.read_embeddings("user", 0, 1, out=out, read_state=read_state)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert read == (state if read_state is None else None)
    assert peaks[0] >= len(state) > 16 * peaks[1]
