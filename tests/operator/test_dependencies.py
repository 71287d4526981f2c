"""The operator's image installs `.[operator]` only: every package the operator imports must be
declared there (pinned) or among the base dependencies."""

from __future__ import annotations

import ast
import importlib.metadata
import re
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
