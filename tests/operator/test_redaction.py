"""Credentials are scrubbed from text bound for status and events; the rest is left alone."""

from __future__ import annotations

import pytest

from tessera_operator.redaction import REDACTED, has_credentials_in_url, redact

R = REDACTED
CASES = [
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", f"AWS_SECRET_ACCESS_KEY={R}"),
    ("{'key': 'AKIAIOSFODNN7EXAMPLE', 'secret': 'abc/def'}",
     f"{{'key': '{R}', 'secret': '{R}'}}"),
    ('{"token": "ya29.a0Af", "anon": false}', f'{{"token": "{R}", "anon": false}}'),
    ("password: hunter2, user: ada", f"password: {R}, user: ada"),
    ("s3://AKIAIOSFODNN7EXAMPLE:wJalr@bucket/path", f"s3://{R}@bucket/path"),
    ("GET https://b.s3.amazonaws.com/k?X-Amz-Signature=ab12&X-Amz-Expires=60",
     f"GET https://b.s3.amazonaws.com/k?X-Amz-Signature={R}&X-Amz-Expires=60"),
    ("access denied for AKIAIOSFODNN7EXAMPLE", f"access denied for {R}"),
    ("Authorization: Bearer abc.def, next", f"Authorization: {R}, next"),
    ("Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20250301, Signature=f00",
     f"Authorization: {R}, Signature={R}"),
    ("git clone https://ghp_abc123@github.com/org/repo",
     f"git clone https://{R}@github.com/org/repo"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "tessera train: error: relations[0].lhs: unknown entity type 'usr'",
    "s3://bucket/checkpoints/generation_3",
    "run 2: created 1 trainer pod(s), checkpoints in s3://b/c",
    "demo-trainer-0: OOMKilled, exit code 137",
    "tokens: 5, keys: 3",
    "spec.config.storage_options.secret: credentials must not be written in an EmbeddingJob",
])
def test_harmless_text_is_unchanged(text: str) -> None:
    assert redact(text) == text and REDACTED not in redact(text)


@pytest.mark.parametrize(("url", "has"), [
    ("s3://bucket/x", False), ("https://u:p@host/x", True), ("s3://AKIA:sec@bucket", True),
    ("https://host:9000/x", False), ("data/local/path", False),
    ("https://ghp_token@host/x", True)])
def test_credentials_in_urls(url: str, has: bool) -> None:
    assert has_credentials_in_url(url) is has
