"""Secrets in `storage_options` reach the storage client and nothing else.

Every command runs in-process on a small workspace whose config carries distinct secret
strings (top-level and nested in client_kwargs and config_kwargs; the local filesystem ignores
them all). The contract: no secret in any byte of any file a command writes (config.json,
preserved `epoch_N/` copies, the HDF5 `config/json` attributes, exports, metrics) nor in
anything it prints. On a real S3 server the same holds for every object of the checkpoint,
and for the error that refused credentials cause. A config read back from a checkpoint holds
"<redacted>" in their place, which is refused as a credential with one line.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import h5py
import pytest
import s3fs
from support.workspace import CONFIG as WORKSPACE
from support.workspace import IMPORT, TRAIN, build_workspace, write_config

import tessera
from tessera.cli import main
from tessera.config import parse_config
from tessera.config.redaction import (
    REDACTED,
    check_not_redacted,
    redacted,
    without_url_credentials,
)
from tessera.errors import EXIT_BAD_INPUT, ConfigError

SECRETS = {
    "key": "secret-key-4f1c9a",
    "secret": "secret-secret-b27e05",
    "token": "secret-token-93d6aa",
    "password": "secret-password-0c51f8",
    "aws_secret_access_key": "secret-aws-secret-e8a417",
    "aws_session_token": "secret-aws-session-5b903c",
    "proxy": "secret-proxy-password-7ad2e1",
    "sas_token": "secret-sas-6e04bb",
}
STORAGE_OPTIONS: dict[str, Any] = {
    "key": SECRETS["key"], "secret": SECRETS["secret"], "token": SECRETS["token"],
    "password": SECRETS["password"], "sas_token": SECRETS["sas_token"],
    "profile": "analytics", "anon": False,
    "client_kwargs": {"aws_secret_access_key": SECRETS["aws_secret_access_key"],
                      "aws_session_token": SECRETS["aws_session_token"],
                      "endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
    "config_kwargs": {"connect_timeout": 5,
                      "proxies": {"https": f"http://me:{SECRETS['proxy']}@proxy:3128"}},
}
# What checkpoints hold instead.
STORED_OPTIONS: dict[str, Any] = {
    "key": REDACTED, "secret": REDACTED, "token": REDACTED, "password": REDACTED,
    "sas_token": REDACTED, "profile": "analytics", "anon": False,
    "client_kwargs": {"aws_secret_access_key": REDACTED, "aws_session_token": REDACTED,
                      "endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
    "config_kwargs": {"connect_timeout": 5, "proxies": {"https": REDACTED}},
}
CONFIG = {**WORKSPACE, "verbose": 2, "checkpoint_preservation_interval": 1,
          "storage_options": STORAGE_OPTIONS}
INPUTS = ("config.yaml", "train.tsv", "test.tsv")  # the user's own files


def _write_config(root: Path, **changes: Any) -> None:
    write_config(root, {**CONFIG, **changes})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Imported and trained once (2 epochs, each preserved); each test works on a copy."""
    root = tmp_path_factory.mktemp("secrets")
    build_workspace(root, CONFIG)
    yield root


@pytest.fixture
def copy(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "workspace"
    shutil.copytree(workspace, root)
    monkeypatch.chdir(root)
    return root


def _leaks(data: bytes | str, secrets: list[str]) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [secret for secret in secrets if secret.encode() in raw]


def _files_leaking(root: Path, secrets: list[str]) -> dict[str, list[str]]:
    """Every file under `root` but the user's inputs whose raw bytes hold a secret."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_file() and name not in INPUTS:
            leaked = _leaks(path.read_bytes(), secrets)
            if leaked:
                found[name] = leaked
    return found


def _fresh(root: Path) -> None:
    for name in ("entities", "edges", "ckpt"):
        shutil.rmtree(root / name)


def _no_checkpoint(root: Path) -> None:
    shutil.rmtree(root / "ckpt")


def _as_is(root: Path) -> None:
    del root


def _one_value_space(root: Path) -> None:
    (root / "space.yaml").write_text("lr: {low: 0.1, high: 0.1}\n")


# command -> (argv, how the workspace is prepared first, a file the command must have written)
COMMANDS: dict[str, tuple[tuple[str, ...], Callable[[Path], None], str]] = {
    "import": (IMPORT, _fresh, "entities/entity_count_node_0.txt"),
    "train": (TRAIN, _no_checkpoint, "ckpt/epoch_2/config.json"),
    "resume": ((*TRAIN, "-p", "num_epochs=3"), _as_is, "ckpt/epoch_3/model.v6.h5"),
    "init_path": ((*TRAIN, "-p", "checkpoint_path=grown", "-p", "init_path=ckpt"), _as_is,
                  "grown/config.json"),
    "eval": (("eval", "config.yaml", "-p", "edge_paths=edges/test", "--output", "m.json"),
             _as_is, "m.json"),
    "export": (("export", "config.yaml", "exported"), _as_is, "exported"),
    "neighbors": (("neighbors", "config.yaml", "e1", "--json"), _as_is, "ckpt/config.json"),
    "config check": (("config", "check", "config.yaml"), _as_is, "config.yaml"),
    "tune": (("tune", *TRAIN[1:], "--valid", "edges/test", "--space", "space.yaml",
              "--trials", "1"), _one_value_space, "ckpt/tune/refit.yaml"),
}


@pytest.mark.parametrize("log_format", ["json", "human"])
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_no_command_writes_or_prints_a_secret(
        command: tuple[tuple[str, ...], Callable[[Path], None], str], log_format: str,
        copy: Path, capfd: pytest.CaptureFixture[str]) -> None:
    argv, prepare, written = command
    prepare(copy)
    capfd.readouterr()
    code = main([*argv, "--log-format", log_format])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert (copy / written).exists()
    assert not _leaks(out + err, list(SECRETS.values())), out + err
    assert not _files_leaking(copy, list(SECRETS.values()))


def test_checkpoints_hold_the_config_with_only_its_secrets_redacted(workspace: Path) -> None:
    expected = parse_config({**CONFIG, "edge_paths": ["edges/train"]}).to_dict()  # as TRAIN
    expected["storage_options"] = STORED_OPTIONS
    for folder in ("ckpt", "ckpt/epoch_1", "ckpt/epoch_2"):
        assert json.loads((workspace / folder / "config.json").read_text()) == expected
    h5_files = sorted((workspace / "ckpt").rglob("*.h5"))
    assert len(h5_files) == 3 * 3  # model and 2 partitions: the checkpoint and 2 preserved
    for path in h5_files:
        with h5py.File(path, "r") as file:
            assert json.loads(file.attrs["config/json"]) == expected, path


def test_a_config_read_back_from_a_checkpoint_is_refused_as_credentials(
        copy: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    code = main(["neighbors", "ckpt/config.json", "e1", "--quiet"])
    err = capfd.readouterr().err
    assert code == EXIT_BAD_INPUT
    lines = err.splitlines()
    assert len(lines) == 1 and "storage_options.key" in lines[0] and REDACTED in lines[0], err


def test_a_config_read_back_from_a_checkpoint_works_with_the_real_options(copy: Path) -> None:
    model = tessera.load("ckpt/config.json", storage_options=STORAGE_OPTIONS)
    assert len(model.neighbors("e1", k=3)) == 3


# Real S3: the secret-carrying options reach a server, which must accept them.

def _s3_objects(url: str, storage_options: dict[str, Any]) -> dict[str, bytes]:
    filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **storage_options)
    return {path: filesystem.cat_file(path) for path in filesystem.find(url)}


def test_training_on_s3_stores_no_secret(copy: Path, s3_dir: Any,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    secret = s3_dir.storage_options["secret"]
    checkpoints = f"{s3_dir.url}/ckpt"
    _write_config(copy, checkpoint_path=checkpoints, storage_options=s3_dir.storage_options)
    capfd.readouterr()
    for argv in (TRAIN, ("eval", "config.yaml", "-p", "edge_paths=edges/test"),
                 ("neighbors", "config.yaml", "e1"),
                 ("export", "config.yaml", f"{s3_dir.url}/exported"),
                 ("config", "check", "config.yaml")):
        assert main([*argv, "--log-format", "json"]) == 0, capfd.readouterr().err
    out, err = capfd.readouterr()
    assert secret not in out + err
    objects = _s3_objects(s3_dir.url, s3_dir.storage_options)
    assert f"{checkpoints}/epoch_2/config.json".removeprefix("s3://") in objects
    assert any(path.startswith(f"{s3_dir.url}/exported/".removeprefix("s3://"))
               for path in objects)
    assert not [path for path, data in objects.items() if _leaks(data, [secret])]
    stored = json.loads(objects[f"{checkpoints}/config.json".removeprefix("s3://")])
    assert stored["storage_options"]["secret"] == REDACTED
    assert stored["storage_options"]["client_kwargs"] == \
        s3_dir.storage_options["client_kwargs"]  # the endpoint and region stay
    assert not _files_leaking(copy, [secret])


@pytest.mark.parametrize("where", ["secret", "client_kwargs"])
def test_refused_credentials_are_reported_without_them(
        copy: Path, s3_dir: Any, where: str, capfd: pytest.CaptureFixture[str]) -> None:
    real = s3_dir.storage_options
    wrong = "wrong-secret-" + real["secret"][:8]
    options = {**real, "secret": wrong}
    if where == "client_kwargs":
        options = {"client_kwargs": {**real["client_kwargs"], "aws_access_key_id": real["key"],
                                     "aws_secret_access_key": wrong}}
    _write_config(copy, checkpoint_path=f"{s3_dir.url}/ckpt", storage_options=options,
                  storage_retry_timeout=0)
    capfd.readouterr()
    code = main([*TRAIN, "--quiet"])
    err = capfd.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert len(err.splitlines()) == 1 and "refused" in err, err
    assert not _leaks(err, [wrong, real["secret"]]), err


# The redaction itself.

def test_redaction_keeps_only_harmless_options_at_any_depth() -> None:
    config = {"dimension": 8, "storage_options": json.loads(json.dumps(STORAGE_OPTIONS))}
    config["storage_options"]["future_option"] = {"deep": {"deeper": "x"}, "n": [1, 2]}
    before = json.dumps(config, sort_keys=True)
    result = redacted(config)
    assert json.dumps(config, sort_keys=True) == before  # the input is not changed
    assert result == {"dimension": 8, "storage_options": {
        **STORED_OPTIONS, "future_option": {"deep": {"deeper": REDACTED}, "n": REDACTED}}}
    assert redacted({"dimension": 8}) == {"dimension": 8}


def test_the_marker_is_refused_where_a_credential_is_expected() -> None:
    check_not_redacted({"storage_options": STORAGE_OPTIONS, "edge_paths": ["s3://b/x@y"]})
    with pytest.raises(ConfigError) as raised:
        check_not_redacted({"storage_options": STORED_OPTIONS})
    assert raised.value.path == "storage_options.key"
    with pytest.raises(ConfigError) as raised:
        check_not_redacted({"storage_options": {"client_kwargs": {"aws_session_token": REDACTED}}})
    assert raised.value.path == "storage_options.client_kwargs.aws_session_token"
    with pytest.raises(ConfigError) as raised:
        check_not_redacted({"edge_paths": ["s3://b/train", f"s3://{REDACTED}@b/test"]})
    assert raised.value.path == "edge_paths[1]"


# Credentials written into a URL (ftp://user:password@host/...): the user's to give, and
# then as secret as storage_options.

URL_SECRET = "secret-url-password-3e9d71"


@pytest.mark.parametrize(("text", "shown"), [
    (f"s3://AKIA:{URL_SECRET}@bucket/ckpt", f"s3://{REDACTED}@bucket/ckpt"),
    (f"ftp://me@host/a and http://u:{URL_SECRET}@h:8080/b?x=1",
     f"ftp://{REDACTED}@host/a and http://{REDACTED}@h:8080/b?x=1"),
    (f'{{"path": "sftp://u:{URL_SECRET}@h/x"}}', f'{{"path": "sftp://{REDACTED}@h/x"}}'),
    ("s3://bucket/user@example.com/edges", "s3://bucket/user@example.com/edges"),
    ("http://127.0.0.1:9000/bucket", "http://127.0.0.1:9000/bucket"),
    ("mail me@host", "mail me@host"),
])
def test_a_urls_credentials_are_replaced_by_the_marker(text: str, shown: str) -> None:
    assert without_url_credentials(text) == shown


def test_redaction_takes_credentials_out_of_every_url_of_a_config() -> None:
    config = {"checkpoint_path": f"s3://k:{URL_SECRET}@b/ckpt",
              "edge_paths": ["edges/train", f"ftp://u:{URL_SECRET}@h/test"],
              "storage_options": {"endpoint_url": f"http://u:{URL_SECRET}@minio:9000"}}
    assert redacted(config) == {
        "checkpoint_path": f"s3://{REDACTED}@b/ckpt",
        "edge_paths": ["edges/train", f"ftp://{REDACTED}@h/test"],
        "storage_options": {"endpoint_url": f"http://{REDACTED}@minio:9000"}}
    with pytest.raises(ConfigError) as raised:
        parse_config({**CONFIG, "checkpoint_path": f"s3://{REDACTED}@b/ckpt",
                      "storage_options": {}})
    assert raised.value.path == "checkpoint_path"


@pytest.mark.parametrize("log_format", ["json", "human"])
def test_a_url_with_credentials_is_neither_written_nor_printed(
        copy: Path, log_format: str, capfd: pytest.CaptureFixture[str]) -> None:
    memory = fsspec.filesystem("memory")
    checkpoints = f"memory://me:{URL_SECRET}@bucket/{log_format}/ckpt"
    _write_config(copy, checkpoint_path=checkpoints, storage_options={})
    capfd.readouterr()
    assert main([*TRAIN, "--log-format", log_format]) == 0, capfd.readouterr().err
    missing = f"memory://me:{URL_SECRET}@bucket/nothing"
    code = main(["eval", "config.yaml", "-p", f"edge_paths={missing}",
                 "--log-format", log_format])
    out, err = capfd.readouterr()
    assert code == EXIT_BAD_INPUT
    assert f"memory://{REDACTED}@bucket/nothing" in err.splitlines()[-1], err
    assert f"memory://{REDACTED}@bucket/{log_format}/ckpt" in out + err  # the path is shown
    assert URL_SECRET not in out + err
    written = memory.find(f"me:{URL_SECRET}@bucket/{log_format}/ckpt")
    assert any(path.endswith("epoch_2/config.json") for path in written), written
    assert not [path for path in written if _leaks(memory.cat_file(path), [URL_SECRET])]
