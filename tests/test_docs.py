"""The README and the docs site: the README stays short, its links (and the docs' links) reach
files and headings that exist as GitHub renders them, and the site builds with warnings as
errors (`mkdocs build --strict`, which also checks the docs' links and anchors as MkDocs
renders them, and that every page is in the nav)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 220

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped (word
    characters, hyphens and spaces kept), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in `path`, repeats numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return found


def relative_links(path: Path) -> list[str]:
    return [target for line in prose_lines(path) for target in LINK.findall(line)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:...


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(REPO)}")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no heading with that anchor in "
                          f"{linked.relative_to(REPO)}")
    return broken


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines; keep it at most {MAX_README_LINES} and move "
        "detail into docs/")


@pytest.mark.parametrize("path", [README, *sorted(DOCS.glob("*.md"))],
                         ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_reach_files_and_headings(path: Path) -> None:
    assert broken_links(path) == []


def test_readme_links_every_docs_page() -> None:
    linked = {(REPO / target.partition("#")[0]).resolve() for target in relative_links(README)}
    pages = {page.resolve() for page in DOCS.glob("*.md")} - {(DOCS / "changelog.md").resolve()}
    missing = sorted(str(page.relative_to(REPO)) for page in pages - linked)
    assert missing == [], "pages the README's index does not link"


def test_readme_make_targets_exist() -> None:
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    named = set(re.findall(r"`make ([\w-]+)`|^make ([\w-]+)",
                           README.read_text(encoding="utf-8"), re.MULTILINE))
    used = {first or second for first, second in named}
    assert used >= {"demo", "test", "lint", "docs"}
    assert used <= targets


def test_reliability_contract_names_existing_tests() -> None:
    text = (DOCS / "reliability.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+\.py)`", text))
    assert named, "the contract names the tests that hold it"
    missing = sorted(name for name in named if not (REPO / "tests" / "faults" / name).exists())
    assert missing == []


def test_docs_build_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` (what `make docs` runs): broken links or anchors, pages missing
    from the nav, nav entries without a page and a missing CHANGELOG.md all fail it."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reliability" / "index.html").exists()
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in changelog  # CHANGELOG.md included, not the snippet line


def fenced_block_after(path: Path, heading: str) -> str:
    """The first fenced code block under `heading` (a line of the file, as written)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    opening = next(i for i in range(start, len(lines)) if FENCE.match(lines[i]))
    closing = next(i for i in range(opening + 1, len(lines)) if FENCE.match(lines[i]))
    return "\n".join(lines[opening + 1:closing])


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    """The commands of the README's local quick start, as a user pastes them: from a checkout
    (here a folder holding its examples and environment) after `make demo`."""
    commands = fenced_block_after(README, "## Quick start on one machine")
    assert commands.startswith("source .venv/bin/activate")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"mode": "filtered"' in result.stdout and "alga\t1\t" in result.stdout
    assert (tmp_path / "demo-output" / "umls" / "export" / "embeddings_all.tsv").exists()
