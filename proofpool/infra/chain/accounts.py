"""Where signing keys come from: a hex string, an encrypted keystore written by
`proofpool keys new`, or an environment variable. One loader so every command accepts the
same forms, and one place that knows where a keystore's password comes from.

Keystores are the standard Ethereum v3 JSON (what geth, foundry's `cast wallet` and MetaMask
export), so a key moves between tools without ever being written in plain text. The password
comes from `$PROOFPOOL_KEY_PASSWORD`, else from an interactive prompt; a process without a
terminal (a service, CI) must set the variable, and is told so.

The unencrypted key files of earlier proofpool versions (`{"address", "private_key"}`) are
refused with the command that converts them (`proofpool keys encrypt`), so a plain-text key is
never used silently.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from proofpool.core.errors import ConfigError

KEY_ENV = "PROOFPOOL_PRIVATE_KEY"
"""Default variable holding a signing key (hex, keystore path or env:NAME) when --key is not given."""
KEY_PASSWORD_ENV = "PROOFPOOL_KEY_PASSWORD"
"""Variable holding the password of keystores, for processes without a terminal."""

Kdf = Literal["scrypt", "pbkdf2"]
_HEXISH = re.compile(r"[0-9a-fA-F]+")


def load_account(
    source: str | None,
    env_var: str = KEY_ENV,
    *,
    password_env: str = KEY_PASSWORD_ENV,
) -> LocalAccount:
    """A `LocalAccount` from `source` (0x-hex key, keystore path, or `env:NAME`), else `$env_var`.

    A keystore's password is read from `$password_env`, else prompted for when stdin is a
    terminal; anything else is a `ConfigError` naming what to set. The key is never part of
    an error message.
    """
    value = _resolve(source, env_var)
    if isinstance(value, Path):
        return decrypt_keystore(value, read_keystore(value), keystore_password(value, password_env))
    try:
        return Account.from_key(value)
    except (ValueError, TypeError):
        raise ConfigError("the key is not a valid 32-byte hex private key") from None  # the cause may quote it


def account_address(source: str | None, env_var: str = KEY_ENV) -> str:
    """The address `load_account(source, env_var)` would load, without decrypting a keystore
    (read-only commands need no password)."""
    value = _resolve(source, env_var)
    if isinstance(value, Path):
        return keystore_address(value)
    return load_account(value).address


def key_location(source: str) -> str | Path:
    """The hex key or the keystore path `source` (hex, keystore path or env:NAME) names, without
    decrypting anything (for checks of where keys come from)."""
    return _resolve(source, KEY_ENV)


def _resolve(source: str | None, env_var: str) -> str | Path:
    """The hex key or the keystore path that `source` (else `$env_var`) names."""
    value = source or os.environ.get(env_var)
    if not value:
        raise ConfigError(f"no key given: pass --key (hex, keystore file or env:NAME) or set {env_var}")
    if value.startswith("env:"):
        name = value[4:]
        value = os.environ.get(name, "")
        if not value:
            raise ConfigError(f"environment variable {name} is empty")
    path = Path(value)
    if not value.startswith("0x") and path.is_file():
        return path
    if value.startswith("0x") or _HEXISH.fullmatch(value):  # a key, maybe malformed: never name it
        return value
    raise ConfigError(f"no key file {path} (and it is not a 0x-hex private key)")


def load_keystore(path: Path, password: str) -> LocalAccount:
    """The account in the keystore at `path`, decrypted with an explicit `password` (for services
    that get the password from their own configuration rather than the environment or a prompt)."""
    return decrypt_keystore(path, read_keystore(path), password)


def read_keystore(path: Path) -> dict[str, Any]:
    """The keystore JSON at `path`; a `ConfigError` for anything that is not a v3 keystore, with
    the conversion command for the unencrypted key files of earlier versions."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not a keystore file (expected Ethereum v3 JSON): {exc}") from exc
    if isinstance(data, dict) and "private_key" in data:
        raise ConfigError(
            f"{path} is an unencrypted key file of an earlier proofpool; convert it with "
            f"`proofpool keys encrypt {path} NEW_FILE` (same address), then delete it"
        )
    crypto = data.get("crypto", data.get("Crypto")) if isinstance(data, dict) else None
    if not isinstance(crypto, dict) or data.get("version") != 3:
        raise ConfigError(f"{path} is not a keystore file (expected Ethereum v3 JSON with a crypto section)")
    return data


def keystore_address(path: Path) -> str:
    """The checksummed address a keystore declares, read without decrypting it."""
    address = read_keystore(path).get("address")
    if not isinstance(address, str):
        raise ConfigError(f"keystore {path} does not name its address")
    try:
        return to_checksum_address(address if address.startswith("0x") else "0x" + address)
    except ValueError as exc:
        raise ConfigError(f"keystore {path} has a malformed address {address!r}") from exc


def decrypt_keystore(path: Path, keystore: dict[str, Any], password: str) -> LocalAccount:
    """Decrypt `keystore` (read from `path`, named in errors); a wrong password is a `ConfigError`."""
    try:
        key = Account.decrypt(keystore, password)
    except ValueError as exc:
        if "mac" in str(exc).lower():  # eth-keyfile: "MAC mismatch", the only sign of a wrong password
            raise ConfigError(f"wrong password for keystore {path}") from None
        raise ConfigError(f"{path} is not a valid keystore: {exc}") from exc
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a valid keystore: missing or malformed {exc}") from exc
    return Account.from_key(key)


def keystore_password(path: Path, password_env: str = KEY_PASSWORD_ENV) -> str:
    """The password for `path`: `$password_env`, else a prompt on a terminal, else a `ConfigError`."""
    password = password_from_env(password_env)
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise ConfigError(f"keystore {path} needs a password: set {password_env} (no terminal to ask on)")
    return getpass.getpass(f"password for keystore {path}: ")


def password_from_env(name: str) -> str | None:
    """The password in `$name`; None when unset. An empty variable is a mistake, not a password."""
    password = os.environ.get(name)
    if password is None:
        return None
    if not password:
        raise ConfigError(f"{name} is set but empty")
    return password


def encrypt_account(account: LocalAccount, password: str, kdf: Kdf = "scrypt", work: int | None = None) -> dict:
    """The v3 keystore JSON of `account`. `work` is the KDF cost (scrypt n, a power of two; pbkdf2
    iterations); None keeps eth-account's defaults (scrypt n=262144), which is what real keys get."""
    if work is not None and work < 2:
        raise ConfigError(f"KDF work must be at least 2, got {work}")
    if work is not None and kdf == "scrypt" and work & (work - 1):
        raise ConfigError(f"scrypt work (n) must be a power of two, got {work}")
    return Account.encrypt(account.key, password, kdf=kdf, iterations=work)
