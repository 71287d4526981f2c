"""The `tessera` command end to end: import, train, eval, export, and its error handling."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from support.workspace import CONFIG, build_workspace

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT

UMLS = Path(__file__).resolve().parents[2] / "examples" / "umls"

COMMANDS = ["import", "train", "eval", "tune", "export", "neighbors", "config", "lock-server",
            "partition-server"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert f"tessera {command}" in capsys.readouterr().out


def write_config(tmp_path: Path, **overrides: object) -> Path:
    config = {
        "entities": {"all": {"num_partitions": 1}},
        "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all",
                       "operator": "complex_diagonal"}],
        "dynamic_relations": True, "dimension": 32, "global_emb": False,
        "comparator": "dot", "loss_fn": "softmax", "lr": 0.1, "num_epochs": 3,
        "batch_size": 500, "num_batch_negs": 100, "num_uniform_negs": 100,
        "eval_fraction": 0, "workers": 1, "hogwild_delay": 0,
        "entity_path": str(tmp_path / "entities"),
        "edge_paths": [str(tmp_path / "train"), str(tmp_path / "test")],
        "checkpoint_path": str(tmp_path / "checkpoints"),
    }
    config.update(overrides)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_import_train_eval_export_on_umls(tmp_path: Path) -> None:
    config = str(write_config(tmp_path))
    imported = run_cli("import", config, str(UMLS / "train.tsv"), str(UMLS / "test.tsv"),
                       "--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2",
                       "--log-format", "json")
    assert imported.returncode == 0, imported.stderr
    input_bytes = (UMLS / "train.tsv").stat().st_size + (UMLS / "test.tsv").stat().st_size
    reading = progress_records(imported.stderr, "import: reading")
    assert reading[0]["total"] == input_bytes  # bytes of the inputs, known before reading
    assert events_of(imported.stderr, "import: reading done")[0]["bytes"] == input_bytes
    assert (tmp_path / "entities" / "entity_count_all_0.txt").read_text().strip() == "135"
    assert (tmp_path / "entities" / "dynamic_rel_count.txt").read_text().strip() == "46"

    trained = run_cli("train", config, "-p", f"edge_paths={tmp_path / 'train'}",
                      "--log-format", "json")
    assert trained.returncode == 0, trained.stderr
    events = [json.loads(line) for line in trained.stderr.splitlines() if line.startswith("{")]
    finished = [e for e in events if e.get("event") == "training finished"]
    assert finished and finished[0]["checkpoint_version"] == 3
    commits = [(e["epoch"], e["chunks_done"], e["chunks_total"]) for e in events
               if e.get("event") == "checkpoint committed"]
    assert commits == [(1, 1, 3), (2, 2, 3), (3, 3, 3)]  # what the operator's percent reads

    evaluated = run_cli("eval", config, "-p", f"edge_paths={tmp_path / 'test'}", "--filtered",
                        "--filter-paths", str(tmp_path / "train"), str(tmp_path / "test"),
                        "--log-format", "json", "--output", str(tmp_path / "metrics.json"))
    assert evaluated.returncode == 0, evaluated.stderr
    assert progress_records(evaluated.stderr, "eval")[0]["total"] == 661
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["mode"] == "filtered" and metrics["count"] == 2 * 661
    assert metrics["mrr"] > 0.1  # 135 candidates: random ranking gives about 0.04
    # The split by its name: the same edges, filtered against every split of the config.
    by_name = run_cli("eval", config, "--split", "test", "--filtered", "--log-format", "json")
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout) == metrics
    misnamed = run_cli("eval", config, "--split", "valid", "--log-format", "json")
    assert misnamed.returncode == EXIT_BAD_INPUT
    assert misnamed.stderr.splitlines()[-1] == (
        "tessera eval: error: --split: no edge path of the config is named 'valid' (its names: "
        "train, test); give one of them, or an edge set's path")

    exported = run_cli("export", config, str(tmp_path / "export"), "--log-format", "json")
    assert exported.returncode == 0, exported.stderr
    assert progress_records(exported.stderr, "export")[0]["total"] == 135
    rows = (tmp_path / "export" / "embeddings_all.tsv").read_text().splitlines()
    assert len(rows) == 135 and len(rows[0].split("\t")) == 1 + 32
    names = json.loads((tmp_path / "entities" / "entity_names_all_0.json").read_text())
    assert [row.split("\t")[0] for row in rows] == names
    with h5py.File(tmp_path / "checkpoints" / "embeddings_all_0.v3.h5", "r") as file:
        np.testing.assert_allclose([float(x) for x in rows[0].split("\t")[1:]],
                                   file["embeddings"][0], rtol=1e-6)
    relations = (tmp_path / "export" / "relation_parameters.tsv").read_text().splitlines()
    assert len(relations) == 46 * 2 * 2  # relations x sides x (real, imag)


    queried = run_cli("neighbors", config, names[0], names[1], "-k", "5", "--relation",
                      "isa", "--log-format", "json")
    assert queried.returncode == 0, queried.stderr
    lines = [line.split("\t") for line in queried.stdout.splitlines()]
    assert [line[:2] for line in lines] == [[name, str(rank)] for name in names[:2]
                                            for rank in range(1, 6)]
    assert progress_records(queried.stderr, "neighbors")[0]["total"] == 135


def events_of(stderr: str, event: str) -> list[dict[str, object]]:
    return [record for record in map(json.loads, stderr.splitlines())
            if record.get("event") == event]


def progress_records(stderr: str, task: str) -> list[dict[str, object]]:
    return [record for record in map(json.loads, stderr.splitlines())
            if record.get("progress") == task]


def test_bad_config_exits_with_the_bad_input_code(tmp_path: Path) -> None:
    config = write_config(tmp_path, comparator="dott")
    result = run_cli("train", str(config))
    assert result.returncode == EXIT_BAD_INPUT
    assert "comparator: 'dott' is not one of" in result.stderr
    assert "did you mean 'dot'" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_data_exits_with_the_bad_input_code(tmp_path: Path) -> None:
    result = run_cli("train", str(write_config(tmp_path)))
    assert result.returncode == EXIT_BAD_INPUT
    assert "entity_count_all_0.txt" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_check_prints_defaults(tmp_path: Path) -> None:
    result = run_cli("config", "check", str(write_config(tmp_path)), "-p", "num_epochs=9")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["num_epochs"] == 9 and printed["bucket_order"] == "inside_out"


PYTHON_CONFIG_MISTAKES = {
    "raises": ("def get_torchbiggraph_config():\n"
               "    entities = {'all': {'num_partitions': 1}}\n"
               "    raise ValueError('no relations yet')\n",
               3, "ValueError: no relations yet"),
    "syntax error": ("def get_torchbiggraph_config(:\n    return {}\n",
                     1, "SyntaxError: "),
    "missing environment variable": (
        "import os\n\nDATA = os.environ['TESSERA_TEST_UNSET_VARIABLE']\n",
        3, "KeyError: 'TESSERA_TEST_UNSET_VARIABLE' (the environment variable "
           "TESSERA_TEST_UNSET_VARIABLE is not set"),
}


@pytest.mark.parametrize("mistake", list(PYTHON_CONFIG_MISTAKES))
def test_a_failing_python_config_names_its_file_and_line(
        mistake: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, line, message = PYTHON_CONFIG_MISTAKES[mistake]
    monkeypatch.delenv("TESSERA_TEST_UNSET_VARIABLE", raising=False)
    config = tmp_path / "pbg_config.py"
    config.write_text(source)
    assert main(["config", "check", str(config)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()], err  # one line
    assert f"{config}, line {line}: " in err and message in err
    assert "Traceback" not in err


def test_config_check_without_a_file_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["config", "check"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: tessera config") and "check needs a CONFIG file" in err


def test_a_closed_reader_ends_the_output_quietly() -> None:
    """`tessera config schema | head`: the reader is gone before the schema is written."""
    process = subprocess.Popen([sys.executable, "-m", "tessera", "config", "schema"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert stderr == ""


def tessera_in_bash(redirections: str, *args: str, cwd: Path | None = None,
                    first: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m tessera ARGS REDIRECTIONS` run by bash (which can close a descriptor),
    after the shell command `first`."""
    command = f'{first}exec "$0" -m tessera "$@" {redirections}'
    return subprocess.run(["bash", "-c", command, sys.executable, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("closed", "args", "code"), [
    (">&-", ("config", "check", "{config}"), 0),  # the result is dropped, as print drops it
    ("2>&-", ("config", "check", "{missing}"), EXIT_BAD_INPUT),  # the error line is dropped
    ("<&- >&- 2>&-", ("train", "config.yaml", "-p", "edge_paths=edges/train", "-p",
                      "workers=2", "-p", "checkpoint_path=again"), 0),
], ids=["stdout", "stderr", "stdin, stdout and stderr, Hogwild workers"])
def test_a_closed_standard_stream_is_read_or_written_as_dev_null(
        closed: str, args: tuple[str, ...], code: int, tmp_path: Path) -> None:
    """Started with a standard descriptor closed, Python has no stream for it: the first
    print or flush was an AttributeError traceback (exit 1)."""
    build_workspace(tmp_path)
    args = tuple(arg.format(config=tmp_path / "config.yaml", missing=tmp_path / "none.yaml")
                 for arg in args)
    result = tessera_in_bash(closed, *args, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if args[0] == "train":
        versions = CONFIG["num_epochs"] * CONFIG["num_edge_chunks"]  # one a chunk
        assert int((tmp_path / "again" / "checkpoint_version.txt").read_text()) == versions


def test_a_deleted_working_directory_is_one_line_not_a_crash_in_torch(tmp_path: Path) -> None:
    """torch's MKL aborts a process whose working directory was deleted (exit 2, "oneMKL
    FATAL ERROR"); the command names the directory first."""
    build_workspace(tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    result = tessera_in_bash("", "eval", str(tmp_path / "config.yaml"), cwd=gone,
                             first=f"rmdir {gone} && ")
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.splitlines() == [
        f"tessera eval: error: {gone}: the working directory was deleted; change to one that "
        "exists and run the command again"]


def train_with_open_file_limits(root: Path, soft: int, hard: int
                                ) -> subprocess.CompletedProcess[str]:
    """`tessera train` with two Hogwild workers (each shared table passed as a descriptor)
    under the given limits on open files."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run([sys.executable, "-m", "tessera", "train", "config.yaml", "-p",
                           "edge_paths=edges/train", "-p", "workers=2", "-p",
                           "checkpoint_path=again", "--quiet"], cwd=root, preexec_fn=limit,
                          capture_output=True, text=True, timeout=120)


def test_a_low_soft_limit_on_open_files_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    """A soft limit of 20 ended this run in "too many open files"; the hard one is higher."""
    build_workspace(tmp_path)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result = train_with_open_file_limits(tmp_path, 20, hard)
    assert result.returncode == 0, result.stderr


def test_too_many_open_files_is_one_line(tmp_path: Path) -> None:
    """At a hard limit too low for the workers, the error names no file: it was a traceback."""
    build_workspace(tmp_path)
    result = train_with_open_file_limits(tmp_path, 20, 20)
    assert result.returncode == EXIT_TRANSIENT, result.stderr
    assert result.stderr.splitlines() == [
        "tessera train: error: too many open files in this process; raise its limit "
        "(`ulimit -n`, the hard one too) or retry with fewer workers"]


def test_the_command_ends_like_a_normal_exit_without_the_teardown(tmp_path: Path) -> None:
    """`run` waits for other threads, runs exit handlers and flushes output, as a normal exit
    does, then skips the interpreter's teardown (objects still alive are not finalised)."""
    script = tmp_path / "command.py"
    script.write_text(
        "import atexit, sys, threading, time\n"
        "from tessera import cli\n"
        "class Alive:\n"
        "    def __del__(self):\n"
        "        print('torn down', flush=True)\n"
        "alive = Alive()\n"
        "atexit.register(lambda: print('exit handler ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread finished'))).start()\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "ThreadPoolExecutor(1).submit(print, 'pool task ran')  # its idle worker must stop\n"
        "sys.stdout.write('unflushed output')\n"
        "sys.argv = ['tessera', 'config', 'check', sys.argv[1]]\n"
        "cli.run()\n")
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "missing.json")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 65  # main's code for a missing config
    assert "missing.json" in result.stderr
    assert "unflushed output" in result.stdout
    assert "thread finished" in result.stdout and "exit handler ran" in result.stdout
    assert "pool task ran" in result.stdout
    assert "torn down" not in result.stdout
