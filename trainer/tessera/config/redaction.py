"""What of a config may leave the process: secrets in `storage_options` go to the storage
client and nowhere else, and so do credentials written into a URL (`ftp://user:password@host`).

Checkpoints keep their config (`config.json`, the HDF5 `config/json` attribute) and
`tessera config check` prints it, so both go through `redacted`. A storage option is kept only
when it is known to be harmless (an endpoint, a region, a profile name, a tuning knob); every
other value, at any depth, becomes REDACTED: a key that fsspec backends add later is hidden
until someone decides it is safe. A config read back from a checkpoint therefore holds the
marker where a secret was, and `check_not_redacted` refuses to hand it to a storage client.
A URL's user information is replaced by the marker in every config written and every line
printed (`without_url_credentials`): paths appear in events and error lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ConfigError

REDACTED = "<redacted>"
# The user information of a URL: after `scheme://`, up to an `@` before the first `/`.
URL_CREDENTIALS = re.compile(r"(?<=://)[^/?#@\s\"'\\]+@")

# Dotted paths of storage options whose values are written and printed as they are (a kept
# mapping is kept whole). Everything else in storage_options is redacted.
HARMLESS_STORAGE_OPTIONS = frozenset({
    # fsspec and s3fs tuning
    "anon", "use_ssl", "endpoint_url", "region_name", "profile", "requester_pays",
    "default_block_size", "default_fill_cache", "default_cache_type", "version_aware",
    "cache_regions", "max_concurrency", "fixed_upload_size", "use_listings_cache",
    "listings_expiry_time", "skip_instance_cache", "auto_mkdir",
    # gcsfs and adlfs: which project or account, not how to prove it
    "project", "consistency", "account_name",
    # botocore client arguments
    "client_kwargs.endpoint_url", "client_kwargs.region_name", "client_kwargs.use_ssl",
    "client_kwargs.verify", "client_kwargs.api_version",
    # botocore Config
    "config_kwargs.retries", "config_kwargs.connect_timeout", "config_kwargs.read_timeout",
    "config_kwargs.max_pool_connections", "config_kwargs.signature_version",
    "config_kwargs.s3", "config_kwargs.region_name",
    # per-request S3 arguments that name a policy, not a key
    "s3_additional_kwargs.ServerSideEncryption", "s3_additional_kwargs.ACL",
    "s3_additional_kwargs.StorageClass",
})


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a config mapping fit to write or print; `config` itself is left as it is."""
    copy: dict[str, Any] = _without_url_credentials(config)  # a new mapping
    if isinstance(copy.get("storage_options"), Mapping):
        copy["storage_options"] = _redact(copy["storage_options"], "")
    return copy


def without_url_credentials(text: str) -> str:
    """`text` with the user information of each URL in it replaced by REDACTED."""
    return URL_CREDENTIALS.sub(f"{REDACTED}@", text) if "://" in text else text


def _without_url_credentials(value: Any) -> Any:
    if isinstance(value, str):
        return without_url_credentials(value)
    if isinstance(value, Mapping):
        return {key: _without_url_credentials(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_url_credentials(item) for item in value]
    return value


def check_not_redacted(config: Mapping[str, Any]) -> None:
    """Refuse REDACTED as a storage option's value or a URL's credentials: it is a
    checkpoint's placeholder, not a secret, and the server would only answer "access denied"
    to it."""
    for path, value in _leaves(config.get("storage_options", {}), "storage_options"):
        if value == REDACTED:
            raise ConfigError(path, f"is {REDACTED!r}, the placeholder that checkpoints hold "
                              "instead of secrets; give the real value, or remove it and let "
                              "the credentials come from the environment")
    for path, value in _leaves(config, ""):
        if isinstance(value, str) and f"{REDACTED}@" in value:
            raise ConfigError(path, f"holds {REDACTED!r}, the placeholder that "
                              "checkpoints hold instead of a URL's credentials; give the "
                              "credentials, in the URL or in storage_options")


def _redact(options: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in options.items():
        path = f"{prefix}{key}"
        if path in HARMLESS_STORAGE_OPTIONS:
            kept[key] = value
        elif isinstance(value, Mapping):
            kept[key] = _redact(value, f"{path}.")
        else:
            kept[key] = REDACTED
    return kept


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value
