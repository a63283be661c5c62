"""Refusals of the devnet's conveniences on any other chain.

The devnet runs on anvil (chain 31337) with well-known keys, fixed object-store credentials and
cheap keystore encryption (tests create keystores in milliseconds). Each is fine there and a hole
anywhere else, so every service checks, at start-up and once it knows the chain, that none of
them is in use off the devnet, and names the setting to change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from eth_account import Account

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.config import Settings

MIN_SCRYPT_N: Final = 1 << 17
"""Weakest scrypt cost accepted off the devnet (`proofpool keys new` writes 2^18)."""
MIN_PBKDF2_ITERATIONS: Final = 262_144
"""Weakest PBKDF2 iteration count accepted off the devnet (eth-account writes 1,000,000)."""


def check_off_devnet(settings: Settings, chain_id: int, keys: Iterable[str | None] = ()) -> None:
    """Refuse, off the devnet chain, the devnet's object-store credentials, anvil's well-known keys
    and weakly encrypted keystores among `keys` (the key sources a service was given: hex, keystore
    path or env:NAME). Does nothing on the devnet."""
    if chain_id == DEVNET_CHAIN_ID:
        return
    defaults = Settings.model_fields
    if (
        settings.s3_access_key == defaults["s3_access_key"].default
        or settings.s3_secret_key == defaults["s3_secret_key"].default
    ):
        raise ConfigError(
            f"chain {chain_id} is not the devnet, but the object store credentials are the devnet's defaults: "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    for source in keys:
        if source:
            _check_key(source, chain_id)


def _check_key(source: str, chain_id: int) -> None:
    """A key that is not one of anvil's and, when a keystore, not cheaply encrypted."""
    from proofpool.infra.chain.accounts import key_location, read_keystore

    value = key_location(source)
    if isinstance(value, Path):
        keystore = read_keystore(value)
        weak = _weakness(keystore)
        if weak:
            raise ConfigError(
                f"chain {chain_id} is not the devnet, but keystore {value} is weakly encrypted ({weak}); "
                "re-encrypt it with `proofpool keys encrypt` (default strength)"
            )
        address = str(keystore.get("address", "")).lower().removeprefix("0x")
    else:
        try:
            address = Account.from_key(value).address.lower().removeprefix("0x")
        except (ValueError, TypeError):
            return  # malformed: the loader says so
    if address in _anvil_addresses():
        raise ConfigError(
            f"chain {chain_id} is not the devnet, but the key 0x{address} is one of anvil's well-known "
            "development keys (public): use a key of your own (`proofpool keys new`)"
        )


def _anvil_addresses() -> set[str]:
    """Lower-case hex (no 0x) of anvil's first 20 well-known accounts (the devnet uses 13)."""
    from proofpool.infra.chain.anvil import anvil_account

    return {anvil_account(i).address.lower().removeprefix("0x") for i in range(20)}


def _weakness(keystore: dict[str, Any]) -> str | None:
    """Why the keystore's KDF is too cheap, or None."""
    crypto = keystore.get("crypto", keystore.get("Crypto")) or {}
    kdf, params = crypto.get("kdf"), crypto.get("kdfparams") or {}
    if kdf == "scrypt" and int(params.get("n", 0)) < MIN_SCRYPT_N:
        return f"scrypt n={params.get('n')}, below {MIN_SCRYPT_N}"
    if kdf == "pbkdf2" and int(params.get("c", 0)) < MIN_PBKDF2_ITERATIONS:
        return f"pbkdf2 with {params.get('c')} iterations, below {MIN_PBKDF2_ITERATIONS}"
    if kdf not in ("scrypt", "pbkdf2"):
        return f"unknown kdf {json.dumps(kdf)}"
    return None
