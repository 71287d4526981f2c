"""`python -m tessera_operator [kopf run options]`: runs the operator's kopf handlers.

Every argument is passed on to `kopf run` (`--namespace NS`/`--all-namespaces`,
`--standalone` or `--peering NAME`, `--liveness URL`, `--log-format json`, `--verbose`...),
which is given the handler module, so the container's command needs no knowledge of kopf.
With `--peering` and no `--priority`, the replica's priority comes from its start time
(`peering`). Credentials that cannot be used stop it at once with exit code 65 and one line
saying why (under kopf, a failed login is retried forever).
"""

from __future__ import annotations

import asyncio
import sys

from kopf.cli import main as kopf_main

from .connection import CredentialsError, load_login
from .peering import with_priority

PROG = "python -m tessera_operator"
HANDLERS = "tessera_operator.handlers"


def main(argv: list[str] | None = None) -> None:
    """Run `kopf run -m tessera_operator.handlers ARGS...` (exits with kopf's status)."""
    args = sys.argv[1:] if argv is None else argv
    if not {"-h", "--help"} & set(args):
        try:
            asyncio.run(load_login())
        except CredentialsError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            sys.exit(error.exit_code)
    kopf_main(["run", "-m", HANDLERS, *with_priority(args)], prog_name=PROG)


if __name__ == "__main__":
    main()
