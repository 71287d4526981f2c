"""Storage failures on a real S3 server: outages are waited out inside `Directory`, a spent
budget is one TransientError line, refused credentials and missing buckets are bad input."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)
from support.s3_server import S3_BUCKET, WeedServer

from tessera.errors import BadInputError, TransientError
from tessera.storage.failures import Failure, classify, credential_source
from tessera.storage.fs import REMOTE_BLOCK_SIZE, Directory
from tessera.storage.hdf5 import reading_hdf5, writing_hdf5
from tessera.storage.retry import translate_errors

OUTAGE_S = 2.0


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "..."},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def raised_from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


def wrapped(cause: BaseException, outer: type[OSError] = OSError, *args: Any) -> OSError:
    """An OSError raised from `cause`, as s3fs turns botocore's errors into OSErrors."""
    error = outer(*args)
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(("error", "expected"), [
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), Failure.TRANSIENT),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), Failure.TRANSIENT),
    (ConnectionResetError(104, "reset"), Failure.TRANSIENT),
    (wrapped(client_error("SlowDown", 503), OSError, 16, "busy"), Failure.TRANSIENT),
    (wrapped(client_error("InternalError", 500), OSError, 121, "remote"), Failure.TRANSIENT),
    (client_error("ServiceUnavailable", 503), Failure.TRANSIENT),
    (wrapped(client_error("501", 501), OSError, 38, "Not Implemented"), Failure.SETTINGS),
    (client_error("NotImplemented", 501), Failure.SETTINGS),
    (wrapped(client_error("InvalidAccessKeyId", 403), PermissionError), Failure.DENIED),
    (wrapped(client_error("SignatureDoesNotMatch", 403), PermissionError), Failure.DENIED),
    (wrapped(client_error("AccessDenied", 403), PermissionError), Failure.DENIED),
    (wrapped(client_error("NoSuchBucket", 404), FileNotFoundError), Failure.NO_BUCKET),
    (wrapped(client_error("NoSuchKey", 404), FileNotFoundError), None),
    (FileNotFoundError(2, "local"), None),
    (PermissionError(13, "local"), None),
    (OSError(28, "No space left on device"), None),
    (ValueError("a bug"), None),
    (HTTPClientError(error=TypeError("'<=' between str and int")), Failure.SETTINGS),
    (HTTPClientError(error=FileNotFoundError(2, "no CA bundle")), Failure.SETTINGS),
    (HTTPClientError(error=ConnectionResetError(104, "reset")), Failure.TRANSIENT),
    (raised_from(SSLError(endpoint_url="https://s3", error="..."),
                 ssl.SSLCertVerificationError(1, "self-signed certificate")), Failure.SETTINGS),
    (raised_from(SSLError(endpoint_url="https://s3", error="..."),
                 ssl.SSLEOFError(8, "EOF in violation of protocol")), Failure.TRANSIENT),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value))
def test_failures_are_classified_through_the_exception_chain(error: BaseException,
                                                             expected: Failure | None) -> None:
    assert classify(error) is expected


@pytest.fixture
def s3(private_s3_server: WeedServer) -> Iterator[tuple[WeedServer, dict[str, Any]]]:
    options = private_s3_server.server.storage_options()
    options["config_kwargs"] = {"read_timeout": 1, "connect_timeout": 1}
    yield private_s3_server, options


def interrupted(server: WeedServer, seconds: float, *, freeze: bool = False) -> threading.Thread:
    """Stop (or freeze) the server now and bring it back after `seconds`, in the background."""
    if freeze:
        server.freeze()
    else:
        server.stop()

    def come_back() -> None:
        time.sleep(seconds)
        server.thaw() if freeze else server.restart()

    thread = threading.Thread(target=come_back)
    thread.start()
    return thread


@pytest.mark.slow
def test_every_call_waits_out_an_outage(s3, caplog: pytest.LogCaptureFixture) -> None:
    server, options = s3
    directory = Directory(f"s3://{S3_BUCKET}/run", options, retry_timeout=30)
    for name, text in (("a.txt", "first"), ("c.txt", "12345"), ("d.txt", "doomed")):
        directory.write_text(name, text)
    calls = {  # each started while the server is down, each on its own file
        "write": lambda: directory.write_text("b.txt", "second"),
        "read": lambda: directory.read_text("a.txt"),
        "list": directory.listdir,
        "exists": lambda: directory.exists("a.txt"),
        "size": lambda: directory.size("c.txt"),
        "delete": lambda: directory.delete("d.txt"),
    }
    caplog.set_level(logging.WARNING, logger="tessera")
    comeback = interrupted(server, OUTAGE_S)
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        results = {name: future.result(timeout=60) for name, future in futures.items()}
    comeback.join()
    assert results["read"] == "first" and results["exists"] is True and results["size"] == 5
    assert {"a.txt", "c.txt"} <= set(results["list"]) <= {"a.txt", "b.txt", "c.txt", "d.txt"}
    assert directory.listdir() == ["a.txt", "b.txt", "c.txt"]
    assert directory.read_text("b.txt") == "second"
    waits = [record for record in caplog.records if record.getMessage() == "waiting for storage"]
    waited_for = {record.fields["url"] for record in waits}  # type: ignore[attr-defined]
    assert waited_for == {f"s3://{S3_BUCKET}/run"} | {
        f"s3://{S3_BUCKET}/run/{name}" for name in ("a.txt", "b.txt", "c.txt", "d.txt")}
    assert all(0 <= record.fields["seconds_left"] <= 30  # type: ignore[attr-defined]
               for record in waits)


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [False, True], ids=["stopped", "frozen"])
def test_hdf5_reads_through_a_remote_file_wait_out_an_outage(s3, freeze: bool) -> None:
    server, options = s3
    directory = Directory(f"s3://{S3_BUCKET}/h5", options, retry_timeout=30)
    # 24 MB: more than one remote block (REMOTE_BLOCK_SIZE), so the rest is fetched later.
    values = np.arange(6_000_000, dtype=np.float32).reshape(-1, 6)
    assert values.nbytes > 2 * REMOTE_BLOCK_SIZE
    with writing_hdf5(directory, "model.h5") as file:
        file.create_dataset("values", data=values, chunks=(10_000, 6))
    with reading_hdf5(directory, "model.h5") as file:
        first_rows = file["values"][:10]  # opened, and a first range fetched
        comeback = interrupted(server, OUTAGE_S, freeze=freeze)
        try:
            rest = file["values"][10:]
        finally:
            comeback.join()
    np.testing.assert_array_equal(np.concatenate([first_rows, rest]), values)


def test_a_spent_budget_is_one_transient_line_naming_the_url(s3) -> None:
    server, options = s3
    directory = Directory(f"s3://{S3_BUCKET}/gone", options, retry_timeout=2)
    server.stop()
    started = time.monotonic()
    with pytest.raises(TransientError) as raised:
        directory.read_text("checkpoint_version.txt")
    elapsed = time.monotonic() - started
    assert 2 <= elapsed < 4, elapsed  # the budget, plus at most one short attempt
    message = str(raised.value)
    assert message.startswith(f"s3://{S3_BUCKET}/gone/checkpoint_version.txt: storage "
                              "unavailable") and "\n" not in message


@pytest.mark.slow
def test_a_failed_upload_publishes_nothing_and_a_retried_one_publishes_once(s3) -> None:
    server, options = s3
    directory = Directory(f"s3://{S3_BUCKET}/up", options, retry_timeout=0.5)
    server.stop()
    with pytest.raises(TransientError), directory.writing("x.txt") as path:
        with open(path, "w") as file:
            file.write("lost")
    server.restart()
    assert directory.listdir() == []
    patient = Directory(directory.url, options, retry_timeout=30)
    comeback = interrupted(server, OUTAGE_S)
    patient.write_text("x.txt", "kept")
    comeback.join()
    assert patient.listdir() == ["x.txt"] and patient.read_text("x.txt") == "kept"


@pytest.mark.parametrize(("change", "code"), [
    ({"key": "nobody"}, "InvalidAccessKeyId"),
    ({"secret": "not-the-secret"}, "SignatureDoesNotMatch"),
])
def test_refused_credentials_are_bad_input_naming_bucket_and_source(s3_dir, change, code):
    directory = Directory(s3_dir.url, {**s3_dir.storage_options, **change}, retry_timeout=30)
    started = time.monotonic()
    with pytest.raises(BadInputError) as raised:
        directory.write_text("a.txt", "x")
    assert time.monotonic() - started < 5  # not retried
    message = str(raised.value)
    assert f"bucket '{S3_BUCKET}'" in message and code in message
    assert "storage_options key/secret" in message
    assert s3_dir.storage_options["secret"] not in message and "not-the-secret" not in message


def test_a_missing_bucket_is_bad_input_naming_it(s3_dir) -> None:
    directory = Directory("s3://no-such-bucket/run", s3_dir.storage_options, retry_timeout=30)
    with pytest.raises(BadInputError, match="bucket 'no-such-bucket' does not exist"):
        directory.read_text("entity_count_node_0.txt")


def test_the_credential_source_is_named_never_the_secret(monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    assert credential_source({"key": "k", "secret": "s3cr3t"}) == "storage_options key/secret"
    assert credential_source({"profile": "prod"}) == "profile 'prod' from storage_options"
    assert credential_source({}).startswith("the default credential chain")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    assert "AWS_ACCESS_KEY_ID" in credential_source({}) and "AKIAEXAMPLE" not in \
        credential_source({})


def test_translate_errors_keeps_missing_files_and_local_errors_as_they_are() -> None:
    with pytest.raises(FileNotFoundError), translate_errors("x"):
        raise FileNotFoundError(2, "missing")
    with pytest.raises(TransientError, match="^x: storage unavailable"), translate_errors("x"):
        raise ConnectionRefusedError(111, "refused")
