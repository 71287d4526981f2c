"""Bad input, table-driven: every mistake a user can make meets one contract.

Each row starts from the same small workspace (two TSV edge lists imported into two partitions,
a checkpoint trained on them), breaks one thing (a config key, a `-p` override, a data file, a
bucket, a checkpoint, a command-line argument) and runs one `tessera` command in-process. The
contract: the documented exit code (65 bad input, 2 a command-line usage error), one error line
on stderr that names the key, file or line at fault, no traceback, and nothing that was there
before changed or deleted (a failed command may leave only the files a row lists).
"""

from __future__ import annotations

import fnmatch
import functools
import gzip
import hashlib
import io
import json
import shutil
import struct
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml
from support.corruption import flip_a_bit
from support.workspace import CONFIG, EVAL, IMPORT, TRAIN, build_workspace

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT
from tessera.storage.edges import CHUNK_ROWS, write_bucket
from tessera.storage.fs import Directory

USAGE = 2  # argparse's exit code for a command-line mistake

TRAIN_MORE = (*TRAIN, "-p", "num_epochs=3")  # resumes the finished checkpoint
TRAIN_FRESH = (*TRAIN, "-p", "checkpoint_path=fresh")  # starts from scratch
FILTERED = (*EVAL, "--filtered")
EXPORT = ("export", "config.yaml", "exported")
NEIGHBORS = ("neighbors", "config.yaml", "e1")
CHECK = ("config", "check", "config.yaml")
LOCK = "tcp://127.0.0.1:9"  # never dialled: the rank is checked first


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Imported and trained once; each row works on a copy."""
    root = tmp_path_factory.mktemp("workspace")
    build_workspace(root)
    yield root


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a web server that is no S3 server: it answers GET and HEAD from an empty
    folder, and anything else with 501 Not Implemented."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # the rows count the lines on stderr
            pass

    folder = tmp_path_factory.mktemp("web")
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def on_s3(bucket: str = "tessera-test", key: str = "'{key}'", secret: str = "'{secret}'",
          endpoint: str = "{endpoint}", verify: str | None = None,
          **options: str) -> tuple[str, ...]:
    """`-p` overrides putting the checkpoint in a bucket of the test S3 server ({key},
    {secret}, {endpoint}: its credentials and URL; {https_endpoint}: the URL with https), with
    `options` added to storage_options and `verify` (a CA bundle) to its client_kwargs."""
    extra = "".join(f"{name}: {value}, " for name, value in options.items())
    client = f", verify: '{verify}'" if verify is not None else ""
    return ("-p", f"checkpoint_path=s3://{bucket}/bad-inputs", "-p",
            f"storage_options={{key: {key}, secret: {secret}, {extra}client_kwargs: "
            f"{{endpoint_url: '{endpoint}', region_name: eu-west-1{client}}}}}")


# Ways to break the workspace. Each returns a function of the workspace root.

Prepare = Callable[[Path], None]


def config(**changes: object) -> Prepare:
    """Set top-level config keys (None removes the key)."""
    def prepare(root: Path) -> None:
        data = yaml.safe_load((root / "config.yaml").read_text())
        for key, value in changes.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        (root / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return prepare


def relation(index: int, **changes: object) -> Prepare:
    def prepare(root: Path) -> None:
        data = yaml.safe_load((root / "config.yaml").read_text())
        data["relations"][index].update(changes)
        (root / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return prepare


def write(name: str, text: str) -> Prepare:
    def prepare(root: Path) -> None:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return prepare


def append(name: str, text: str) -> Prepare:
    def prepare(root: Path) -> None:
        with open(root / name, "a", encoding="utf-8") as file:
            file.write(text)
    return prepare


def delete(name: str) -> Prepare:
    def prepare(root: Path) -> None:
        path = root / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return prepare


def truncate(name: str, size: int) -> Prepare:
    def prepare(root: Path) -> None:
        with open(root / name, "r+b") as file:
            file.truncate(size)
    return prepare


def h5(name: str, edit: Callable[[h5py.File], None]) -> Prepare:
    def prepare(root: Path) -> None:
        with h5py.File(root / name, "r+") as file:
            edit(file)
    return prepare


def replace_dataset(dataset: str, values: np.ndarray) -> Callable[[h5py.File], None]:
    def edit(file: h5py.File) -> None:
        del file[dataset]
        file.create_dataset(dataset, data=values)
    return edit


def embeddings_of_shape(rows: int, dimension: int) -> Prepare:
    """The first partition's checkpointed embeddings replaced by zeros of another shape."""
    return h5(CKPT_EMB, replace_dataset("embeddings", np.zeros((rows, dimension), np.float32)))


def both(*steps: Prepare) -> Prepare:
    def prepare(root: Path) -> None:
        for step in steps:
            step(root)
    return prepare


def python_config(body: str) -> Prepare:
    """A PBG-style Python config, the workspace's config translated, with `body` first."""
    def prepare(root: Path) -> None:
        (root / "config.py").write_text(
            f"import os\n{body}\n\ndef get_torchbiggraph_config():\n"
            f"    return {json.dumps(CONFIG)!s}\n")
    return prepare


def nothing(root: Path) -> None:
    del root


def write_bytes(name: str, data: bytes) -> Prepare:
    def prepare(root: Path) -> None:
        (root / name).write_bytes(data)
    return prepare


def gzipped_and_cut(name: str, size: int) -> Prepare:
    """`name` compressed into `name`.gz, of which only the first `size` bytes are kept."""
    def prepare(root: Path) -> None:
        data = gzip.compress((root / name).read_bytes())
        assert len(data) > size
        (root / f"{name}.gz").write_bytes(data[:size])
    return prepare


def flip_a_data_bit(name: str, dataset: str = "embeddings", byte: int = 0) -> Prepare:
    """One bit of byte `byte` of `dataset` in `name` flipped (`support.corruption`)."""
    def prepare(root: Path) -> None:
        flip_a_bit(root / name, dataset, byte)
    return prepare


def flip_a_chunked_bit(name: str) -> Prepare:
    """`name` rewritten as a bucket of two HDF5 chunks' worth of edges (0, 0, 0), one bit of
    its first `lhs` chunk flipped: edge chunks of it are read alone."""
    def prepare(root: Path) -> None:
        path = root / name
        zeros = np.zeros(2 * CHUNK_ROWS, np.int64)
        path.unlink()
        write_bucket(Directory(str(path.parent)), 0, 1, zeros, zeros, zeros)
        flip_a_bit(path, "lhs", 8 * 5)  # 0 becomes 1: an id in range all the same
    return prepare


def flip_a_state_bit(name: str) -> Prepare:
    """One bit of a tensor's value in the optimizer state of `name` flipped: torch.load reads
    the changed number without complaint."""
    def prepare(root: Path) -> None:
        with h5py.File(root / name, "r") as file:
            state = file["optimizer/state_dict"][()].tobytes()
        record = next(info for info in zipfile.ZipFile(io.BytesIO(state)).infolist()
                      if "/data/" in info.filename)  # a tensor's bytes, stored uncompressed
        name_length, extra_length = struct.unpack_from("<HH", state, record.header_offset + 26)
        data_start = record.header_offset + 30 + name_length + extra_length
        flip_a_bit(root / name, "optimizer/state_dict", data_start + 1)
    return prepare


def garble_object(name: str, path: str) -> Prepare:
    """Overwrite the header of the HDF5 object at `path` in file `name`: the file still opens,
    but reading that object fails."""
    def prepare(root: Path) -> None:
        with h5py.File(root / name, "r") as file:
            address = h5py.h5o.get_info(file[path].id).addr
        with open(root / name, "r+b") as file:
            file.seek(address)
            file.write(b"\xff" * 64)
    return prepare


def aliases_expanding_to(depth: int) -> Prepare:
    """A config whose storage_options hold 9**depth values through `depth` nested aliases."""
    def prepare(root: Path) -> None:
        lines = ["storage_options:", "  l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
        lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]"
                  for i in range(1, depth)]
        with open(root / "config.yaml", "a", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
    return prepare


CKPT_EMB = "ckpt/embeddings_node_0.v4.h5"
CKPT_MODEL = "ckpt/model.v4.h5"
BUCKET = "edges/train/edges_0_1.h5"



@dataclass(frozen=True)
class BadInput:
    argv: tuple[str, ...]
    names: str  # the error line must contain this: the key, file or line at fault
    prepare: Prepare = nothing
    exit_code: int = EXIT_BAD_INPUT
    may_leave: tuple[str, ...] = ()  # glob patterns of new files a failed run may leave


ROWS: dict[str, BadInput] = {
    # Configs: keys, types, values, references between keys.
    "unknown key": BadInput(CHECK, "num_epoch", config(num_epoch=3)),
    "unknown key in train": BadInput(TRAIN, "dimensoin", config(dimensoin=3)),
    "wrong type": BadInput(CHECK, "num_epochs", config(num_epochs="ten")),
    "float for an integer": BadInput(CHECK, "batch_size", config(batch_size=2.5)),
    "zero dimension": BadInput(CHECK, "dimension", config(dimension=0)),
    "negative learning rate": BadInput(CHECK, "lr", config(lr=-0.1)),
    "zero partitions": BadInput(CHECK, "num_partitions",
                                config(entities={"node": {"num_partitions": 0}})),
    "no entities": BadInput(CHECK, "entities", config(entities={})),
    "no relations": BadInput(CHECK, "relations", config(relations=[])),
    "missing entity_path": BadInput(CHECK, "entity_path", config(entity_path=None)),
    "missing edge_paths": BadInput(TRAIN[:2], "edge_paths", config(edge_paths=None)),
    "unknown operator": BadInput(CHECK, "operator", relation(0, operator="rotation")),
    "unknown comparator": BadInput(CHECK, "comparator", config(comparator="manhattan")),
    "unknown loss": BadInput(CHECK, "loss_fn", config(loss_fn="hinge")),
    "unknown bucket order": BadInput(CHECK, "bucket_order", config(bucket_order="spiral")),
    "unknown entity type": BadInput(CHECK, "relations[0].lhs", relation(0, lhs="nodes")),
    "relation without name": BadInput(CHECK, "name",
                                      config(relations=[{"lhs": "node", "rhs": "node"}])),
    "zero edge chunks": BadInput(CHECK, "num_edge_chunks", config(num_edge_chunks=0)),
    "eval fraction above one": BadInput(CHECK, "eval_fraction", config(eval_fraction=1.5)),
    "negative negatives": BadInput(CHECK, "num_uniform_negs", config(num_uniform_negs=-1)),
    "zero batch size": BadInput(CHECK, "batch_size", config(batch_size=0)),
    "zero preservation interval": BadInput(
        CHECK, "checkpoint_preservation_interval",
        config(checkpoint_preservation_interval=0)),
    "entities not a mapping": BadInput(CHECK, "entities", config(entities=["node"])),
    "dynamic relations with two relations": BadInput(CHECK, "dynamic_relations",
                                                     config(dynamic_relations=True)),
    # What the model needs of a relation, refused by `config check` as by training.
    "complex operator, odd dimension": BadInput(CHECK, "relations[0].operator", config(
        dimension=7, relations=[{"name": "likes", "lhs": "node", "rhs": "node",
                                 "operator": "complex_diagonal"}])),
    "regularizer on a matrix operator": BadInput(CHECK, "regularization_coef", config(
        regularization_coef=0.1, relations=[{"name": "likes", "lhs": "node", "rhs": "node",
                                             "operator": "linear"}])),
    "sides of different dimensions": BadInput(CHECK, "relations[0]", config(
        entities={"node": {"num_partitions": 2}, "user": {"num_partitions": 1, "dimension": 4}},
        relations=[{"name": "likes", "lhs": "user", "rhs": "node"}])),
    "all negatives of a featurized type": BadInput(CHECK, "relations[0].all_negs", config(
        entities={"node": {"num_partitions": 1, "featurized": True}},
        relations=[{"name": "likes", "lhs": "node", "rhs": "node", "all_negs": True}])),
    "YAML syntax error": BadInput(CHECK, "config.yaml", write("config.yaml", "entities: {\n")),
    "YAML bad indentation": BadInput(CHECK, "line 2", write("config.yaml", "a: 1\n b: 2\n")),
    "YAML list, not a mapping": BadInput(CHECK, "config.yaml", write("config.yaml", "- 1\n")),
    "empty config file": BadInput(CHECK, "config.yaml", write("config.yaml", "")),
    "JSON syntax error": BadInput(("config", "check", "config.json"), "config.json",
                                  write("config.json", '{"dimension": 8,')),
    "config file missing": BadInput(("config", "check", "nowhere.yaml"), "nowhere.yaml"),
    "config is a folder": BadInput(("config", "check", "edges"), "edges"),
    "config of unknown extension": BadInput(("config", "check", "config.toml"), "config.toml",
                                            write("config.toml", "dimension = 8\n")),
    "Python config raising": BadInput(("config", "check", "config.py"), "config.py",
                                      python_config("raise RuntimeError('no cluster here')")),
    "checkpoint_path empty": BadInput((*TRAIN, "-p", "checkpoint_path="), "checkpoint_path"),
    "edge path empty": BadInput((*TRAIN, "-p", "edge_paths=['']"), "edge_paths[0]"),
    "path of an unknown scheme": BadInput((*EVAL, "-p", "checkpoint_path=nosuch://b/c"),
                                          "nosuch://b/c"),
    "export into an empty path": BadInput(("export", "config.yaml", ""), "output path"),
    "export onto a folder of an output file's name": BadInput(
        (*EXPORT, "--overwrite"), "embeddings_node.tsv",
        lambda root: (root / "exported" / "embeddings_node.tsv").mkdir(parents=True)),
    "a folder as import input": BadInput(
        ("import", "config.yaml", "train.tsv", "edges", "--format", "tsv", "--rel-col", "1",
         "--rhs-col", "2"),
        "edges: is not a regular file"),
    "init_path of another dimension, named as such": BadInput(
        (*TRAIN_FRESH, "-p", "init_path=ckpt", "-p", "dimension=4"), "another dimension"),
    "a model larger than memory": BadInput((*TRAIN_FRESH, "-p", "dimension=100000000000"),
                                           "out of memory"),
    "Python config exiting": BadInput(("config", "check", "config.py"), "sys.exit(3)",
                                      python_config("import sys\nsys.exit(3)")),
    "Python config syntax error": BadInput(("config", "check", "config.py"), "config.py",
                                           python_config("def broken(:")),
    "Python config missing variable": BadInput(
        ("config", "check", "config.py"), "TESSERA_TEST_UNSET",
        python_config("ROOT = os.environ['TESSERA_TEST_UNSET']")),
    "Python config without the function": BadInput(("config", "check", "config.py"),
                                                   "get_torchbiggraph_config",
                                                   write("config.py", "x = 1\n")),
    "Python config returning a list": BadInput(
        ("config", "check", "config.py"), "config.py",
        write("config.py", "def get_torchbiggraph_config():\n    return [1]\n")),
    # -p overrides.
    "override without a value": BadInput((*CHECK, "-p", "num_epochs"), "num_epochs"),
    "override of an unknown key": BadInput((*CHECK, "-p", "num_epoch=3"), "num_epoch"),
    "override of the wrong type": BadInput((*CHECK, "-p", "num_epochs=many"), "num_epochs"),
    "override past the list": BadInput((*CHECK, "-p", "relations.5.operator=linear"),
                                       "relations"),
    "override to an unknown operator": BadInput(
        (*CHECK, "-p", "relations.0.operator=rotation"), "operator"),
    "override with an empty key": BadInput((*CHECK, "-p", "=3"), "=3"),
    "override of broken YAML": BadInput((*CHECK, "-p", "lr=[1"), "override lr"),
    "override in train": BadInput((*TRAIN, "-p", "lr=fast"), "lr"),
    # Edge lists to import.
    "input missing": BadInput(("import", "config.yaml", "nowhere.tsv", "test.tsv",
                               "--rel-col", "1", "--rhs-col", "2"), "nowhere.tsv"),
    "fewer inputs than edge paths": BadInput(IMPORT[:3] + IMPORT[4:], "edge_paths"),
    "short line": BadInput(IMPORT, "train.tsv: line 601", append("train.tsv", "e1\tlikes\n")),
    "column past the line": BadInput(IMPORT[:-1] + ("7",), "rhs=7"),
    "unknown relation name": BadInput(IMPORT, "follows", append("train.tsv",
                                                                "e1\tfollows\te2\n")),
    "empty input": BadInput(IMPORT, "train.tsv", write("train.tsv", "")),
    "Parquet that is not Parquet": BadInput(
        ("import", "config.yaml", "train.parquet", "test.tsv", "--rel-col", "1",
         "--rhs-col", "2"), "train.parquet", write("train.parquet", "not parquet\n")),
    "negative column": BadInput(IMPORT[:-1] + ("-1",), "rhs_col"),
    "featurized type without features": BadInput(
        IMPORT, "--features node=", config(entities={"node": {"num_partitions": 1,
                                                               "featurized": True}})),
    "features file lacking an entity": BadInput(
        (*IMPORT, "--features", "node=words.tsv", "--replace-dictionary"),
        "words.tsv: entity 'e",
        both(config(entities={"node": {"num_partitions": 1, "featurized": True}},
                    num_uniform_negs=0),
             write("words.tsv", "e0\tred\n"))),
    "features flag without a type": BadInput((*IMPORT, "--features", "words.tsv"), "TYPE=FILE",
                                             exit_code=USAGE),
    # PBG's transport keys Tessera has no use for, set to other than their defaults.
    "partition shard size": BadInput(TRAIN, "partition_shard_size",
                                     config(partition_shard_size=100)),
    "process groups for partition servers": BadInput(
        CHECK, "num_groups_for_partition_server", config(num_groups_for_partition_server=8)),
    "import into a dictionary of other partitions": BadInput(
        (*IMPORT, "-p", "entities.node.num_partitions=3"), "num_partitions"),
    # Entity files.
    "entity count missing": BadInput(TRAIN_FRESH, "entity_count_node_1.txt",
                                     delete("entities/entity_count_node_1.txt")),
    "entity count not a number": BadInput(TRAIN_FRESH, "entity_count_node_0.txt",
                                          write("entities/entity_count_node_0.txt", "many\n")),
    "negative entity count": BadInput(TRAIN_FRESH, "entity_count_node_0.txt",
                                      write("entities/entity_count_node_0.txt", "-3\n")),
    "entity count changed under a checkpoint": BadInput(
        TRAIN_MORE, "embeddings_node_0", write("entities/entity_count_node_0.txt", "31\n")),
    "entity names not JSON": BadInput(EXPORT, "entity_names_node_0.json",
                                      write("entities/entity_names_node_0.json", "[\"e1\",")),
    # Edge buckets (HDF5).
    "bucket missing": BadInput(TRAIN_FRESH, "edges_0_1.h5", delete(BUCKET),
                               may_leave=("fresh/*",)),
    "bucket not HDF5": BadInput(TRAIN_FRESH, "edges_0_1.h5", write(BUCKET, "hello"),
                                may_leave=("fresh/*",)),
    "bucket truncated": BadInput(TRAIN_FRESH, "edges_0_1.h5", truncate(BUCKET, 100),
                                 may_leave=("fresh/*",)),
    "bucket without rhs": BadInput(TRAIN_FRESH, "edges_0_1.h5", h5(BUCKET, lambda f: f.pop("rhs")),
                                   may_leave=("fresh/*",)),
    "bucket of unequal lengths": BadInput(
        TRAIN_FRESH, "edges_0_1.h5", h5(BUCKET, replace_dataset("rhs", np.zeros(3, np.int64))),
        may_leave=("fresh/*",)),
    "bucket offset past the partition": BadInput(
        TRAIN_FRESH, "edges_0_1.h5", h5(BUCKET, lambda f: f["lhs"].__setitem__(0, 10**6)),
        may_leave=("fresh/*",)),
    "bucket relation past the config": BadInput(
        TRAIN_FRESH, "edges_0_1.h5", h5(BUCKET, lambda f: f["rel"].__setitem__(0, 9)),
        may_leave=("fresh/*",)),
    "bucket of floats": BadInput(
        TRAIN_FRESH, "edges_0_1.h5",
        h5(BUCKET, lambda f: replace_dataset("lhs", f["lhs"][:].astype(np.float64))(f)),
        may_leave=("fresh/*",)),
    "bucket of a future format": BadInput(
        TRAIN_FRESH, "edges_0_1.h5", h5(BUCKET, lambda f: f.attrs.__setitem__(
            "format_version", 99)), may_leave=("fresh/*",)),
    "bucket edge path missing": BadInput((*TRAIN_FRESH[:2], "-p", "edge_paths=edges/none",
                                          "-p", "checkpoint_path=fresh"), "edges/none"),
    "eval on a missing edge path": BadInput((*EVAL[:2], "-p", "edge_paths=edges/none"),
                                            "edges/none"),
    "eval filtered by a missing edge set": BadInput((*FILTERED, "--filter-paths", "edges/none"),
                                                    "--filter-paths: edges/none"),
    # Checkpoints.
    "version file garbage": BadInput(TRAIN_MORE, "checkpoint_version.txt",
                                     write("ckpt/checkpoint_version.txt", "four\n")),
    "version file garbage in eval": BadInput(EVAL, "checkpoint_version.txt",
                                             write("ckpt/checkpoint_version.txt", "four\n")),
    "version file not UTF-8": BadInput(EVAL, "checkpoint_version.txt: not UTF-8",
                                       write_bytes("ckpt/checkpoint_version.txt", b"\xff")),
    "commit journal not an object": BadInput(TRAIN_MORE, "commit_journal.json",
                                             write("ckpt/commit_journal.json", "[]")),
    "commit journal's statistics not a list": BadInput(
        TRAIN_MORE, "commit_journal.json",
        write("ckpt/commit_journal.json", '{"version": 4, "stats": 3}')),
    "export record not an object": BadInput(
        EXPORT, ".tessera-export.json", write("exported/.tessera-export.json", "[]")),
    "tune study not a database": BadInput(
        ("tune", "config.yaml", "--valid", "edges/test", "-p", "edge_paths=[edges/train]"),
        "study.db", write("ckpt/tune/study.db", "garbage\n")),
    "tune judged on the training split spelled otherwise": BadInput(
        ("tune", "config.yaml", "--valid", "edges/train/", "-p", "edge_paths=[edges/train]"),
        "--valid"),
    "a bit flipped in the embeddings": BadInput(TRAIN_MORE, "embeddings_node_0.v4.h5",
                                                flip_a_data_bit(CKPT_EMB)),
    "a bit flipped in the exported embeddings": BadInput(EXPORT, "embeddings_node_0.v4.h5",
                                                         flip_a_data_bit(CKPT_EMB)),
    "a bit flipped in the optimizer state": BadInput(TRAIN_MORE, "embeddings_node_0.v4.h5",
                                                     flip_a_state_bit(CKPT_EMB)),
    "a bit flipped in an edge bucket": BadInput(  # read whole by eval: checked
        (*EVAL, "-p", "edge_paths=edges/train"), "edges_0_1.h5",
        flip_a_data_bit(BUCKET, "lhs", 8)),
    "a bit flipped in an edge chunk": BadInput(TRAIN_FRESH, "edges_0_1.h5",  # read alone
                                               flip_a_chunked_bit(BUCKET)),
    "a bit flipped in the model": BadInput(
        TRAIN_MORE, "model.v4.h5",
        flip_a_data_bit(CKPT_MODEL, "model/relations/0/operator/rhs/translation")),
    "version names missing files": BadInput(TRAIN_MORE, "v5",
                                            write("ckpt/checkpoint_version.txt", "5\n")),
    "embeddings truncated": BadInput(TRAIN_MORE, "embeddings_node_0.v4.h5",
                                     truncate(CKPT_EMB, 200)),
    "embeddings truncated in eval": BadInput(EVAL, "embeddings_node_0.v4.h5",
                                             truncate(CKPT_EMB, 200)),
    "embeddings of the wrong dimension": BadInput(TRAIN_MORE, "embeddings_node_0.v4.h5",
                                                  embeddings_of_shape(30, 5)),
    "embeddings with too few rows in eval": BadInput(EVAL, "embeddings_node_0.v4.h5",
                                                     embeddings_of_shape(3, 8)),
    "embeddings with too few rows in export": BadInput(EXPORT, "embeddings_node_0.v4.h5",
                                                       embeddings_of_shape(3, 8)),
    "embeddings of the wrong dimension in export": BadInput(EXPORT, "embeddings_node_0.v4.h5",
                                                            embeddings_of_shape(30, 5)),
    "embeddings with too few rows in neighbors": BadInput(
        NEIGHBORS, "embeddings_node_0.v4.h5", embeddings_of_shape(3, 8)),
    "embeddings of the wrong dimension in neighbors": BadInput(
        NEIGHBORS, "embeddings_node_0.v4.h5", embeddings_of_shape(30, 5)),
    "neighbors of an unknown name": BadInput(("neighbors", "config.yaml", "e1x"), "e1x"),
    "neighbors with no neighbour": BadInput((*NEIGHBORS, "--k", "0"), "k must be at least 1"),
    "neighbors in blocks of no row": BadInput((*NEIGHBORS, "--block-rows", "0"),
                                              "block_rows must be at least 1, got 0"),
    "neighbors through an unknown relation": BadInput((*NEIGHBORS, "--relation", "hates"),
                                                      "hates"),
    "neighbors of an unknown entity type": BadInput((*NEIGHBORS, "--entity-type", "user"),
                                                    "user"),
    "neighbors without a checkpoint": BadInput((*NEIGHBORS, "-p", "checkpoint_path=none"),
                                               "none"),
    "neighbors with entity names not JSON": BadInput(
        NEIGHBORS, "entity_names_node_1.json", write("entities/entity_names_node_1.json", "[")),
    "embeddings file missing": BadInput(EVAL, "embeddings_node_1.v4.h5",
                                        delete("ckpt/embeddings_node_1.v4.h5")),
    "model file missing": BadInput(EVAL, "model.v4.h5", delete(CKPT_MODEL)),
    "model file not HDF5": BadInput(TRAIN_MORE, "model.v4.h5", write(CKPT_MODEL, "nope")),
    "partition optimizer state not torch's": BadInput(
        TRAIN_MORE, "embeddings_node_1.v4.h5", h5("ckpt/embeddings_node_1.v4.h5", replace_dataset(
            "optimizer/state_dict", np.frombuffer(b"garbage", dtype="V1")))),
    "optimizer state not torch's": BadInput(
        TRAIN_MORE, "model.v4.h5", h5(CKPT_MODEL, replace_dataset(
            "optimizer/state_dict", np.frombuffer(b"garbage", dtype="V1")))),
    "dimension changed under a checkpoint": BadInput((*TRAIN_MORE, "-p", "dimension=9"),
                                                     "dimension"),
    "operator changed under a checkpoint": BadInput(
        (*TRAIN_MORE, "-p", "relations.1.operator=linear"), "relations"),
    "init_path missing": BadInput((*TRAIN_FRESH, "-p", "init_path=nowhere"), "nowhere"),
    "init_path of another dimension": BadInput(
        (*TRAIN_FRESH, "-p", "init_path=ckpt", "-p", "dimension=9"), "dimension"),
    "init_path of more entities than entity_path": BadInput(
        (*TRAIN_FRESH, "-p", "init_path=ckpt"), "embeddings_node_0",
        write("entities/entity_count_node_0.txt", "3\n")),
    "eval without a checkpoint": BadInput((*EVAL, "-p", "checkpoint_path=none"), "none"),
    "export without a checkpoint": BadInput((*EXPORT, "-p", "checkpoint_path=none"), "none"),
    # Command-line arguments.
    "unknown command": BadInput(("fit", "config.yaml"), "fit", exit_code=USAGE),
    "train without a config": BadInput(("train",), "config", exit_code=USAGE),
    "config check without a file": BadInput(("config", "check"), "CONFIG", exit_code=USAGE),
    "export format unknown": BadInput((*EXPORT, "--format", "csv"), "--format",
                                      exit_code=USAGE),
    "import partitioning unknown": BadInput((*IMPORT, "--partitioning", "round"),
                                            "--partitioning", exit_code=USAGE),
    "rank with a local cluster": BadInput((*TRAIN, "--rank", "0", "--local-cluster"),
                                          "--rank"),
    "trainers without a local cluster": BadInput((*TRAIN, "--trainers", "2"), "--trainers"),
    "rank past the machines": BadInput((*TRAIN, "--rank", "3", "--init-method", LOCK), "rank 3"),
    "partition server rank past the servers": BadInput(
        ("partition-server", "config.yaml", "--rank", "5", "--init-method", LOCK), "rank 5"),
    "rank not a number": BadInput((*TRAIN, "--rank", "first"), "--rank", exit_code=USAGE),
    "export onto a file": BadInput(("export", "config.yaml", "train.tsv"), "train.tsv"),
    "eval output into a missing folder is created or named": BadInput(
        (*EVAL, "--output", "train.tsv/metrics.json"), "train.tsv"),
    "filter path missing": BadInput((*FILTERED, "--filter-paths", "edges/none"), "edges/none"),
    # Object storage: credentials and buckets ({endpoint}: the test S3 server's URL).
    "S3 key refused": BadInput(
        (*EVAL, *on_s3(key="nobody", secret="wrong-secret")), "tessera-test"),
    "S3 secret refused": BadInput((*EXPORT, *on_s3(secret="wrong-secret")), "tessera-test"),
    "S3 bucket missing": BadInput(
        (*EVAL, *on_s3(bucket="no-such-bucket")), "no-such-bucket"),
    "S3 storage option unknown": BadInput(
        (*EVAL, *on_s3(bogus_option="1")), "bogus_option"),
    "S3 endpoint_url not a URL": BadInput((*EVAL, *on_s3(endpoint="not a url")), "not a url"),
    "S3 client option of a wrong type": BadInput(
        (*EVAL, *on_s3(config_kwargs="{retries: often}")), "config_kwargs retries"),
    # Refused at the first request, though botocore reports them as it reports an outage:
    # not retried for the budget, not exit 75.
    "S3 time-out not a number": BadInput(
        (*EVAL, *on_s3(config_kwargs="{connect_timeout: '5'}"), "-p",
         "storage_retry_timeout=20"), "config_kwargs connect_timeout"),
    "S3 https endpoint on a plain-http server": BadInput(
        (*EVAL, *on_s3(endpoint="{https_endpoint}"), "-p", "storage_retry_timeout=20"),
        "WRONG_VERSION_NUMBER"),
    "S3 CA bundle missing": BadInput(
        (*EVAL, *on_s3(endpoint="{https_endpoint}", verify="missing-ca.pem"), "-p",
         "storage_retry_timeout=20"), "client_kwargs endpoint_url, region_name, verify"),
    "S3 endpoint that is no S3 server": BadInput(  # a web server: PUT is 501 Not Implemented
        (*TRAIN, *on_s3(endpoint="{web_endpoint}"), "-p", "storage_retry_timeout=20"),
        "client_kwargs endpoint_url"),
    "FTP server refusing": BadInput(
        (*EVAL, "-p", "checkpoint_path=ftp://127.0.0.1:9/ckpt", "-p",
         "storage_retry_timeout=0"), "ftp://127.0.0.1:9", exit_code=75),
    "negative storage retry budget": BadInput((*CHECK, "-p", "storage_retry_timeout=-1"),
                                              "storage_retry_timeout"),
    "header row with an unknown relation": BadInput(
        IMPORT, "--header", write("train.tsv", "head\trelation\ttail\ne1\tlikes\te2\n")),
    "unknown entity type to export": BadInput((*EXPORT, "--entity-types", "user"), "user"),
    # Accepted silently once: each would have been read as something else than was meant.
    "empty entity field": BadInput(IMPORT, "train.tsv: line 601: empty name in column 2",
                                   append("train.tsv", "e1\tlikes\t\n")),
    "empty entity field first": BadInput(IMPORT, "test.tsv: line 61: empty name in column 0",
                                         append("test.tsv", "\tlikes\te2\n")),
    "NUL byte in a name": BadInput(IMPORT, "train.tsv: line 601: NUL byte",
                                   append("train.tsv", "e1\tlikes\te\x002\n")),
    "input gzip cut short": BadInput(
        ("import", "config.yaml", "train.tsv.gz", "test.tsv", "--rel-col", "1", "--rhs-col",
         "2"), "train.tsv.gz", gzipped_and_cut("train.tsv", 600)),
    "duplicate key in YAML": BadInput(CHECK, "'dimension' appears twice",
                                      append("config.yaml", "dimension: 16\n")),
    "duplicate key in a YAML override": BadInput(
        (*CHECK, "-p", "storage_options={anon: true, anon: false}"), "'anon' appears twice"),
    "duplicate key in JSON": BadInput(("config", "check", "config.json"),
                                      "'dimension' appears twice",
                                      write("config.json", '{"dimension": 8, "dimension": 9}')),
    "config not UTF-8": BadInput(CHECK, "config.yaml: line 2: byte 0xff",
                                 write_bytes("config.yaml", b"dimension: 8\nlr: 0.1 \xff\n")),
    "NaN retry budget": BadInput(CHECK, "storage_retry_timeout",
                                 config(storage_retry_timeout=float("nan"))),
    "NaN retry budget override": BadInput((*CHECK, "-p", "storage_retry_timeout=.nan"),
                                          "storage_retry_timeout"),
    "infinite learning rate": BadInput((*CHECK, "-p", "lr=.inf"), "lr"),
    "YAML aliases expanding to a billion values": BadInput(CHECK, "config.yaml",
                                                           aliases_expanding_to(9)),
    "eval output onto the checkpoint's version file": BadInput(
        (*EVAL, "--output", "ckpt/checkpoint_version.txt"), "checkpoint_path"),
    "eval output into entity_path": BadInput((*EVAL, "--output", "entities/metrics.json"),
                                             "entity_path"),
    "model file garbled, read by neighbors through a relation": BadInput(
        (*NEIGHBORS, "--relation", "likes"), "model.v4.h5",
        garble_object(CKPT_MODEL, "model/relations")),
}


def _snapshot(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_table_is_large_enough() -> None:
    assert len(ROWS) >= 70


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_bad_input_meets_the_contract(row: BadInput, workspace: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      request: pytest.FixtureRequest,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "workspace"
    shutil.copytree(workspace, root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("TESSERA_TEST_UNSET", raising=False)
    row.prepare(root)
    argv, secrets = list(row.argv), ["wrong-secret"]
    if any("{web_endpoint}" in arg for arg in argv):
        argv = [arg.replace("{web_endpoint}", request.getfixturevalue("web_server"))
                for arg in argv]
    if any(url in arg for arg in argv for url in ("{endpoint}", "{https_endpoint}")):
        server = request.getfixturevalue("s3_server")
        https = server.endpoint_url.replace("http://", "https://", 1)
        argv = [arg.replace("{endpoint}", server.endpoint_url).replace("{https_endpoint}", https)
                .replace("{key}", server.key).replace("{secret}", server.secret) for arg in argv]
        secrets.append(server.secret)
    before = _snapshot(root)
    capfd.readouterr()

    try:
        code = main([*argv, "--quiet"] if row.exit_code != USAGE else argv)
    except SystemExit as exited:  # argparse
        code = exited.code
    stderr = capfd.readouterr().err

    assert code == row.exit_code, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1, stderr
    if row.exit_code != USAGE:
        assert len(lines) == 1, stderr
    assert row.names in errors[0], stderr
    assert not any(secret in stderr for secret in secrets), "a secret was printed"
    after = _snapshot(root)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert not changed, f"changed or deleted: {changed}"
    new = sorted(name for name in set(after) - set(before)
                 if not any(fnmatch.fnmatch(name, pattern) for pattern in row.may_leave))
    assert not new, f"left behind: {new}"
