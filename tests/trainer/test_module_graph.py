"""The shape of the `tessera` package: what may import what.

Data flows one way (config -> storage -> data -> model -> evaluation -> training ->
distributed), so no two subpackages may import each other, even through a third. The shared
vocabulary and the config must stay free of torch, so that the processes that only speak them
(the lock server's bookkeeping, the world layout, the operator) start without the training
stack.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tessera

PACKAGE_ROOT = Path(tessera.__file__).parent


def _imported_modules(path: Path, module: str) -> set[str]:
    """The absolute names of the tessera modules that `path` (module `module`) imports."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names.add(".".join([*base, *([node.module] if node.module else [])]))
    return {name for name in names if name.split(".")[0] == "tessera"}


def _subpackage_graph() -> dict[str, set[str]]:
    """Which subpackage of tessera imports which other one."""
    subpackages = {p.name for p in PACKAGE_ROOT.iterdir() if (p / "__init__.py").exists()}
    graph: dict[str, set[str]] = {name: set() for name in subpackages}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if len(parts) < 3 or parts[1] not in subpackages:
            continue  # a top-level module: not part of any subpackage
        for name in _imported_modules(path, module):
            target = name.split(".")[1] if name.count(".") else ""
            if target in subpackages and target != parts[1]:
                graph[parts[1]].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as the list of its nodes (first repeated last), or []."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str]:
        if node in visiting:
            return [*visiting[visiting.index(node):], node]
        if node in done:
            return []
        visiting.append(node)
        for target in sorted(graph[node]):
            if found := visit(target):
                return found
        visiting.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        if found := visit(node):
            return found
    return []


def test_the_cycle_finder_finds_a_cycle_through_a_third_package() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_no_two_subpackages_import_each_other() -> None:
    graph = _subpackage_graph()
    assert graph["evaluation"] and graph["training"]  # the walk does see imports
    assert _cycle(graph) == []


def test_the_vocabulary_config_and_world_layout_do_not_import_torch() -> None:
    probe = ("import sys, tessera.vocabulary, tessera.config, tessera.distributed.world; "
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
