"""The orchestrator's manager key: a keystore like every other key, checked when loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eth_account import Account
from proofpool.backend.api.errors import ApiError
from proofpool.backend.orchestrator.invites import manager_account
from proofpool.backend.orchestrator.manager_key import manager_key

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.accounts import KEY_PASSWORD_ENV, encrypt_account
from proofpool.infra.config import Settings


def _settings(value: str | None) -> Settings:
    return Settings().model_copy(update={"manager_private_key": value})


def test_a_keystore_path_is_decrypted_with_the_key_password(tmp_path: Path, monkeypatch) -> None:
    manager = Account.create()
    path = tmp_path / "manager.json"
    path.write_text(json.dumps(encrypt_account(manager, "s3cret", "pbkdf2", 2)))
    monkeypatch.setenv(KEY_PASSWORD_ENV, "s3cret")
    account = manager_key(_settings(str(path)))
    assert account is not None and account.address == manager.address
    assert manager_account(_settings(str(path))).address == manager.address


def test_hex_keys_still_work_and_no_key_is_none() -> None:
    manager = Account.create()
    assert manager_key(_settings("0x" + manager.key.hex().removeprefix("0x"))).address == manager.address
    assert manager_key(_settings(None)) is None
    with pytest.raises(ApiError) as none:
        manager_account(_settings(None))
    assert none.value.status == 503


def test_a_key_that_cannot_be_loaded_is_named_without_the_key(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "manager.json"
    path.write_text(json.dumps(encrypt_account(Account.create(), "right", "pbkdf2", 2)))
    monkeypatch.setenv(KEY_PASSWORD_ENV, "wrong")
    with pytest.raises(ConfigError, match=f"PROOFPOOL_MANAGER_PRIVATE_KEY: wrong password for keystore {path}"):
        manager_key(_settings(str(path)))
    with pytest.raises(ApiError) as refused:
        manager_account(_settings(str(path)))
    assert refused.value.status == 503 and "wrong password" in str(refused.value.detail)
