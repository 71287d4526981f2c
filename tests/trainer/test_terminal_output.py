"""What a person sees on a terminal: `train` and `eval` run under a pseudo-terminal, as from
a shell, and the JSON lines that pods print for the same runs.

Rates read `11.4k edges/s`, never `1.136e+04`; the per-epoch commit lines fold into the live
line; a rerun says which checkpoint it resumes from; eval's metrics appear once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from support.terminal import run_on_terminal

from tessera.cli import main
from tessera.storage.edges import write_bucket
from tessera.storage.entities import write_entity_count
from tessera.storage.fs import Directory

CONFIG = {
    "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
    "relations": [{"name": "likes", "lhs": "user", "rhs": "item", "operator": "diagonal"}],
    "dimension": 8, "comparator": "dot", "loss_fn": "softmax", "lr": 0.1, "num_epochs": 3,
    "batch_size": 50, "num_batch_negs": 10, "num_uniform_negs": 10, "eval_fraction": 0,
    "workers": 1, "hogwild_delay": 0, "global_emb": False,
    "entity_path": "entities", "edge_paths": ["edges"], "checkpoint_path": "checkpoints",
}
SCIENTIFIC = re.compile(r"\d\.\d+e[+-]\d")


@pytest.fixture
def graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small imported graph, not yet trained; also the working directory."""
    edges = [f"u{user}\tlikes\ti{(user * 7 + k) % 20}" for user in range(30) for k in range(4)]
    (tmp_path / "likes.tsv").write_text("\n".join(edges) + "\n")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    monkeypatch.chdir(tmp_path)
    assert main(["import", "config.json", "likes.tsv", "--rel-col", "1", "--rhs-col", "2",
                 "--quiet"]) == 0
    return tmp_path


def on_terminal(*args: str) -> str:
    """What `tessera ARGS` shows on a terminal (stdout and stderr both on it), its line ends
    as written: the live line rewrites itself with a carriage return."""
    run = run_on_terminal(*args)
    assert run.returncode == 0, run.text
    return run.text


def shown_lines(text: str) -> list[str]:
    """The lines left on the screen: each line as its last carriage return left it."""
    return [line.rsplit("\r", 1)[-1].replace("\x1b[2K", "") for line in text.split("\n")]


def test_a_run_on_a_terminal_reads_as_people_read(graph: Path) -> None:
    text = on_terminal("train", "config.json")
    assert not SCIENTIFIC.search(text), text
    assert re.search(r"\d+(\.\d)?k? edges/s", text), text
    lines = shown_lines(text)
    # Three epochs, three commits: folded into the live line, none on a line of its own.
    assert not [line for line in lines if line.startswith("checkpoint committed")], text
    assert "checkpoint committed: checkpoint_version=" in text
    assert "resuming" not in text

    text = on_terminal("train", "config.json", "-p", "num_epochs=5")
    assert "resuming from a checkpoint  checkpoint_version=3  epoch=4  chunks_done=3  " \
           "chunks_total=5" in shown_lines(text), text

    text = on_terminal("train", "config.json", "-p", "num_epochs=5", "-p", "lr=0.5",
                       "-p", "margin=0.2")
    assert "nothing to train: the checkpoint has every epoch (raise num_epochs to train on)  " \
           "checkpoint_version=5  num_epochs=5" in shown_lines(text), text
    assert "the config differs from the checkpoint's: training goes on with its values  " \
           "keys=lr,margin" in shown_lines(text), text


def test_a_rerun_with_more_edge_paths_says_where_it_goes_on(graph: Path) -> None:
    """The trap: a finished run given a second edge set trains that set in the last epoch
    only (PBG's rule, by position); the line says so and how to train it from epoch 1."""
    (graph / "more.tsv").write_text("u1\tlikes\ti2\nu3\tlikes\ti4\n")
    assert main(["import", "config.json", "more.tsv", "--rel-col", "1", "--rhs-col", "2",
                 "-p", "edge_paths=[more]", "--quiet"]) == 0
    assert main(["train", "config.json", "--quiet"]) == 0
    lines = shown_lines(on_terminal("train", "config.json", "-p", "edge_paths=[edges, more]"))
    assert "edge_paths differ from the checkpoint's: training goes on from its position in " \
           "the new list; to train every edge set from the first epoch, train into a new " \
           "checkpoint_path with init_path set to this one  edge_set=2/2  edge_path=more" \
           in lines, lines
    lines = shown_lines(on_terminal("train", "config.json", "-p", "edge_paths=[more, edges]"))
    assert any(line.startswith("edge_paths differ") and line.endswith("this one")
               for line in lines), lines  # nothing left to train: no position to name


def test_verbose_runs_keep_a_line_per_commit(graph: Path) -> None:
    lines = shown_lines(on_terminal("train", "config.json", "-p", "verbose=1"))
    assert len([line for line in lines if line.startswith("checkpoint committed")]) == 3


def test_eval_on_a_terminal_prints_its_metrics_once(graph: Path) -> None:
    assert main(["train", "config.json", "--quiet"]) == 0
    text = on_terminal("eval", "config.json")
    assert text.count("\"mrr\"") == 1 and "mrr=" not in text, text
    assert "evaluation finished" in shown_lines(text), text
    result = json.loads(text[text.index("\n{") + 1:])
    assert result["mode"] == "raw" and result["count"] == 2 * 120


def test_json_lines_keep_every_event(graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pods' log is as before, a resume added: one event per commit, eval's metrics in full."""
    assert main(["train", "config.json", "--log-format", "json", "-p", "num_epochs=2"]) == 0
    assert main(["train", "config.json", "--log-format", "json"]) == 0
    assert main(["eval", "config.json", "--log-format", "json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    events = [record for record in records if "event" in record]
    commits = [event for event in events if event["event"] == "checkpoint committed"]
    assert [commit["checkpoint_version"] for commit in commits] == [1, 2, 3]
    resumes = [event for event in events if event["event"] == "resuming from a checkpoint"]
    assert [{key: value for key, value in resume.items() if key != "time"}
            for resume in resumes] == [{"event": "resuming from a checkpoint",
                                        "checkpoint_version": 2, "epoch": 3,
                                        "chunks_done": 2, "chunks_total": 3}]
    assert not [event for event in events if event["event"].startswith(("nothing to train",
                                                                          "the config differs"))]
    finished = [event for event in events if event["event"] == "evaluation finished"]
    assert len(finished) == 1 and "mrr" in finished[0]


def test_the_live_line_moves_while_a_bucket_trains(tmp_path: Path) -> None:
    """One bucket of 400k edges (a few seconds of work), one epoch: the line moves within it,
    at least every second (it moved only when a bucket ended: a minute on a large graph)."""
    rng = np.random.default_rng(0)
    write_entity_count(Directory(str(tmp_path / "entities")), "node", 0, 50_000)
    lhs, rhs = rng.integers(0, 50_000, 400_000), rng.integers(0, 50_000, 400_000)
    write_bucket(Directory(str(tmp_path / "edges")), 0, 0, np.zeros(len(lhs), np.int64), lhs,
                 rhs)
    config = {**CONFIG, "entities": {"node": {"num_partitions": 1}},
              "relations": [{"name": "link", "lhs": "node", "rhs": "node",
                             "operator": "translation"}],
              "dimension": 128, "batch_size": 1000, "num_batch_negs": 100,
              "num_uniform_negs": 100, "num_epochs": 1, "workers": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = run_on_terminal("train", "config.json", cwd=tmp_path)
    assert run.returncode == 0, run.text
    moving = [(at, line) for at, line in run.updates
              if re.match(r"train\s+\d", line) and " 100.0%" not in line]
    assert len(moving) >= 3, run.text
    gaps = sorted(later - earlier for (earlier, _), (later, _) in zip(moving, moving[1:]))
    # Every second here as in bench/bench_live_line.py; a loaded test machine may delay one.
    assert gaps[len(gaps) // 2] <= 1.0 and gaps[-1] <= 2.5, (gaps, run.text)
