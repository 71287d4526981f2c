"""Writes that the operating system cuts short in the middle of a file, for real: the error
contract holds, and the process ends by itself (no crash).

`test_os_errors` refuses files as they are created. A disk that fills while HDF5, torch.save
or a .npy file is being written fails later, inside those libraries, whose objects are then
half-written: once that crashed the process (a segmentation fault in HDF5 at exit, SIGBUS in
a memory-mapped .npy). Here each command runs as its own process under a file size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored), so that writing past the limit fails with EFBIG, as a
full disk fails with ENOSPC, at the first write beyond it: exit 65 ("file too large"), one
line naming the file, no traceback, and the checkpoint as it was.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.planted import PlantedGraph, write_planted_graph

from tessera.errors import EXIT_BAD_INPUT

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


def tessera(*args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; with `limit`, no file it writes may grow beyond that many bytes."""
    def limit_file_size() -> None:
        assert limit is not None
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "tessera", *args], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S,
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


@pytest.mark.parametrize("fmt", ["h5", "npy"])
def test_an_export_cut_short_publishes_nothing(graph: PlantedGraph, config_path: Path,
                                               fmt: str) -> None:
    output = graph.root / f"export-{fmt}"
    run = tessera("export", str(config_path), str(output), "--format", fmt, "--quiet",
                  limit=EXPORT_LIMIT_BYTES)
    assert_one_line_naming(run, str(output))
    assert not any(path.is_file() for path in output.rglob("*")), list(output.rglob("*"))
