"""A container's sandbox isolates it the way the pod asks: run for real, and looked at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from e2e.pod_sandbox import Mount, Sandbox, sandbox_command

PROBE = """
id -u
hostname
echo "$(cat /etc/tessera/config.json)"
grep -c tessera-pod /etc/hosts
touch /root-is-writable 2>/dev/null || echo root-read-only
touch /tmp/scratch && echo tmp-writable
touch /dev/shm/segment && echo shm-writable
touch /etc/tessera/new 2>/dev/null || echo config-read-only
python -c 'import sys; print(sys.prefix)'
echo "$SECRET_VALUE"
"""


def test_a_sandboxed_container_sees_its_volumes_user_and_names_only(tmp_path: Path) -> None:
    config = tmp_path / "volumes" / "config"
    config.mkdir(parents=True)
    (config / "config.json").write_text('{"dimension": 16}')
    scratch = tmp_path / "volumes" / "tmp"
    scratch.mkdir()
    scratch.chmod(0o1777)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n127.0.0.10\ttessera-pod\n")
    sandbox = Sandbox(
        argv=["sh", "-c", PROBE], env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                                       "SECRET_VALUE": "from-a-secret"},
        hostname="tessera-pod", hosts_file=hosts, stage=tmp_path / "stage",
        mounts=[Mount("/tmp", scratch), Mount("/etc/tessera", config, read_only=True),
                Mount("/dev/shm")],
        uid=10001, gid=10001, read_only_root=True,
        reachable=(Path(sys.prefix), Path(sys.base_prefix)))
    assert not Path("/etc/tessera").exists()  # added inside the sandbox only

    done = subprocess.run(sandbox_command(sandbox), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [
        "10001", "tessera-pod", '{"dimension": 16}', "1", "root-read-only", "tmp-writable",
        "shm-writable", "config-read-only", sys.prefix, "from-a-secret"]
    assert (scratch / "scratch").exists()  # the emptyDir is the pod's /tmp
    assert not Path("/etc/tessera").exists() and not Path("/root-is-writable").exists()


def test_mounts_that_would_hide_other_sources_come_last(tmp_path: Path) -> None:
    sandbox = Sandbox(argv=["true"], env={}, hostname="pod", hosts_file=tmp_path / "hosts",
                      stage=tmp_path / "stage",
                      mounts=[Mount(str(tmp_path.parent), tmp_path / "tmp"),
                              Mount("/dev/shm"), Mount("/var/cache", tmp_path / "cache")])
    command = sandbox_command(sandbox)
    script = command[command.index("-ec") + 1]
    mounts = [line.split()[-1] for line in script.splitlines() if line.startswith("mount")]
    assert mounts == ["/etc/hosts", "/dev/shm", "/var/cache", str(tmp_path.parent)]
