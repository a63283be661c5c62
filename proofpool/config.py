"""The one settings object of proofpool, read from the environment (prefix `PROOFPOOL_`
for our own settings, plus the conventional names `DATABASE_URL`, `REDIS_URL`,
`S3_ENDPOINT_URL`).

Nothing is built at import time: call `get_settings()` where a setting is needed, so tests
can change the environment first.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Settings shared by every proofpool service and command."""

    model_config = SettingsConfigDict(env_prefix="PROOFPOOL_", extra="ignore", frozen=True)

    rpc_url: str = "http://127.0.0.1:8545"
    """JSON-RPC endpoint of the chain (anvil on the devnet)."""
    rpc_timeout: float = Field(10.0, gt=0)
    """Seconds before a JSON-RPC request is abandoned."""
    tx_receipt_timeout: float = Field(60.0, gt=0)
    """Seconds to wait for a transaction to be mined."""
    contracts_dir: Path = REPO_ROOT / "contracts"
    """Solidity sources, npm toolchain and the compiled `build/` folder."""
    deployments_dir: Path = REPO_ROOT / "deployments"
    """Address books, one `<chain-id>.json` per chain."""
    state_dir: Path = REPO_ROOT / ".devnet"
    """Where devnet processes keep logs, pid files and data."""
    anvil_port: int = Field(8545, ge=1, le=65535)
    """Port of the devnet chain started by `proofpool chain up`."""
    private_key: str | None = Field(None, repr=False)
    """Key that signs this process's transactions (hex). Never logged."""

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/proofpool",
        validation_alias=AliasChoices("DATABASE_URL", "PROOFPOOL_DATABASE_URL"),
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", validation_alias=AliasChoices("REDIS_URL", "PROOFPOOL_REDIS_URL")
    )
    s3_endpoint_url: str = Field(
        "http://127.0.0.1:8333",
        validation_alias=AliasChoices("S3_ENDPOINT_URL", "PROOFPOOL_S3_ENDPOINT_URL"),
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings resolved once per process; `get_settings.cache_clear()` re-reads them."""
    return Settings()
