"""The operator's image installs `.[operator]` only: every package the operator imports must be
declared there (pinned) or among the base dependencies, and neither numpy nor torch may come
with it. The trainer's and the tests' imports are declared too, and constraints.txt pins every
declared package to the version the project is tested with."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OWN = {"tessera", "tessera_operator"}


def imported_modules(package: Path) -> set[str]:
    """The top-level names of the modules the package's files import, other than its own."""
    found: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - OWN - set(sys.stdlib_module_names)


def requirements(key: str) -> list[str]:
    """A list of requirements in pyproject.toml (one-line strings there)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    block = re.search(rf"^{key} = \[(.*?)\]", pyproject, flags=re.MULTILINE | re.DOTALL)
    assert block, key
    return re.findall(r'"([^"]+)"', block.group(1))


def distribution(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[;\s]", requirement)[0]).lower()


def undeclared(source: Path, keys: list[str]) -> dict[str, object]:
    """The third-party modules imported under `source` that no requirement in `keys` provides
    (modules of the tests' own, found as files or folders under tests/ and bench/, aside)."""
    declared = {distribution(r) for key in keys for r in requirements(key)}
    local = {path.stem for folder in ("tests", "bench") for path in (REPO / folder).rglob("*")}
    providers = importlib.metadata.packages_distributions()
    return {module: providers.get(module) for module in imported_modules(source) - local
            if not {distribution(d) for d in providers.get(module, [module])} & declared}


def test_every_third_party_import_of_the_operator_is_declared() -> None:
    operator_extra = requirements("operator")
    declared = {distribution(r) for r in requirements("dependencies") + operator_extra}
    providers = importlib.metadata.packages_distributions()
    imports = imported_modules(REPO / "operator" / "tessera_operator")
    assert {"kopf", "kubernetes_asyncio"} <= imports
    undeclared = {module: providers.get(module) for module in imports
                  if not {distribution(d) for d in providers.get(module, [module])} & declared}
    assert not undeclared, f"imported but not in the operator extra: {undeclared}"
    assert all("==" in requirement for requirement in operator_extra), operator_extra


def test_every_third_party_import_of_the_trainer_and_the_tests_is_declared() -> None:
    # The optional extras' packages (tracking, MLflow, tuning) are imported where they are
    # used.
    trainer = ["dependencies", "trainer", "tracking", "mlflow", "tune"]
    assert undeclared(REPO / "trainer" / "tessera", trainer) == {}
    everything = [*trainer, "operator", "dev"]
    assert undeclared(REPO / "tests", everything) == {}
    assert undeclared(REPO / "bench", everything) == {}


def test_importing_the_operator_loads_neither_numpy_nor_torch() -> None:
    modules = sorted(f"tessera_operator.{path.stem}" for path in
                     (REPO / "operator" / "tessera_operator").glob("*.py"))
    assert "tessera_operator.handlers" in modules
    probe = (f"import sys; import {', '.join(modules)}; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'torch'}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
    installed = {distribution(r) for r in requirements("dependencies") + requirements("operator")}
    assert not installed & {"numpy", "torch"}, "the operator's image would install them"


def test_constraints_pin_every_declared_package_and_pypis_torch() -> None:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert all(re.fullmatch(r"[\w.]+", version) for version in pins.values()), pins
    pinned = {distribution(name) for name in pins}
    declared = {distribution(r) for key in ["dependencies", "trainer", "tracking", "tune",
                                            "operator", "dev"]
                for r in requirements(key)}
    assert declared <= pinned, declared - pinned
    assert pins["torch"] == "2.13.0"  # no local tag (+cpu): PyPI's build must match too
