"""S3 outages under a running `tessera train`, as a table: which ones the run survives.

Each row starts a real S3 server of its own (SeaweedFS, the test suite's), uploads a small
planted graph, starts `tessera train` on it with everything on S3, and once the first
checkpoint is committed stops the server (SIGTERM, then a restart on the same ports and data)
or freezes it (SIGSTOP, then SIGCONT) for the given time. It prints the exit code, how many
waits the run logged, and whether the final checkpoint is complete and readable. With the
default budget (`storage_retry_timeout` 300 s) every outage below should be survived.

    python bench/bench_outages.py [--repeats 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "trainer" / "training")]

from support.s3_server import S3_BUCKET, WeedServer  # noqa: E402
from test_s3_outages import (  # noqa: E402
    NUM_CHUNKS,
    NUM_EPOCHS,
    check_committed_checkpoint,
    events,
    finish,
    s3_training_config,
    start_training,
    wait_for_first_commit,
)

from tessera.storage.checkpoint import CheckpointStore  # noqa: E402
from tessera.storage.fs import Directory  # noqa: E402


def one_outage(kind: str, seconds: float) -> tuple[int, int, int | None]:
    """(exit code, waits logged, final committed version or None)."""
    root = Path(tempfile.mkdtemp(prefix="tessera-outage-"))
    server = WeedServer(root)
    server.start()
    try:
        url = f"s3://{S3_BUCKET}/run"
        options = server.server.storage_options()
        config = s3_training_config(root, url, options)
        store = CheckpointStore(Directory(f"{url}/checkpoints", options, retry_timeout=60))
        log = root / "log"
        process = start_training(config, log)
        wait_for_first_commit(store, process)
        (server.freeze if kind == "SIGSTOP" else server.stop)()
        time.sleep(seconds)
        (server.thaw if kind == "SIGSTOP" else server.restart)()
        code = finish(process, 600)
        waits = sum(1 for record in events(log) if record.get("event") == "waiting for storage")
        return code, waits, check_committed_checkpoint(store) if code == 0 else None
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="outages of each kind")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each outage")
    args = parser.parse_args()
    expected = NUM_EPOCHS * NUM_CHUNKS
    print(f"| outage | length | exit code | waits logged | final version (of {expected}) |")
    print("|---|---|---|---|---|")
    survived = tried = 0
    for kind in ("SIGTERM", "SIGSTOP"):
        for _ in range(args.repeats):
            code, waits, final = one_outage(kind, args.seconds)
            tried += 1
            survived += code == 0 and final == expected
            print(f"| {kind} | {args.seconds:g} s | {code} | {waits} | {final} |", flush=True)
    print(f"\nsurvived {survived} of {tried}")


if __name__ == "__main__":
    main()
