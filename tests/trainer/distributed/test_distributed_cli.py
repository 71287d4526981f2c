"""The distributed subcommands and flags of `tessera`, and what they refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT


@pytest.mark.parametrize("command, expected", [
    ("lock-server", "--init-method"), ("partition-server", "--rank"),
    ("train", "--local-cluster")])
def test_every_role_has_a_command_with_help(command: str, expected: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert f"tessera {command}" in out and expected in out and "--peer-timeout" in out


def write_config(tmp_path: Path, **overrides: object) -> str:
    config = {"entities": {"node": {"num_partitions": 2}},
              "relations": [{"name": "r", "lhs": "node", "rhs": "node"}], "dimension": 4,
              "entity_path": str(tmp_path / "entities"), "edge_paths": [str(tmp_path / "e")],
              "checkpoint_path": str(tmp_path / "checkpoints"), **overrides}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("args, message", [
    (["--trainers", "2"], "--trainers/--partition-servers: only with --local-cluster"),
    (["--local-cluster", "--rank", "0"], "--local-cluster starts every rank itself"),
    (["--local-cluster", "--trainers", "0"], "--trainers: must be at least 1, got 0"),
    (["--local-cluster", "--partition-servers", "-2"],
     "--partition-servers: must be -1 (one per trainer) or more, got -2"),
    (["--rank", "0"], "distributed_init_method: the distributed roles need"),
    (["--rank", "0", "--init-method", "localhost:29500"], "is not a rendezvous address"),
])
def test_contradictory_or_incomplete_flags_are_bad_input(
        tmp_path: Path, args: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", write_config(tmp_path), "--quiet", *args]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_a_rank_beyond_the_configured_roles_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, num_machines=2, num_partition_servers=1,
                          distributed_init_method="tcp://127.0.0.1:1")
    assert main(["partition-server", config, "--rank", "1", "--quiet"]) == EXIT_BAD_INPUT
    assert "partition-server rank 1 does not exist" in capsys.readouterr().err


def test_training_on_one_machine_refuses_a_multi_machine_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", write_config(tmp_path, num_machines=2), "--quiet"]) \
        == EXIT_BAD_INPUT
    assert "tessera train --local-cluster" in capsys.readouterr().err
