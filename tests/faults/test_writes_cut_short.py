"""Writes that the operating system cuts short in the middle of a file, for real: the error
contract holds, and the process ends by itself (no crash).

`test_os_errors` refuses files as they are created. A disk that fills while HDF5, torch.save
or a .npy file is being written fails later, inside those libraries, whose objects are then
half-written: once that crashed the process (a segmentation fault in HDF5 at exit, SIGBUS in
a memory-mapped .npy). Here each command runs as its own process under a file size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored), so that writing past the limit fails with EFBIG, as a
full disk fails with ENOSPC, at the first write beyond it: exit 65 ("file too large"), one
line naming the file, no traceback, and the checkpoint as it was. The tables that Hogwild's
worker processes share live in /dev/shm, which such a limit, or a tmpfs smaller than a table
(as Docker's 64 MB default can be), cuts short too.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT

DIMENSION = 64
NUM_ENTITIES = 400
TABLE_BYTES = NUM_ENTITIES * DIMENSION * 4
# Training: above the embedding table (kept in a shared-memory file, also bound by the limit)
# and below the checkpoint file that holds it with its optimizer state. Exports: half of it.
TRAINING_LIMIT_BYTES = TABLE_BYTES + 1024
EXPORT_LIMIT_BYTES = TABLE_BYTES // 2
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> PlantedGraph:
    return write_planted_graph(tmp_path_factory.mktemp("planted"), num_partitions=1,
                               num_entities=NUM_ENTITIES, num_edges=2000)


@pytest.fixture(scope="module")
def config_path(graph: PlantedGraph) -> Path:
    """A config whose checkpoint has one committed epoch."""
    path = graph.root / "config.json"
    path.write_text(json.dumps(graph.config(dimension=DIMENSION, num_epochs=1, workers=1)))
    trained = tessera("train", str(path), "--quiet")
    assert trained.returncode == 0, trained.stderr
    return path


def tessera(*args: str, limit: int | None = None,
            prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run a command (after `prefix`); with `limit`, no file it writes may grow beyond that
    many bytes. Hogwild's workers are processes, which share the tables in /dev/shm."""
    def limit_file_size() -> None:
        assert limit is not None
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*prefix, sys.executable, "-m", "tessera", *args],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={**os.environ, "TESSERA_HOGWILD": "processes"},
                          preexec_fn=None if limit is None else limit_file_size)


def assert_one_line_naming(run: subprocess.CompletedProcess[str], name: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == EXIT_BAD_INPUT, run.stderr
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert name in lines[0] and "file too large" in lines[0], lines[0]


def test_a_checkpoint_cut_short_keeps_the_last_one(graph: PlantedGraph,
                                                    config_path: Path) -> None:
    checkpoints = graph.root / "checkpoints"
    run = tessera("train", str(config_path), "-p", "num_epochs=2", "--quiet",
                  limit=TRAINING_LIMIT_BYTES)
    assert_one_line_naming(run, str(checkpoints / "embeddings_node_0.v2.h5"))
    assert (checkpoints / "checkpoint_version.txt").read_text().strip() == "1"
    evaluated = tessera("eval", str(config_path), "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr


def test_shared_memory_too_small_for_a_table_is_one_line(graph: PlantedGraph,
                                                         config_path: Path) -> None:
    run = tessera("train", str(config_path), "-p", f"checkpoint_path={graph.root / 'fresh'}",
                  "--quiet", limit=TABLE_BYTES // 2)
    assert_one_line_naming(run, "shared memory (/dev/shm)")
    assert "--shm-size" in run.stderr, run.stderr


def test_a_full_shared_memory_is_one_line_and_worth_a_retry(graph: PlantedGraph,
                                                            config_path: Path) -> None:
    """/dev/shm as Docker gives it, but smaller than one table: a tmpfs of 64 kB, mounted
    in a mount namespace of the command's own."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "mount", "-t", "tmpfs", "tmpfs", "/mnt"]).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m and mount need root)")
    mounted = ("unshare", "-m", "sh", "-c",
               'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$@"', "sh")
    run = tessera("train", str(config_path), "-p", f"checkpoint_path={graph.root / 'full'}",
                  "--quiet", prefix=mounted)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == EXIT_TRANSIENT, run.stderr
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "shared memory (/dev/shm)" in lines[0] and "no space left" in lines[0], lines[0]


@pytest.mark.parametrize("fmt", ["h5", "npy"])
def test_an_export_cut_short_publishes_nothing(graph: PlantedGraph, config_path: Path,
                                               fmt: str) -> None:
    output = graph.root / f"export-{fmt}"
    run = tessera("export", str(config_path), str(output), "--format", fmt, "--quiet",
                  limit=EXPORT_LIMIT_BYTES)
    assert_one_line_naming(run, str(output))
    assert ".tessera-staging-" not in run.stderr, run.stderr  # names the file it would be
    assert not any(path.is_file() for path in output.rglob("*")), list(output.rglob("*"))



@pytest.fixture(scope="module")
def edge_list(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 edges as TSV: 240 kB of spilled ids (12 bytes an edge), a bucket file of
    about twice that."""
    path = tmp_path_factory.mktemp("edge-list") / "edges.tsv"
    rows = np.random.default_rng(0).integers(0, 5000, size=(20_000, 2))
    path.write_text("".join(f"n{lhs}\tr\tn{rhs}\n" for lhs, rhs in rows))
    return path


@pytest.mark.parametrize(("limit", "named"), [
    (100_000, "(the import's temporary edge ids; TMPDIR names another folder)"),
    (300_000, "edges/edges_0_0.h5")])
def test_an_import_cut_short_publishes_nothing(edge_list: Path, tmp_path: Path, limit: int,
                                               named: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "entity_path": str(tmp_path / "entities"), "edge_paths": [str(tmp_path / "edges")],
        "checkpoint_path": str(tmp_path / "checkpoints"), "dimension": 8,
        "entities": {"n": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "n", "rhs": "n"}]}))
    run = tessera("import", str(config), str(edge_list), "--quiet", limit=limit)
    assert_one_line_naming(run, named)
    assert ".tessera-" not in run.stderr, run.stderr  # the file it would be, not the staged one
    published = [path for path in tmp_path.rglob("*") if path.is_file() and path != config]
    assert not published, published
