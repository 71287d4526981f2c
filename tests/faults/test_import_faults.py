"""`tessera import` under faults: two imports into one entity_path, kills at each step of the
publication of its dictionary and buckets, and the temporary files a killed import leaves.

Each import runs as a real process. A driver (`DRIVER`) runs the `tessera` command with one
storage call patched to stop the process (`os._exit`, as SIGKILL would) or to pause it at an
exact moment, so that every case is deterministic.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tessera.config import load_config
from tessera.data.graph_data import GraphData
from tessera.errors import EXIT_TRANSIENT, BadInputError
from tessera.importing.dictionary_update import COMMIT_FILE, STAGING_FOLDER
from tessera.importing.lease import LEASE_FILE
from tessera.importing.publication import BUCKET_STAGING_FOLDER
from tessera.querying.names import partition_names
from tessera.storage import entities as entity_files
from tessera.storage.edges import bucket_file, read_bucket
from tessera.storage.fs import Directory

NUM_PARTITIONS = 3
MOVES = 2 * NUM_PARTITIONS + 2  # names and count of each partition, and of the relations
BUCKETS = NUM_PARTITIONS ** 2  # moved after the dictionary files
KILLED = 137
TIMEOUT_S = 60

# argv[1]: "move:K" stops the process once K files of the publication are moved (0: before
# the first), "stage:K" once K buckets are staged, "write:NAME" before NAME is written,
# "pause:DIR:HOOK" pauses it (in HOOK: "move", the first move of the publication, or "spill",
# the second pass) until DIR/go exists.
DRIVER = r"""
import os, sys, threading, time
from tessera import cli
from tessera.importing.spill import EdgeIdSpill
from tessera.storage.edges import BucketWriter
from tessera.storage.fs import Directory

what, _, arg = sys.argv[1].partition(":")
moves = staged = 0
real_move, real_write, real_blocks = Directory.move, Directory.write_text, EdgeIdSpill.blocks
real_exit, staging = BucketWriter.__exit__, threading.Lock()  # buckets close in threads

def pause():
    folder = arg.split(":")[0]
    open(os.path.join(folder, "paused"), "w").close()
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.01)

def move(self, name, target):
    global moves
    if what == "move" and moves == int(arg):
        os._exit(137)
    if what == "pause" and arg.endswith(":move") and moves == 0:
        pause()
    real_move(self, name, target)
    moves += 1
    if what == "move" and moves == int(arg):
        os._exit(137)

def write_text(self, name, text):
    if what == "write" and name == arg:
        os._exit(137)
    real_write(self, name, text)

def blocks(self, *args, **kwargs):
    if what == "pause" and arg.endswith(":spill"):
        pause()
    return real_blocks(self, *args, **kwargs)

def bucket_exit(self, *args):
    global staged
    real_exit(self, *args)
    with staging:
        staged += 1
        if what == "stage" and staged == int(arg):
            os._exit(137)

Directory.move, Directory.write_text, EdgeIdSpill.blocks = move, write_text, blocks
BucketWriter.__exit__ = bucket_exit
sys.argv = ["tessera", *sys.argv[2:]]
cli.run()
"""


def graph_rows(seed: int, names: int, relations: int, count: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(f"n{rng.randrange(names)}", f"r{rng.randrange(relations)}",
             f"n{rng.randrange(names)}") for _ in range(count)]


OLD_ROWS = graph_rows(1, 60, 3, 300)
NEW_ROWS = graph_rows(2, 120, 6, 400)  # new names in every partition, new relation types


def write_workspace(root: Path, name: str, rows: list[tuple[str, str, str]],
                    output: str | None = None, storage_options: dict | None = None) -> Path:
    """A config importing `rows` (root/NAME.tsv) into OUTPUT/entities and OUTPUT/edges-NAME
    (OUTPUT: root unless given); its path."""
    (root / f"{name}.tsv").write_text("".join("\t".join(row) + "\n" for row in rows))
    output = output or str(root)
    config = {"entities": {"node": {"num_partitions": NUM_PARTITIONS}},
              "relations": [{"name": "all", "lhs": "node", "rhs": "node"}],
              "dynamic_relations": True, "dimension": 4, "entity_path": f"{output}/entities",
              "edge_paths": [f"{output}/edges-{name}"],
              "checkpoint_path": f"{output}/checkpoints",
              "storage_options": storage_options or {}}
    path = root / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def import_args(config: Path) -> list[str]:
    return ["import", str(config), str(config.with_suffix(".tsv")), "--rel-col", "1",
            "--rhs-col", "2", "--quiet"]


def start(config: Path, driver: str | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    command = ([sys.executable, "-c", DRIVER, driver] if driver
               else [sys.executable, "-m", "tessera"])
    return subprocess.Popen([*command, *import_args(config)], text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, stderr


def entity_dir(config: Path) -> Directory:
    raw = json.loads(config.read_text())
    return Directory(raw["entity_path"], raw["storage_options"])


def dictionary_view(config: Path) -> dict[str, object]:
    """Every dictionary file as the readers see it (None: not there), and GraphData's counts
    and relation count when there is a dictionary."""
    entities = entity_dir(config)
    reads = {f"{kind}_{part}": (read, part) for part in range(NUM_PARTITIONS)
             for kind, read in (("count", entity_files.read_entity_count),
                                ("names", entity_files.read_entity_names))}
    view: dict[str, object] = {}
    for key, (read, part) in reads.items():
        view[key] = _or_none(lambda read=read, part=part: read(entities, "node", part))
    view["relation_count"] = _or_none(lambda: entity_files.read_dynamic_relation_count(entities))
    view["relation_names"] = _or_none(lambda: entity_files.read_relation_names(entities))
    if all(value is not None for value in view.values()):
        data = GraphData(load_config(str(config)))
        view["graph_data"] = (data.entity_counts, data.num_relations)
    return view


def _or_none(read):
    try:
        return read()
    except BadInputError:  # file not found
        return None


def edge_dir(config: Path) -> Directory:
    raw = json.loads(config.read_text())
    return Directory(raw["edge_paths"][0], raw["storage_options"])


def decoded_edges(config: Path, staged_first: bool = False) -> Counter:
    """The edges of the config's edge path as (lhs, relation, rhs) names; `staged_first`:
    each bucket from the staging folder while it waits there (a committed import's)."""
    entities = entity_dir(config)
    names = [entity_files.read_entity_names(entities, "node", part)
             for part in range(NUM_PARTITIONS)]
    relations = entity_files.read_relation_names(entities)
    edges: Counter = Counter()
    for lhs_part in range(NUM_PARTITIONS):
        for rhs_part in range(NUM_PARTITIONS):
            bucket = read_bucket(bucket_folder(config, lhs_part, rhs_part, staged_first),
                                 lhs_part, rhs_part)
            for rel, lhs, rhs in zip(bucket.rel.tolist(), bucket.lhs.tolist(),
                                     bucket.rhs.tolist()):
                edges[names[lhs_part][lhs], relations[rel], names[rhs_part][rhs]] += 1
    return edges


def bucket_folder(config: Path, lhs_part: int, rhs_part: int, staged_first: bool) -> Directory:
    staging = edge_dir(config).subdirectory(BUCKET_STAGING_FOLDER)
    if staged_first and staging.exists(bucket_file(lhs_part, rhs_part)):
        return staging
    return edge_dir(config)


def bucket_contents(config: Path) -> dict[str, tuple[list[int], ...]]:
    """Each bucket of the config's edge path, row by row."""
    contents = {}
    for lhs_part in range(NUM_PARTITIONS):
        for rhs_part in range(NUM_PARTITIONS):
            bucket = read_bucket(edge_dir(config), lhs_part, rhs_part)
            contents[bucket_file(lhs_part, rhs_part)] = (
                bucket.rel.tolist(), bucket.lhs.tolist(), bucket.rhs.tolist())
    return contents


def bucket_hashes(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in folder.glob("edges_*.h5")}


def run_ok(config: Path) -> None:
    code, stderr = finish(start(config))
    assert code == 0, stderr


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Uninterrupted imports: a fresh import of NEW_ROWS, OLD_ROWS alone (its views and a copy
    of its folder), NEW_ROWS imported after OLD_ROWS and the buckets of NEW_ROWS imported
    again into OLD_ROWS' edge path."""
    fresh = tmp_path_factory.mktemp("fresh")
    run_ok(write_workspace(fresh, "new", NEW_ROWS))
    grown = tmp_path_factory.mktemp("grown")
    run_ok(write_workspace(grown, "old", OLD_ROWS))
    old_view = dictionary_view(grown / "old.json")
    old_tree = tmp_path_factory.mktemp("old")
    shutil.copytree(grown, old_tree, dirs_exist_ok=True)
    run_ok(write_workspace(grown, "new", NEW_ROWS))
    views = {"fresh": dictionary_view(fresh / "new.json"), "old": old_view,
             "old_tree": (old_tree, grown), "grown": dictionary_view(grown / "new.json")}
    reimported = reimport_workspace(tmp_path_factory.mktemp("reimported"), views)
    run_ok(reimported)
    return {**views, "reimported": bucket_contents(reimported)}


def workspace(tmp_path: Path, scenario: str, references: dict[str, object]) -> Path:
    """The new import's config: into an empty entity_path, or one holding OLD_ROWS."""
    if scenario == "grown":
        old_tree, made_in = references["old_tree"]
        shutil.copytree(old_tree, tmp_path, dirs_exist_ok=True)
        old_config = tmp_path / "old.json"
        old_config.write_text(old_config.read_text().replace(str(made_in), str(tmp_path)))
    return write_workspace(tmp_path, "new", NEW_ROWS)


def reimport_workspace(tmp_path: Path, references: dict[str, object]) -> Path:
    """The config importing NEW_ROWS again into OLD_ROWS' entity_path and edge path."""
    config = workspace(tmp_path, "grown", references)
    raw = json.loads(config.read_text())
    raw["edge_paths"] = [str(tmp_path / "edges-old")]
    config.write_text(json.dumps(raw))
    return config


KILL_POINTS = ["write:" + COMMIT_FILE, *(f"move:{moves}" for moves in range(MOVES + 1))]


@pytest.mark.parametrize("scenario", ["fresh", "grown"])
@pytest.mark.parametrize("kill", KILL_POINTS)
def test_an_import_killed_while_publishing_its_dictionary_reruns_to_the_same_result(
        tmp_path: Path, references: dict[str, object], scenario: str, kill: str) -> None:
    config = workspace(tmp_path, scenario, references)
    before = references["old"] if scenario == "grown" else dictionary_view(config)
    kill_and_rerun(config, kill, before, references[scenario])
    if scenario == "grown":  # the first import's edges keep their names
        assert decoded_edges(tmp_path / "old.json") == Counter(OLD_ROWS)


def test_readers_of_names_see_a_committed_dictionary_before_it_is_moved(
        tmp_path: Path, references: dict[str, object]) -> None:
    """Killed after its commit and before any move: the names are only in the staging
    folder, and the readers that ask whether a names file exists must find them there."""
    config = workspace(tmp_path, "fresh", references)
    code, stderr = finish(start(config, "move:0"))
    assert code == KILLED, stderr
    entities = entity_dir(config)
    expected = references["fresh"]
    assert isinstance(expected, dict)
    for part in range(NUM_PARTITIONS):
        names_file = entity_files.entity_names_file("node", part)
        assert not entities.exists(names_file)  # nothing moved yet
        assert entity_files.is_published(entities, names_file)
        count = expected[f"count_{part}"]
        assert partition_names(entities, "node", part, count) == expected[f"names_{part}"]
    assert entity_files.is_published(entities, entity_files.DYNAMIC_RELATION_NAMES_FILE)
    assert not entity_files.is_published(entities, "entity_names_other_0.json")


REIMPORT_KILL_POINTS = ["stage:1", f"stage:{BUCKETS}", "write:" + COMMIT_FILE,
                        *(f"move:{moves}" for moves in (0, MOVES - 1, MOVES, MOVES + 4,
                                                         MOVES + BUCKETS))]


@pytest.mark.parametrize("kill", REIMPORT_KILL_POINTS)
def test_a_reimport_killed_while_staging_or_moving_its_buckets_keeps_old_or_new_files(
        tmp_path: Path, references: dict[str, object], kill: str) -> None:
    config = reimport_workspace(tmp_path, references)
    old_buckets = bucket_hashes(tmp_path / "edges-old")
    code, stderr = finish(start(config, kill))
    assert code == KILLED, stderr
    if kill.startswith("move"):  # committed: the new dictionary, the new buckets (some aside)
        assert dictionary_view(config) == references["grown"]
        assert decoded_edges(config, staged_first=True) == Counter(NEW_ROWS)
    else:  # nothing in place changed
        assert dictionary_view(config) == references["old"]
        assert bucket_hashes(tmp_path / "edges-old") == old_buckets
        assert decoded_edges(config) == Counter(OLD_ROWS)
    run_ok(config)
    assert dictionary_view(config) == references["grown"]
    assert bucket_contents(config) == references["reimported"]
    assert BUCKET_STAGING_FOLDER not in edge_dir(config).listdir()
    assert not {STAGING_FOLDER, LEASE_FILE} & set(entity_dir(config).listdir())


@pytest.mark.parametrize("kill", ["write:" + COMMIT_FILE, "move:3", "stage:4",
                                  f"move:{MOVES + 4}"])
def test_the_publication_is_all_or_nothing_on_s3_too(tmp_path: Path, s3_dir,
                                                     references: dict[str, object],
                                                     kill: str) -> None:
    config = write_workspace(tmp_path, "new", NEW_ROWS, s3_dir.url, s3_dir.storage_options)
    kill_and_rerun(config, kill, dictionary_view(config), references["fresh"])


def kill_and_rerun(config: Path, kill: str, before: object, after: object) -> None:
    """Kill the import at `kill`: readers see `before` or `after`, never a mix; its rerun
    succeeds and makes `after`, every edge named as in its input."""
    code, stderr = finish(start(config, kill))
    assert code == KILLED, stderr
    seen = dictionary_view(config)
    assert seen in (before, after), "a reader sees a mix of two dictionaries"
    assert seen == (before if kill.startswith(("write", "stage")) else after)
    run_ok(config)  # no --replace-dictionary needed
    assert dictionary_view(config) == after
    assert decoded_edges(config) == Counter(NEW_ROWS)
    assert not {STAGING_FOLDER, LEASE_FILE} & set(entity_dir(config).listdir())
    assert BUCKET_STAGING_FOLDER not in edge_dir(config).listdir()


def wait_for_file(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_second_import_into_the_same_entity_path_exits_75_naming_the_first(
        tmp_path: Path) -> None:
    first = write_workspace(tmp_path, "first", OLD_ROWS)
    second = write_workspace(tmp_path, "second", NEW_ROWS)
    signals = tmp_path / "signals"
    signals.mkdir()
    holder = start(first, f"pause:{signals}:move")  # holds the lease, publishing
    try:
        wait_for_file(signals / "paused", holder)
        code, stderr = finish(start(second))
    finally:
        (signals / "go").touch()
    assert code == EXIT_TRANSIENT
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"tessera import: error: {tmp_path}/entities/{LEASE_FILE}: the entity_path is in use "
        f"by tessera import (pid {holder.pid} on host "), stderr
    assert finish(holder) == (0, "")
    assert decoded_edges(first) == Counter(OLD_ROWS)
    assert not (tmp_path / "edges-second").exists()
    assert not (tmp_path / "entities" / LEASE_FILE).exists()


def test_imports_started_together_never_mix_their_dictionaries(tmp_path: Path) -> None:
    for attempt in range(3):
        root = tmp_path / str(attempt)
        root.mkdir()
        configs = {rows: write_workspace(root, name, list(rows))
                   for name, rows in (("a", tuple(OLD_ROWS)), ("b", tuple(NEW_ROWS)))}
        processes = {rows: start(config) for rows, config in configs.items()}
        results = {rows: finish(process) for rows, process in processes.items()}
        assert 0 in [code for code, _ in results.values()]
        for rows, (code, stderr) in results.items():
            if code == 0:  # both may succeed, one after the other
                assert decoded_edges(configs[rows]) == Counter(rows)
            else:
                assert code == EXIT_TRANSIENT and len(stderr.splitlines()) == 1, stderr
                assert "the entity_path is in use by tessera import" in stderr


def modes_of_open_files(pid: int, folder: Path) -> list[int]:
    """The permission bits of the files in `folder` that process `pid` holds open; one closed
    meanwhile is passed over (the import's other threads go on while one of them is paused)."""
    modes = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith(f"{folder}/"):
                modes.append(fd.stat().st_mode)
        except FileNotFoundError:
            continue
    return modes


def test_a_killed_import_leaves_no_temporary_file(tmp_path: Path) -> None:
    config = write_workspace(tmp_path, "new", NEW_ROWS)
    temp = tmp_path / "tmp"
    signals = tmp_path / "signals"
    temp.mkdir()
    signals.mkdir()
    process = start(config, f"pause:{signals}:spill", env={"TMPDIR": str(temp)})
    try:
        wait_for_file(signals / "paused", process)
        spills = modes_of_open_files(process.pid, temp)
        assert spills, "the import holds no file in TMPDIR while it writes its buckets"
        for mode in spills:  # what exists is for this user alone
            assert not mode & (stat.S_IRWXG | stat.S_IRWXO), oct(mode)
        for path in temp.rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                assert not path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO), path
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=TIMEOUT_S)
    assert list(temp.iterdir()) == []
