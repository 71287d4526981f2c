"""The command that runs one container of a pod as a local process, isolated the way a
container runtime would isolate it, as far as a test can without images.

The process gets a private mount and UTS namespace (`unshare --mount --uts`; the tests run as
root), in which:
- volumes are mounted at their real `mountPath` (`/etc/tessera`, `/dev/shm`, `/tmp`): bind
  mounts of staged directories (read-only where asked), or a tmpfs for a memory-backed
  emptyDir; a mount point missing on the host (`/etc/tessera`) is added by a read-only overlay
  of its parent, so the host is never written to;
- `/etc/hosts` maps the pod's and the Services' names to their addresses (127.0.0.x), and the
  host name is the pod's;
- the root filesystem is made read-only when `readOnlyRootFilesystem` asks for it;
- it runs as the securityContext's user and group, with no capabilities and no new
  privileges; directories on the way to the Python environment that such a user could not
  enter (`/root`) are shown through a view that holds only that path;
- the environment is the pod's and nothing else (plus the node's PATH).

The image is the current Python environment: `tessera` is found on PATH next to the running
interpreter. There is no network namespace: pods reach what the host's loopback offers, and
the tests give them only 127.0.0.x addresses to talk to.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_VOLUME_SIZE = "512m"


@dataclass(frozen=True)
class Mount:
    """A volume mount: a host directory or file bound at `target`, or a tmpfs (no source)."""

    target: str
    source: Path | None = None
    read_only: bool = False


@dataclass(frozen=True)
class Sandbox:
    """Everything needed to start one container."""

    argv: list[str]
    env: dict[str, str]
    hostname: str
    hosts_file: Path
    stage: Path  # a private directory for overlays and views
    mounts: list[Mount] = field(default_factory=list)
    uid: int | None = None
    gid: int | None = None
    read_only_root: bool = False
    reachable: tuple[Path, ...] = ()  # paths the container's user must be able to reach


def sandbox_command(sandbox: Sandbox) -> list[str]:
    """`unshare ... sh -ec SCRIPT` that sets the namespace up and execs the container's
    command; the command and its environment travel as arguments, never through a shell."""
    script = [f"hostname {shlex.quote(sandbox.hostname)}"]
    script += _missing_mount_points(sandbox)
    if sandbox.uid not in (None, 0):
        script += _views(sandbox)
    script += [f"mount --bind {shlex.quote(str(sandbox.hosts_file))} /etc/hosts"]
    for mount in _in_mount_order(sandbox.mounts):
        script += _mount(mount, sandbox.reachable)
    if sandbox.read_only_root:
        script.append("mount -o remount,ro,bind /")
    script.append(f"exec {_drop_privileges(sandbox)} env -i \"$@\"")
    environment = [f"{key}={value}" for key, value in sandbox.env.items()]
    return ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-ec",
            "\n".join(script), "pod-sandbox", *environment, *sandbox.argv]


def _mount(mount: Mount, reachable: tuple[Path, ...] = ()) -> list[str]:
    target = shlex.quote(mount.target)
    hidden = sorted(path.resolve() for path in reachable
              if _is_within(path.resolve(), Path(mount.target)))
    if mount.source is None:
        if hidden:
            raise ValueError(f"a memory volume at {mount.target} would hide {hidden}")
        return [f"mount -t tmpfs -o mode=1777,size={MEMORY_VOLUME_SIZE} tmpfs {target}"]
    # A volume over a directory that holds the Python environment (the project checked out
    # under /tmp): bind that path into the volume first, so it stays where it was.
    lines = []
    for path in hidden:
        inside = mount.source / path.relative_to(mount.target)
        inside.mkdir(parents=True, exist_ok=True)
        lines.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(inside))}")
    lines.append(f"mount --rbind {shlex.quote(str(mount.source))} {target}")
    if mount.read_only:
        lines.append(f"mount -o remount,ro,bind {target}")
    return lines


def _in_mount_order(mounts: list[Mount]) -> list[Mount]:
    """Mounts that would hide another mount's source (`/tmp` over staged volumes) go last."""
    def hides_a_source(mount: Mount) -> bool:
        return any(other.source is not None and _is_within(other.source, Path(mount.target))
                   for other in mounts if other is not mount)

    return sorted(mounts, key=hides_a_source)


def _missing_mount_points(sandbox: Sandbox) -> list[str]:
    """A read-only overlay on the nearest existing parent of each missing mount point, whose
    upper layer holds just the missing directories."""
    lines = []
    missing = [Path(mount.target) for mount in sandbox.mounts if not Path(mount.target).exists()]
    parents = sorted({_existing_ancestor(target) for target in missing})
    for number, parent in enumerate(parents):
        if parent == Path("/"):
            raise ValueError(f"cannot add mount points under / ({missing})")
        layer = sandbox.stage / "overlays" / str(number)
        for target in missing:
            if _existing_ancestor(target) == parent:
                (layer / target.relative_to(parent)).mkdir(parents=True, exist_ok=True)
        _open_up(layer)
        lines.append(f"mount -t overlay overlay -o lowerdir={shlex.quote(str(layer))}:"
                     f"{shlex.quote(str(parent))} {shlex.quote(str(parent))}")
    return lines


def _views(sandbox: Sandbox) -> list[str]:
    """For each directory the user cannot enter on the way to a reachable path, a view of
    it holding only the entries on those paths, bound from the real ones."""
    lines = []
    closed: dict[Path, set[str]] = {}
    for path in sandbox.reachable:
        path = path.resolve()
        for ancestor in reversed(path.parents):
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                closed.setdefault(ancestor, set()).add(path.relative_to(ancestor).parts[0])
                break
    for number, (directory, entries) in enumerate(sorted(closed.items())):
        view = sandbox.stage / "views" / str(number)
        for entry in sorted(entries):
            (view / entry).mkdir(parents=True, exist_ok=True)
            lines.append(f"mount --bind {shlex.quote(str(directory / entry))} "
                         f"{shlex.quote(str(view / entry))}")
        _open_up(view)
        lines.append(f"mount --rbind {shlex.quote(str(view))} {shlex.quote(str(directory))}")
    return lines


def _drop_privileges(sandbox: Sandbox) -> str:
    if sandbox.uid in (None, 0):
        return ""
    gid = sandbox.gid if sandbox.gid is not None else sandbox.uid
    return (f"setpriv --reuid={sandbox.uid} --regid={gid} --clear-groups --inh-caps=-all "
            "--bounding-set=-all --no-new-privs")


def _existing_ancestor(path: Path) -> Path:
    return next(parent for parent in path.parents if parent.exists())


def _is_within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _open_up(directory: Path) -> None:
    """World-readable directories, so that the container's user can enter them."""
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
