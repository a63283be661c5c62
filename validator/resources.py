"""What a validator process holds for its whole life: its key and chain client, the database
pool, the object store, the model cache and the training pools' cache. Built once per process
(lazily, thread-safe), so tasks receive only keys and re-read everything else (STYLE section 6).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from eth_account.signers.local import LocalAccount
from proofpool.validator.models import ModelCache
from proofpool.validator.training import TrainingPools
from psycopg import Connection
from psycopg_pool import ConnectionPool

from proofpool.infra.chain.accounts import load_account
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.served import ServedPools
from proofpool.infra.storage.s3 import ObjectStore

VALIDATOR_KEY_ENV = "PROOFPOOL_VALIDATOR_KEY"
"""The validator's key (hex, keystore path or env:NAME), read by every validator process."""


@dataclass
class Resources:
    settings: Settings
    account: LocalAccount
    client: ChainClient
    pool: ConnectionPool
    store: ObjectStore
    models: ModelCache
    served: ServedPools = field(default_factory=lambda: ServedPools(everything=True))
    """The pools this validator judges (`Settings.served_pools` / `served_managers`)."""
    training: TrainingPools = field(default_factory=TrainingPools)
    """Training pools' specs, parameter shapes and dataset (`proofpool.validator.training`)."""

    @property
    def address(self) -> str:
        return self.account.address

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection; the block commits on success and rolls back on error."""
        with self.pool.connection() as conn:
            yield conn

    def close(self) -> None:
        self.pool.close()


_lock = threading.Lock()


def resources() -> Resources:
    """This process's resources, built on first use (threads of one worker share them)."""
    with _lock:
        return _build_once()


@lru_cache(maxsize=1)
def _build_once() -> Resources:
    return build_resources(get_settings())


def build_resources(settings: Settings) -> Resources:
    account = load_account(None, env_var=VALIDATOR_KEY_ENV)
    client = ChainClient.from_settings(account)
    store = ObjectStore.from_settings(settings)
    pool = ConnectionPool(
        settings.database_url, min_size=1, max_size=max(2, settings.validator_concurrency + 1), open=True
    )
    models = ModelCache(
        client,
        store,
        settings.checkpoint_cache_dir.expanduser(),
        settings.validator_precision,
        relays=settings.checkpoint_relays,
    )
    served = ServedPools.configure(settings.served_pools, settings.served_managers, client.book.chain_id)
    return Resources(settings, account, client, pool, store, models, served)
