"""`tessera tune`'s bad input: each mistake is one line naming the file and the field, exit 65,
before any trial trains."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.planted import write_planted_graph

from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tune-space")
    graph = write_planted_graph(root, 1, num_entities=60, num_edges=600)
    (root / "config.yaml").write_text(yaml.safe_dump(graph.config()))
    return root


def tune(root: Path, *args: str, space: Any = None) -> list[str]:
    command = ["tune", str(root / "config.yaml"), "--valid", str(root / "test"), "--quiet",
               *args]
    if space is not None:
        (root / "space.yaml").write_text(yaml.safe_dump(space))
        command += ["--space", str(root / "space.yaml")]
    return command


@pytest.mark.parametrize(("space", "expected"), [
    ({}, "space.yaml: the space is empty"),
    ({"lrr": {"low": 0.1, "high": 1.0}}, "space.yaml: lrr: unknown config key (did you mean "
                                          "'lr'?)"),
    ({"relations.0.colour": {"choices": [1]}}, "space.yaml: relations.0.colour: unknown "
                                               "config key"),
    ({"lr": {"low": 1.0, "high": 0.1}}, "space.yaml: lr: low (1.0) is above high (0.1)"),
    ({"lr": {"lo": 0.1, "high": 1.0}}, "space.yaml: lr.lo: unknown (did you mean 'low'?)"),
    ({"lr": {"low": 0.0, "high": 1.0, "log": True}}, "space.yaml: lr.low: a log range needs "
                                                     "low > 0"),
    ({"dimension": {"low": 0, "high": 8}}, "space.yaml: dimension.low: 0 makes the config "
                                           "wrong (dimension: must be at least 1"),
    ({"dimension": {"low": 4, "high": 8.5}}, "space.yaml: dimension.high: expected an integer"),
    ({"comparator": {"choices": ["dot", "cosine"]}}, "space.yaml: comparator.choices[1]: "
                                                      "'cosine' makes the config wrong"),
    ({"checkpoint_path": {"choices": ["x"]}}, "space.yaml: checkpoint_path: a path is not "
                                              "tuned"),
    ({"relations": {"choices": [[]]}}, "space.yaml: relations: not a single value"),
    ({"lr": {"choices": []}}, "space.yaml: lr.choices: expected a non-empty list"),
    ({"lr": [0.1, 1.0]}, "space.yaml: lr: give {low: L, high: H}"),
])
def test_a_bad_space_is_one_line_naming_the_field(
        workspace: Path, capsys: pytest.CaptureFixture[str], space: Any, expected: str) -> None:
    assert main(tune(workspace, space=space)) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tessera tune: error: ")
    assert expected in err
    assert not (workspace / "checkpoints" / "tune").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (["--valid", ""], "--valid: no validation edge set"),
    (["-p", "edge_paths=[{train}, {test}]"], "--valid: {test} is also in edge_paths"),
    (["--valid", "{root}/nowhere"], "--valid: {root}/nowhere/edges_0_0.h5: file not found"),
    (["--filter-paths", "{root}/nowhere"], "--filter-paths: {root}/nowhere"),
    (["--trials", "0"], "--trials: must be at least 1"),
    (["--timeout", "0"], "--timeout: must be above 0 seconds"),
    (["--valid-every", "-1"], "--valid-every: must be 0 or more, got -1"),
    (["--space", "{root}/no-space.yaml"], "no-space.yaml: space file not found"),
])
def test_bad_options_are_one_line_naming_the_flag(
        workspace: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        expected: str) -> None:
    names = {"root": workspace, "train": workspace / "train", "test": workspace / "test"}
    args = [arg.format(**names) for arg in args]
    assert main(tune(workspace, *args)) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(**names) in err


def test_an_integer_range_is_checked_past_its_ends(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A complex operator needs an even dimension: 10-14 holds 11 and 13, which its ends do
    not show; with step 2 it is all even."""
    space = {"dimension": {"low": 10, "high": 14}}
    complex_operator = ("-p", "relations.0.operator=complex_diagonal")
    assert main(tune(workspace, *complex_operator, space=space)) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == (f"tessera tune: error: {workspace / 'space.yaml'}: dimension.low + step: 11 "
                   "makes the config "
                   "wrong (relations[0].operator: complex_diagonal splits embeddings into real "
                   "and imaginary halves, so it needs an even dimension, not 11)\n")
    space["dimension"]["step"] = 2
    assert main(tune(workspace, *complex_operator, "--trials", "1", "-p", "num_epochs=1",
                     "-p", f"checkpoint_path={workspace / 'even'}", space=space)) == 0


def test_a_trial_that_fails_ends_the_tune_in_one_line(
        workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The trial's error, classified, and nothing of Optuna's (its warning of a failed trial
    carries a traceback)."""
    shutil.copytree(workspace, tmp_path / "copy")
    (bucket,) = (tmp_path / "copy" / "train").glob("edges_*.h5")
    bucket.write_bytes(bucket.read_bytes()[:100])
    command = tune(tmp_path / "copy", "--trials", "1", "-p", f"edge_paths=[{bucket.parent}]",
                   "-p", f"checkpoint_path={tmp_path / 'copy' / 'checkpoints'}",
                   "-p", f"entity_path={tmp_path / 'copy' / 'entities'}")
    assert main(command) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"tessera tune: error: {bucket}: "), err


def test_the_default_space_leaves_out_negatives_that_all_negs_ignores() -> None:
    from tessera.config import parse_config
    from tessera.tuning.space import default_space

    raw: dict[str, Any] = {
        "entities": {"node": {"num_partitions": 1}}, "dimension": 8,
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "all_negs": True}],
        "entity_path": "e", "edge_paths": ["t"], "checkpoint_path": "c"}
    assert "num_uniform_negs" not in default_space(parse_config(raw))
    raw["relations"][0]["all_negs"] = False
    assert set(default_space(parse_config(raw))) == {
        "lr", "dimension", "regularization_coef", "num_uniform_negs", "num_epochs"}
