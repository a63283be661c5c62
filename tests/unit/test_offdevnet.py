"""The devnet's conveniences are refused on any other chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eth_account import Account

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.accounts import encrypt_account
from proofpool.infra.chain.anvil import ANVIL_KEYS, anvil_account
from proofpool.infra.config import Settings
from proofpool.infra.offdevnet import check_off_devnet

REAL = Settings().model_copy(update={"s3_access_key": "real-access", "s3_secret_key": "real-secret"})
DEVNET = Settings().model_copy(update={"s3_access_key": "proofpool-devnet", "s3_secret_key": "proofpool-devnet-secret"})


def test_the_devnet_may_use_all_of_them(tmp_path: Path) -> None:
    weak = tmp_path / "weak.json"
    weak.write_text(json.dumps(encrypt_account(Account.create(), "pw", "pbkdf2", 2)))
    check_off_devnet(DEVNET, 31337, [ANVIL_KEYS[0], str(weak)])


def test_devnet_object_store_credentials_are_refused_elsewhere() -> None:
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID"):
        check_off_devnet(DEVNET, 1)
    check_off_devnet(REAL, 1)


@pytest.mark.parametrize("index", [0, 12])
def test_anvil_keys_are_refused_elsewhere(index: int) -> None:
    key = "0x" + anvil_account(index).key.hex().removeprefix("0x")
    with pytest.raises(ConfigError, match="anvil's well-known"):
        check_off_devnet(REAL, 1, [key])


def test_weak_keystores_are_refused_elsewhere_and_strong_ones_pass(tmp_path: Path) -> None:
    weak, strong = tmp_path / "weak.json", tmp_path / "strong.json"
    weak.write_text(json.dumps(encrypt_account(Account.create(), "pw", "pbkdf2", 2)))
    strong.write_text(json.dumps(encrypt_account(Account.create(), "pw", "scrypt", 1 << 17)))
    with pytest.raises(ConfigError, match="pbkdf2 with 2 iterations"):
        check_off_devnet(REAL, 1, [str(weak)])
    check_off_devnet(REAL, 1, [str(strong), None])
