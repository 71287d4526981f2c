"""OS errors on the paths commands write, table-driven: every one meets the error contract.

Each row starts from the same small workspace (two TSV edge lists imported into two partitions,
a checkpoint trained on them) and runs one `tessera` command in-process while the operating
system refuses it the path it writes: a full disk (ENOSPC), a read-only file system (EROFS) or
a refused permission (EACCES), injected by patching `os.open`, `os.mkdir` and `open` to fail
when a file under that path is created (the tests run as root, whom chmod stops not, and no
test may fill a disk); or, for real, a symlink loop (ELOOP), a file in the middle of the
path (ENOTDIR) or a file where the folder itself should be (EEXIST). The contract: exit 75
for a full disk (space may be freed), 65 for the rest; one line on stderr naming the path;
no traceback; nothing that was there before changed or deleted; a checkpoint whose next
version failed to be written still evaluates; and an evaluation whose output cannot be
written does not run at all.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fnmatch
import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.workspace import EVAL, IMPORT, TRAIN, build_workspace

from tessera import cli
from tessera.cli import main
from tessera.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Imported and trained once; each row works on a copy."""
    root = tmp_path_factory.mktemp("workspace")
    build_workspace(root)
    yield root


@dataclass(frozen=True)
class Place:
    """A path a command writes: `argv` holds `{path}` where the path goes."""

    argv: tuple[str, ...]
    path: str
    only: str = "*"  # injected refusals: the names (glob) whose creation fails
    may_leave: str = ""  # a glob of new files a failed run may leave (an uncommitted version)


@dataclass(frozen=True)
class Kind:
    """An OS error: injected at `Place.path`, or made real by `real` (a path prefix)."""

    errno: int
    exit_code: int
    real: str | None = None  # real errors: the place's path goes under this one
    file_in_place: bool = False  # real: a file is where the place's folder should be


PLACES = {
    "import entity_path": Place(
        (*IMPORT, "-p", "entity_path={path}", "-p", "edge_paths=new/train,new/test"),
        "new/entities"),
    "import edge path": Place(
        (*IMPORT, "-p", "entity_path=new/entities", "-p", "edge_paths={path},new/test"),
        "new/train"),
    "train checkpoint_path": Place((*TRAIN, "-p", "checkpoint_path={path}"), "fresh"),
    "train, at the next version's model file": Place(
        (*TRAIN, "-p", "num_epochs=3", "-p", "checkpoint_path={path}"), "ckpt", ".model.v5.*",
        may_leave="ckpt/*.v5.h5"),
    "train, at the next version's embeddings": Place(
        (*TRAIN, "-p", "num_epochs=3", "-p", "checkpoint_path={path}"), "ckpt",
        ".embeddings_node_1.v5.*", may_leave="ckpt/*.v5.h5"),
    "eval --output": Place((*EVAL, "--output", "{path}/metrics.json"), "results"),
    "export OUTPUT": Place(("export", "config.yaml", "{path}"), "exported"),
}
KINDS = {
    "ENOSPC": Kind(errno.ENOSPC, EXIT_TRANSIENT),
    "EROFS": Kind(errno.EROFS, EXIT_BAD_INPUT),
    "EACCES": Kind(errno.EACCES, EXIT_BAD_INPUT),
    "ELOOP": Kind(errno.ELOOP, EXIT_BAD_INPUT, real="loop"),
    "ENOTDIR": Kind(errno.ENOTDIR, EXIT_BAD_INPUT, real="train.tsv"),
    "EEXIST": Kind(errno.EEXIST, EXIT_BAD_INPUT, file_in_place=True),
}
# A real error stops a command at the first use of the path: one row per command is enough.
SAME_FOR_REAL = {"train, at the next version's model file",
                 "train, at the next version's embeddings"}
ROWS = {f"{kind_name} at {place_name}": (place, kind)
        for place_name, place in PLACES.items() for kind_name, kind in KINDS.items()
        if not ((kind.real or kind.file_in_place) and place_name in SAME_FOR_REAL)}


class Refusal:
    """Makes the creation of files and folders under `base` (named as `only`) fail."""

    def __init__(self, base: Path, only: str, code: int) -> None:
        self.base = str(base)
        self.only = only
        self.code = code
        self.hits = 0

    def check(self, target: Any, writing: bool) -> None:
        if not writing or isinstance(target, int):
            return
        path = os.path.abspath(os.fsdecode(target))
        under = path == self.base or path.startswith(self.base + os.sep)
        if under and fnmatch.fnmatch(os.path.basename(path), self.only):
            self.hits += 1
            raise OSError(self.code, os.strerror(self.code), path)


@contextlib.contextmanager
def refusing(refusal: Refusal) -> Iterator[None]:
    """`os.open`, `os.mkdir` and `open` refuse as `refusal` says while the block runs."""
    real_open, real_mkdir, real_builtin_open = os.open, os.mkdir, builtins.open
    creating = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def patched_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        refusal.check(path, bool(flags & creating))
        return real_open(path, flags, *args, **kwargs)

    def patched_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        refusal.check(path, True)
        real_mkdir(path, *args, **kwargs)

    def patched_builtin_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        refusal.check(file, any(flag in mode for flag in "wax+"))
        return real_builtin_open(file, mode, *args, **kwargs)

    os.open, os.mkdir, builtins.open = patched_open, patched_mkdir, patched_builtin_open
    try:
        yield
    finally:
        os.open, os.mkdir, builtins.open = real_open, real_mkdir, real_builtin_open


def _snapshot(root: Path) -> dict[str, str]:
    """Hashes of the files under `root` (links not followed: one may be a loop)."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                found[str(path.relative_to(root))] = hashlib.sha256(
                    path.read_bytes()).hexdigest()
    return found


def _run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capfd.readouterr()
    code = main([*argv, "--quiet"])
    return code, capfd.readouterr().err


def test_every_command_and_error_has_a_row() -> None:
    assert len(ROWS) >= 25


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_an_os_error_meets_the_contract(row: tuple[Place, Kind], workspace: Path,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    place, kind = row
    root = tmp_path / "workspace"
    shutil.copytree(workspace, root)
    monkeypatch.chdir(root)
    path = place.path if kind.real is None else f"{kind.real}/{place.path}"
    if kind.errno == errno.ELOOP:
        (root / "loop").symlink_to("loop")
    if kind.file_in_place:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("a file, not a folder\n")
    injected = kind.real is None and not kind.file_in_place
    argv = [arg.replace("{path}", path) for arg in place.argv]
    evaluations = _count_evaluations(monkeypatch)
    before = _snapshot(root)

    refusal = Refusal(root / path, place.only, kind.errno)
    with refusing(refusal) if injected else contextlib.nullcontext():
        code, stderr = _run(argv, capfd)

    assert code == kind.exit_code, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"tessera {argv[0]}: error: "), stderr
    assert path in lines[0], stderr
    if injected:
        assert refusal.hits, "the command never wrote where it was refused"
    after = _snapshot(root)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert not changed, f"changed or deleted: {changed}"
    new = sorted(name for name in set(after) - set(before)
                 if not (place.may_leave and fnmatch.fnmatch(name, place.may_leave)))
    assert not new, f"left behind: {new}"
    if argv[0] == "eval":
        assert evaluations == [], "the evaluation ran before its output was found unwritable"
    if argv[0] == "train":
        code, stderr = _run(list(EVAL), capfd)
        assert code == 0, f"the committed checkpoint no longer evaluates: {stderr}"


def _count_evaluations(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that gets an entry each time the eval command starts evaluating."""
    from tessera.evaluation import command

    calls: list[object] = []
    real = command.evaluate_checkpoint

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "evaluate_checkpoint", counted)
    return calls


def test_a_failed_reimport_keeps_the_buckets_it_was_replacing(
        workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "workspace"
    shutil.copytree(workspace, root)
    monkeypatch.chdir(root)
    with open("train.tsv", "a", encoding="utf-8") as file:
        file.write("e1000\tlikes\te1\n")  # a new entity: the dictionary is written again
    before = _snapshot(root)
    with refusing(Refusal(root / "entities", ".entity_names_*", errno.ENOSPC)):
        code, stderr = _run(list(IMPORT), capfd)
    assert code == EXIT_TRANSIENT, stderr
    after = _snapshot(root)
    assert not sorted(name for name in before if after.get(name) != before[name])
    assert sorted(set(after) - set(before)) == []  # the staged buckets are deleted too


@pytest.mark.parametrize(("error", "exit_code"), [
    (OSError(errno.ENOSPC, "No space left on device", "/data/stats.json"), EXIT_TRANSIENT),
    (PermissionError(errno.EACCES, "Permission denied", "/data/stats.json"), EXIT_BAD_INPUT),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/stats.json"),
     EXIT_BAD_INPUT),
    (OSError(errno.EBUSY, "Device or resource busy", "/data/stats.json"), EXIT_TRANSIENT),
], ids=["ENOSPC", "EACCES", "ENOENT", "unknown errno"])
def test_an_os_error_that_no_storage_call_named_is_named_by_the_command(
        error: OSError, exit_code: int, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """The last resort, for a file written outside `Directory`: still one line naming it."""
    monkeypatch.setattr(cli, "_run_config", _raising(error))
    code, stderr = _run(["config", "schema"], capfd)
    assert code == exit_code, stderr
    assert stderr.startswith("tessera config: error: /data/stats.json: "), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_an_os_error_about_no_file_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a file to name, the error is a bug's: its traceback is what helps."""
    monkeypatch.setattr(cli, "_run_config", _raising(OSError("no errno, no file")))
    with pytest.raises(OSError, match="no errno, no file"):
        main(["config", "schema", "--quiet"])


def _raising(error: BaseException) -> Any:
    def run(args: Any, reporter: Any) -> int:
        raise error
    return run
