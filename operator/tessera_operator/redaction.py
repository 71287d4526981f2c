"""Scrubbing credentials out of text that the operator copies into status and events.

The operator never reads a Secret, so it cannot leak one it knows; what it does copy is text
produced by the training pods (termination messages, log lines) and by users (paths), and a
storage library may well print a presigned URL or an access key in an error. Every such text
passes through `redact` before it reaches the API.
"""

from __future__ import annotations

import re

from tessera.config.redaction import REDACTED, URL_CREDENTIALS, without_url_credentials

# Names under which credentials travel: environment variables, fsspec/boto keyword
# arguments, HTTP headers, query parameters of presigned URLs.
_SECRET_NAMES = (
    r"aws_secret_access_key|aws_session_token|aws_access_key_id|secret_access_key|"
    r"session_token|access_key|secret_key|account_key|sas_token|client_secret|"
    r"connection_string|private_key|password|passwd|secret|token|authorization|"
    r"x-amz-credential|x-amz-signature|x-amz-security-token|signature|credential"
)
_PATTERNS = (
    # name=value, name: value, "name": "value", 'name': 'value' (the value up to a separator);
    # not a dotted field path (`spec.storage.secretRef.password: unknown field`).
    re.compile(rf"""(?ix)(?P<name>(?<!\.)["']?\b(?:{_SECRET_NAMES})["']?\s*[:=]\s*)
                    (?P<quote>["']?)
                    (?P<value>(?:(?:Bearer|Basic|Token|AWS4-HMAC-SHA256)\s+)?[^\s"',;&}}]+)"""),
    # AWS access key ids have a recognisable shape even without a name in front.
    re.compile(r"(?P<name>)(?P<quote>)(?P<value>\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)"),
)


def redact(text: str) -> str:
    """`text` with every credential-looking value replaced by REDACTED, a URL's user
    information as the trainer replaces it."""
    text = without_url_credentials(text)
    for pattern in _PATTERNS:
        text = pattern.sub(_replacement, text)
    return text


def _replacement(match: re.Match[str]) -> str:
    return f"{match.group('name')}{match.group('quote')}{REDACTED}"


def has_credentials_in_url(url: str) -> bool:
    """Whether a URL carries user information, a password or a token (which would end up in
    a ConfigMap)."""
    return bool(URL_CREDENTIALS.search(url))
