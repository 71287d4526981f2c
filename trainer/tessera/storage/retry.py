"""Waiting out storage outages, and the one-line errors when waiting cannot help.

A storage call that fails transiently (see `failures`) is repeated with capped exponential
backoff and jitter until it succeeds or its time budget (`storage_retry_timeout`) is spent;
each wait is logged (URL, attempt, time left). Refused credentials and missing buckets are
bad input at once: waiting will not fix them; so are local disk errors (`os_errors`), of
which only a full disk is transient, and not waited for: space is not freed by waiting.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import BadInputError, TesseraError, TransientError
from ..os_errors import classify_local
from .failures import (
    Failure,
    bucket_of,
    classify,
    credential_source,
    error_code,
    one_line,
    options_to_check,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The first wait is about FIRST_DELAY_S; each further one doubles, up to MAX_DELAY_S, so a
# server that comes back is used again within MAX_DELAY_S.
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0


def call_with_retries(location: str, operation: Callable[[], T], *, timeout: float,
                      storage_options: Mapping[str, Any]) -> T:
    """`operation()`, repeated while it fails transiently and `timeout` seconds are not spent.

    `operation` must be safe to repeat: a whole read, a whole upload, an idempotent delete.
    """
    started = time.monotonic()
    for attempt in itertools.count(1):
        try:
            return operation()
        except Exception as error:
            failure = classify(error)
            if failure is not Failure.TRANSIENT:
                final = _final_error(location, error, failure, storage_options)
                if final is None:
                    raise
                raise final from error
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                raise TransientError(
                    f"{location}: storage unavailable for {time.monotonic() - started:.0f} s "
                    f"({attempt} attempt{'s' if attempt > 1 else ''}, storage_retry_timeout="
                    f"{timeout:g}); last error: {one_line(error)}; retry when it is back"
                ) from error
            logger.warning("waiting for storage", extra={"fields": {
                "url": location, "attempt": attempt, "seconds_left": round(left, 1),
                "error": one_line(error)}})
            time.sleep(min(left, _backoff(attempt)))
    raise AssertionError("itertools.count never ends")


@contextlib.contextmanager
def translate_errors(location: str,
                     storage_options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Turn a storage failure inside the block into Tessera's error, without retrying.

    For calls that cannot be repeated (a stream being consumed); a missing file and anything
    else that is neither a storage failure nor a known local disk error keep their type.
    """
    try:
        yield
    except TesseraError:
        raise
    except Exception as error:
        failure = classify(error)
        if failure is Failure.TRANSIENT:
            raise TransientError(f"{location}: storage unavailable ({one_line(error)}); "
                                 "retry when it is back") from error
        final = _final_error(location, error, failure, storage_options or {})
        if final is None:
            raise
        raise final from error


def _final_error(location: str, error: Exception, failure: Failure | None,
                 storage_options: Mapping[str, Any]) -> TesseraError | None:
    """The one-line error for a failure that waiting cannot fix, or None to re-raise as is."""
    if failure is None:
        return classify_local(error, location)
    bucket = bucket_of(location)
    source = credential_source(storage_options)
    if failure is Failure.DENIED:
        reason = error_code(error) or type(error).__name__
        return BadInputError(f"{location}: access to bucket {bucket!r} refused ({reason}) with "
                             f"the credentials of {source}; check them and the bucket's "
                             "permissions")
    if failure is Failure.NO_BUCKET:
        return BadInputError(f"{location}: bucket {bucket!r} does not exist (credentials of "
                             f"{source}); create it or correct the path")
    if failure is Failure.SETTINGS:
        return BadInputError(f"{location}: no request can succeed with these storage settings "
                             f"({one_line(error)}); check {options_to_check(storage_options)}")
    return None


def _backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt `attempt`: doubling, capped, with jitter so that
    many workers do not all come back at the same instant."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
