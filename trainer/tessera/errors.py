"""Error types and the process exit codes they map to.

The operator reads a trainer's exit code to decide between "fix your job" (bad input: do not
retry) and "retry" (transient: storage or network trouble), so every error Tessera raises on
purpose belongs to one of these two families.
"""

from __future__ import annotations

from collections.abc import Iterator

# sysexits.h values, so the codes mean something outside Tessera too.
EXIT_OK = 0
EXIT_BAD_INPUT = 65  # EX_DATAERR: the config or the data is wrong; retrying will not help
EXIT_TRANSIENT = 75  # EX_TEMPFAIL: storage or a peer failed; retrying may help


class TesseraError(Exception):
    """Base of the errors Tessera raises on purpose."""

    exit_code = 1


class BadInputError(TesseraError):
    """The user's config, data or checkpoint is wrong; the message says where and what to do."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInputError):
    """A config key is missing, unknown, of the wrong type or inconsistent with another."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class FormatError(BadInputError):
    """A file does not follow Tessera's (and PBG's) on-disk format."""

    def __init__(self, file: str, problem: str) -> None:
        self.file = file
        self.problem = problem
        super().__init__(f"{file}: {problem}")


class TransientError(TesseraError):
    """Storage or a peer failed in a way that a later retry may not see."""

    exit_code = EXIT_TRANSIENT


def causes(error: BaseException) -> Iterator[BaseException]:
    """The error, then what caused it (explicitly or while handling), without cycles: a
    library's wrapper hides the failure that tells what to do."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__
