"""Encrypted keystores: `proofpool keys` and the one loader every command uses
(`proofpool.infra.chain.accounts.load_account`). Keystores here use a cheap pbkdf2 setting so the
tests stay fast; one test checks that the default is the expensive scrypt."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest
from eth_account import Account
from proofpool.cli import keys
from typer.testing import CliRunner

from proofpool.core.errors import ConfigError, ProofpoolError
from proofpool.infra.chain import accounts
from proofpool.infra.chain.accounts import (
    KEY_PASSWORD_ENV,
    account_address,
    encrypt_account,
    load_account,
    load_keystore,
)

PASSWORD = "correct horse battery staple"
CHEAP = ["--kdf", "pbkdf2", "--kdf-work", "2"]
KEY = "0x" + "42" * 32


class _Stdin(io.StringIO):
    """A stdin that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__("")
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts like a service: no password variable, no terminal on stdin."""
    monkeypatch.delenv(KEY_PASSWORD_ENV, raising=False)
    monkeypatch.setattr("sys.stdin", _Stdin(tty=False))


def keystore(tmp_path: Path, key: str = KEY, password: str = PASSWORD, name: str = "node.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(encrypt_account(Account.from_key(key), password, "pbkdf2", 2)))
    return path


def keys_cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(keys.app, list(args))


def test_keys_new_writes_an_owner_only_v3_keystore_that_loads_back(tmp_path, monkeypatch):
    out = tmp_path / "deep" / "node.json"
    result = keys_cli("new", str(out), *CHEAP, env={KEY_PASSWORD_ENV: PASSWORD})
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    data = json.loads(out.read_text())
    assert data["version"] == 3 and data["crypto"]["kdf"] == "pbkdf2" and "private_key" not in data

    monkeypatch.setenv(KEY_PASSWORD_ENV, PASSWORD)
    account = load_account(str(out))
    assert account.address == Account.from_key(Account.decrypt(data, PASSWORD)).address
    assert f"new key {account.address} written to {out}" in result.output
    output = " ".join(result.output.split())
    assert "node key" in output and "provider key (it holds the stake) never goes to a worker" in output
    assert f"proofpool chain fund {account.address}" in output
    assert account.key.hex().removeprefix("0x") not in result.output.replace("\n", "")
    assert PASSWORD not in result.output

    shown = keys_cli("show", str(out))
    assert shown.exit_code == 0 and shown.output.strip() == account.address


def test_keys_new_refuses_to_overwrite_without_force_and_replaces_with_it(tmp_path):
    out = tmp_path / "node.json"
    env = {KEY_PASSWORD_ENV: PASSWORD}
    assert keys_cli("new", str(out), *CHEAP, env=env).exit_code == 0
    first = out.read_text()
    refused = keys_cli("new", str(out), *CHEAP, env=env)
    assert isinstance(refused.exception, ProofpoolError) and "--force" in str(refused.exception)
    assert out.read_text() == first

    out.chmod(0o644)
    assert keys_cli("new", str(out), "--force", *CHEAP, env=env).exit_code == 0
    assert out.read_text() != first
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["node.json"]  # no temporary file left behind


def test_keys_new_reads_the_password_from_the_named_variable(tmp_path):
    out = tmp_path / "node.json"
    result = keys_cli("new", str(out), *CHEAP, "--password-env", "MY_PW", env={"MY_PW": "other"})
    assert result.exit_code == 0, result.output
    assert load_keystore(out, "other").address == account_address(str(out))


def test_keys_new_without_password_or_terminal_is_a_clear_error(tmp_path):
    result = keys_cli("new", str(tmp_path / "node.json"), *CHEAP)
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == (f"no password: set {KEY_PASSWORD_ENV}, or run in a terminal to be asked for one")
    assert not (tmp_path / "node.json").exists()


def test_default_kdf_is_scrypt_with_its_full_cost(tmp_path):
    out = tmp_path / "node.json"
    assert keys_cli("new", str(out), env={KEY_PASSWORD_ENV: PASSWORD}).exit_code == 0
    params = json.loads(out.read_text())["crypto"]
    assert params["kdf"] == "scrypt" and params["kdfparams"]["n"] == 262144


@pytest.mark.parametrize("kdf, work, message", [("scrypt", 1000, "power of two"), ("pbkdf2", 1, "at least 2")])
def test_bad_kdf_work_is_refused(kdf, work, message):
    with pytest.raises(ConfigError, match=message):
        encrypt_account(Account.from_key(KEY), PASSWORD, kdf, work)


def test_keystore_round_trip_with_env_password_and_explicit_password(tmp_path, monkeypatch):
    path = keystore(tmp_path)
    assert load_keystore(path, PASSWORD).key == Account.from_key(KEY).key
    monkeypatch.setenv(KEY_PASSWORD_ENV, PASSWORD)
    assert load_account(str(path)).key == Account.from_key(KEY).key


def test_key_sources_env_indirection_and_default_variable(tmp_path, monkeypatch):
    path = keystore(tmp_path)
    monkeypatch.setenv(KEY_PASSWORD_ENV, PASSWORD)
    monkeypatch.setenv("NODE_KEY", str(path))
    assert load_account("env:NODE_KEY").address == Account.from_key(KEY).address
    monkeypatch.setenv("PROOFPOOL_PRIVATE_KEY", KEY)
    assert load_account(None).address == Account.from_key(KEY).address
    assert load_account(None, env_var="NODE_KEY").address == Account.from_key(KEY).address


def test_wrong_password_is_a_one_line_config_error(tmp_path, monkeypatch):
    path = keystore(tmp_path)
    monkeypatch.setenv(KEY_PASSWORD_ENV, "not it")
    with pytest.raises(ConfigError) as caught:
        load_account(str(path))
    assert str(caught.value) == f"wrong password for keystore {path}"
    with pytest.raises(ConfigError, match="wrong password"):
        load_keystore(path, "")


def test_missing_password_without_terminal_names_the_variable(tmp_path):
    path = keystore(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_account(str(path))
    assert str(caught.value) == f"keystore {path} needs a password: set {KEY_PASSWORD_ENV} (no terminal to ask on)"


def test_empty_password_variable_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_PASSWORD_ENV, "")
    with pytest.raises(ConfigError, match=f"{KEY_PASSWORD_ENV} is set but empty"):
        load_account(str(keystore(tmp_path)))


def test_on_a_terminal_the_password_is_asked_for(tmp_path, monkeypatch):
    path = keystore(tmp_path)
    monkeypatch.setattr("sys.stdin", _Stdin(tty=True))
    prompts: list[str] = []
    monkeypatch.setattr(accounts.getpass, "getpass", lambda prompt: prompts.append(prompt) or PASSWORD)
    assert load_account(str(path)).address == Account.from_key(KEY).address
    assert prompts == [f"password for keystore {path}: "]


def test_address_of_a_keystore_needs_no_password(tmp_path):
    path = keystore(tmp_path)
    assert account_address(str(path)) == Account.from_key(KEY).address
    assert account_address(KEY) == Account.from_key(KEY).address


def test_old_plaintext_key_file_is_refused_with_the_conversion_command(tmp_path, monkeypatch):
    old = tmp_path / "old.key"
    account = Account.from_key(KEY)
    old.write_text(json.dumps({"address": account.address, "private_key": KEY}))
    monkeypatch.setenv(KEY_PASSWORD_ENV, PASSWORD)
    with pytest.raises(ConfigError) as caught:
        load_account(str(old))
    assert str(caught.value) == (
        f"{old} is an unencrypted key file of an earlier proofpool; convert it with "
        f"`proofpool keys encrypt {old} NEW_FILE` (same address), then delete it"
    )

    new = tmp_path / "new.json"
    result = keys_cli("encrypt", str(old), str(new), *CHEAP, env={KEY_PASSWORD_ENV: PASSWORD})
    assert result.exit_code == 0, result.output
    assert load_account(str(new)).key == account.key
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    assert "delete it" in result.output and KEY[2:] not in result.output


def test_encrypt_refuses_a_file_whose_key_does_not_match_its_address(tmp_path):
    old = tmp_path / "old.key"
    old.write_text(json.dumps({"address": "0x" + "11" * 20, "private_key": KEY}))
    result = keys_cli("encrypt", str(old), str(tmp_path / "new.json"), *CHEAP, env={KEY_PASSWORD_ENV: PASSWORD})
    assert isinstance(result.exception, ConfigError) and "but its key is" in str(result.exception)
    assert not (tmp_path / "new.json").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "is not a keystore file"),
        (json.dumps({"version": 3}), "is not a keystore file"),
        (json.dumps({"version": 3, "crypto": {"kdf": "pbkdf2"}}), "is not a valid keystore"),
    ],
)
def test_malformed_keystores_are_config_errors(tmp_path, monkeypatch, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    monkeypatch.setenv(KEY_PASSWORD_ENV, PASSWORD)
    with pytest.raises(ConfigError, match=message):
        load_account(str(path))


@pytest.mark.parametrize("source", ["0x1234", "0x" + "zz" * 32, "ab" * 31])
def test_malformed_hex_keys_are_refused_without_quoting_them(source):
    with pytest.raises(ConfigError) as caught:
        load_account(source)
    assert str(caught.value) == "the key is not a valid 32-byte hex private key"
    assert caught.value.__cause__ is None


def test_missing_key_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"no key file .*nope\.json"):
        load_account(str(tmp_path / "nope.json"))
