"""`python -m tessera_operator [--metrics-port [HOST:]PORT] [kopf run options]`: runs the
operator's kopf handlers, with its Prometheus metrics served at /metrics.

Every other argument is passed on to `kopf run` (`--namespace NS`/`--all-namespaces`,
`--standalone` or `--peering NAME`, `--liveness URL`, `--log-format json`, `--verbose`...),
which is given the handler module, so the container's command needs no knowledge of kopf.
With `--peering` and no `--priority`, the replica's priority comes from its start time
(`peering`). Credentials that cannot be used stop it at once with exit code 65 and one line
saying why (under kopf, a failed login is retried forever). The metrics port (default
`$TESSERA_METRICS_PORT`, else 8081 on every interface) must differ from kopf's liveness
port; a taken or malformed one stops the operator at start-up with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from kopf.cli import main as kopf_main

from tessera.errors import ConfigError
from tessera.metrics_address import METRICS_PORT_ENV, parse_address
from tessera.training.allocator import one_heap_for_all_threads

from . import metrics
from .connection import CredentialsError, load_login
from .peering import with_priority

HANDLERS = "tessera_operator.handlers"
PROG = "python -m tessera_operator"


def main(argv: list[str] | None = None) -> None:
    """Check the metrics address and the credentials, serve the metrics, then run
    `kopf run -m tessera_operator.handlers ARGS...` (exits with kopf's status)."""
    own = argparse.ArgumentParser(prog=PROG, add_help=False)
    own.add_argument("--metrics-port", metavar="[HOST:]PORT",
                     default=os.environ.get(METRICS_PORT_ENV) or str(metrics.DEFAULT_PORT))
    options, kopf_args = own.parse_known_args(sys.argv[1:] if argv is None else argv)
    # Before any thread starts: the threads that kopf and aiohttp start now and then (name
    # lookups, the metrics server) would each keep a heap of their own, as large as it grew.
    one_heap_for_all_threads()
    if not {"-h", "--help"} & set(kopf_args):
        try:
            address = parse_address(options.metrics_port, "--metrics-port")
            asyncio.run(load_login())
            _serve_metrics(address)
        except (ConfigError, CredentialsError) as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            sys.exit(error.exit_code)
    kopf_main(["run", "-m", HANDLERS, *with_priority(kopf_args)], prog_name=PROG)


def _serve_metrics(address: tuple[str, int]) -> None:
    try:
        metrics.serve(address)
    except OSError as error:
        raise ConfigError("--metrics-port", f"cannot listen on {address[0]}:{address[1]} "
                          f"({error.strerror}); choose another port") from error


if __name__ == "__main__":
    main()
