"""The pool manager key the orchestrator signs invites and ejections with.

`PROOFPOOL_MANAGER_PRIVATE_KEY` takes what every key option takes: a keystore path (the password
from `PROOFPOOL_KEY_PASSWORD`), 0x-hex, or env:NAME. A keystore is decrypted once per process (its
KDF is deliberately slow), and `backend serve` and `sweep` load it at start-up, so a wrong path or
password stops them with one line instead of failing every invite later.
"""

from __future__ import annotations

from functools import lru_cache

from eth_account.signers.local import LocalAccount

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.accounts import load_account
from proofpool.infra.config import Settings

MANAGER_KEY_ENV = "PROOFPOOL_MANAGER_PRIVATE_KEY"


def manager_key(settings: Settings) -> LocalAccount | None:
    """The manager account, or None when the backend holds no manager key. `ConfigError` for a key
    that cannot be loaded (the message names the setting, never the key)."""
    if not settings.manager_private_key:
        return None
    return _load(settings.manager_private_key)


@lru_cache(maxsize=4)
def _load(source: str) -> LocalAccount:
    try:
        return load_account(source, MANAGER_KEY_ENV)
    except ConfigError as exc:
        raise ConfigError(f"{MANAGER_KEY_ENV}: {exc}") from None
