"""Where signing keys come from: a hex string, a key file written by `proofpool keys new`,
or an environment variable. One loader so every command accepts the same forms."""

from __future__ import annotations

import json
import os
from pathlib import Path

from eth_account import Account
from eth_account.signers.local import LocalAccount

from proofpool.errors import ConfigError


def load_account(source: str | None, env_var: str = "PROOFPOOL_PRIVATE_KEY") -> LocalAccount:
    """A `LocalAccount` from `source` (0x-hex key, key file path, or `env:NAME`), else `env_var`."""
    value = source or os.environ.get(env_var)
    if not value:
        raise ConfigError(f"no key given: pass --key (hex, key file or env:NAME) or set {env_var}")
    if value.startswith("env:"):
        name = value[4:]
        value = os.environ.get(name, "")
        if not value:
            raise ConfigError(f"environment variable {name} is empty")
    path = Path(value)
    if not value.startswith("0x") and path.exists():
        try:
            value = json.loads(path.read_text())["private_key"]
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"{path} is not a proofpool key file") from exc
    try:
        return Account.from_key(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError("the key is not a valid 32-byte hex private key") from exc
