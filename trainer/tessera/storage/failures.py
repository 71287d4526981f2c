"""What a failed storage call means: an outage to wait out, or credentials or a bucket to fix.

fsspec backends raise their client library's exceptions (botocore, aiohttp) or OSErrors whose
cause is one; `classify` looks through that chain, so the rest of Tessera sees three outcomes
and the user sees one line that says what to do.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import os
import ssl
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from ..errors import causes


class Failure(enum.Enum):
    TRANSIENT = "transient"  # connection refused or reset, time-outs, 5xx, throttling
    DENIED = "denied"  # credentials refused or missing, access to the bucket denied
    NO_BUCKET = "no bucket"
    SETTINGS = "settings"  # no request can succeed with these options or this endpoint


# Error codes of S3-protocol servers (AWS, MinIO, SeaweedFS...) that a later retry may not see.
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
    "TooManyRequests", "RequestTimeout", "ServiceUnavailable", "InternalError",
    "OperationAborted"})
DENIED_CODES = frozenset({
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "AccountProblem", "AllAccessDisabled", "InvalidSecurity"})
NO_BUCKET_CODE = "NoSuchBucket"
NOT_IMPLEMENTED_CODE = "NotImplemented"


def classify(error: BaseException) -> Failure | None:
    """The kind of storage failure `error` is, or None when it is none of these (a missing
    file, a local disk error, a bug): those keep their own type."""
    if isinstance(error, FileNotFoundError):
        return Failure.NO_BUCKET if NO_BUCKET_CODE in _codes(error) else None
    if isinstance(error, PermissionError):  # remote only: a local one has no server code
        return Failure.DENIED if _codes(error) else None
    links = list(causes(error))
    if any(_refuses_its_settings(link) for link in links):
        return Failure.SETTINGS
    for link in links:
        kind = _classify_one(link)
        if kind is not None:
            return kind
    return None


def error_code(error: BaseException) -> str | None:
    """The server's error code (`InvalidAccessKeyId`...) found in the chain, if any."""
    return next(iter(_codes(error)), None)


def options_to_check(storage_options: Mapping[str, Any]) -> str:
    """Where to look when a client refuses its settings: the keys of what is handed to the
    client unchecked (client_kwargs, config_kwargs), by name, never by value."""
    given = [f"{part} {', '.join(sorted(storage_options[part]))}"
             for part in ("client_kwargs", "config_kwargs")
             if isinstance(storage_options.get(part), Mapping) and storage_options[part]]
    return f"storage_options ({'; '.join(given)})" if given else "storage_options"


def bucket_of(url: str) -> str:
    """The bucket (or host) part of an object-store URL."""
    return urlsplit(url).netloc or url


def credential_source(storage_options: Mapping[str, Any]) -> str:
    """Where the credentials came from, in words; never the credentials themselves."""
    client_kwargs = storage_options.get("client_kwargs") or {}
    if storage_options.get("anon"):
        return "anonymous access (storage_options anon)"
    if any(key in storage_options for key in ("key", "secret", "token")):
        return "storage_options key/secret"
    if "aws_access_key_id" in client_kwargs:
        return "storage_options client_kwargs aws_access_key_id/aws_secret_access_key"
    if "profile" in storage_options:
        return f"profile {storage_options['profile']!r} from storage_options"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables"
    if os.environ.get("AWS_PROFILE"):
        return f"profile {os.environ['AWS_PROFILE']!r} from AWS_PROFILE"
    return "the default credential chain (shared credentials file, instance role...)"


def one_line(error: BaseException) -> str:
    """An exception's message on one line, for messages that must stay one line."""
    return " ".join(str(error).split()) or type(error).__name__


def _classify_one(error: BaseException) -> Failure | None:
    response = getattr(error, "response", None)
    if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
        return _classify_response(response)
    if isinstance(error, _denied_types()):
        return Failure.DENIED
    if isinstance(error, _transient_types()):
        return Failure.TRANSIENT
    if type(error) is OSError and error.errno is None:  # a remote backend's bare OSError
        return Failure.TRANSIENT
    return None


def _refuses_its_settings(error: BaseException) -> bool:
    """Whether `error` is the client refusing its own settings, which no retry mends, though
    botocore wraps it as it wraps an outage (in SSLError, or in HTTPClientError, which holds
    whatever its HTTP client raised): a TLS handshake that fails on the endpoint's
    certificate or on an https URL for a plain-http server, a value of the wrong type among
    the options (`config_kwargs={"connect_timeout": "5"}`), a CA bundle that is not there."""
    if _is_http_client_error(error):
        return isinstance(getattr(error, "kwargs", {}).get("error"), _SETTINGS_ERRORS)
    return isinstance(error, ssl.SSLCertVerificationError) or (
        isinstance(error, ssl.SSLError)  # aiohttp's too, which lack `reason`
        and getattr(error, "reason", None) in _TLS_SETTINGS_REASONS)


_SETTINGS_ERRORS = (TypeError, ValueError, AttributeError, FileNotFoundError,
                    IsADirectoryError, NotADirectoryError, PermissionError)
_TLS_SETTINGS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "CERTIFICATE_VERIFY_FAILED"})


def _is_http_client_error(error: BaseException) -> bool:
    try:
        from botocore.exceptions import HTTPClientError
    except ImportError:
        return False
    return isinstance(error, HTTPClientError)


def _classify_response(response: Mapping[str, Any]) -> Failure | None:
    code = str(response["Error"].get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code == NOT_IMPLEMENTED_CODE or status == HTTPStatus.NOT_IMPLEMENTED:
        return Failure.SETTINGS  # an endpoint that is no S3 server, or lacks the request
    if code in TRANSIENT_CODES or status >= 500 or status == 429:
        return Failure.TRANSIENT
    if code in DENIED_CODES or status == 403:
        return Failure.DENIED
    if code == NO_BUCKET_CODE:
        return Failure.NO_BUCKET
    return None


def _codes(error: BaseException) -> list[str]:
    codes = []
    for link in causes(error):
        response = getattr(link, "response", None)
        if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
            codes.append(str(response["Error"].get("Code", "")))
    return codes


@functools.cache
def _transient_types() -> tuple[type[BaseException], ...]:
    # asyncio's TimeoutError (fsspec's FSTimeoutError) is the built-in one only from 3.11 on.
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, asyncio.TimeoutError]
    try:
        from botocore import exceptions as botocore_errors
        from botocore.parsers import ResponseParserError
    except ImportError:
        pass
    else:  # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, closed connections
        types += [botocore_errors.ConnectionError, botocore_errors.HTTPClientError,
                  botocore_errors.IncompleteReadError, ResponseParserError]
    try:
        import aiohttp
    except ImportError:
        pass
    else:  # refused, reset, server disconnected, a body cut short
        types += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    return tuple(types)


@functools.cache
def _denied_types() -> tuple[type[BaseException], ...]:
    try:
        from botocore import exceptions as botocore_errors
    except ImportError:
        return ()
    return (botocore_errors.NoCredentialsError, botocore_errors.PartialCredentialsError,
            botocore_errors.ProfileNotFound)
