"""`python -m tessera_operator [kopf run options]`: runs the operator's kopf handlers.

Every argument is passed on to `kopf run` (`--namespace NS`/`--all-namespaces`,
`--standalone`, `--liveness URL`, `--log-format json`, `--verbose`...), which is given the
handler module, so the container's command needs no knowledge of kopf.
"""

from __future__ import annotations

import sys

from kopf.cli import main as kopf_main

HANDLERS = "tessera_operator.handlers"


def main(argv: list[str] | None = None) -> None:
    """Run `kopf run -m tessera_operator.handlers ARGS...` (exits with kopf's status)."""
    args = sys.argv[1:] if argv is None else argv
    kopf_main(["run", "-m", HANDLERS, *args], prog_name="python -m tessera_operator")


if __name__ == "__main__":
    main()
