"""The one settings object of proofpool, read from the environment (prefix `PROOFPOOL_`
for our own settings, plus the conventional names `DATABASE_URL`, `REDIS_URL`,
`S3_ENDPOINT_URL`).

Nothing is built at import time: call `get_settings()` where a setting is needed, so tests
can change the environment first.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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

    broker_url: str | None = None
    """Celery broker; default: REDIS_URL. RabbitMQ (amqp://) also works."""
    celery_visibility_timeout: int = Field(120, ge=5)
    """Seconds before Redis redelivers the unacknowledged task of a dead worker."""

    # --- object store ---
    s3_bucket: str = "proofpool"
    """Bucket holding rollout files and checkpoints."""
    s3_region: str = "us-east-1"
    s3_access_key: str = Field(
        "proofpool-devnet", validation_alias=AliasChoices("AWS_ACCESS_KEY_ID", "PROOFPOOL_S3_ACCESS_KEY"), repr=False
    )
    s3_secret_key: str = Field(
        "proofpool-devnet-secret",
        validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY", "PROOFPOOL_S3_SECRET_KEY"),
        repr=False,
    )
    upload_max_bytes: int = Field(64 * 1024 * 1024, ge=1)
    """Largest rollout file a node may upload."""
    upload_url_ttl: int = Field(900, ge=1)
    """Seconds a presigned upload URL stays valid."""
    upload_rate_per_minute: int = Field(30, ge=1)
    """Upload URLs one node may request per minute."""

    # --- backend ---
    backend_url: str = "http://127.0.0.1:8000"
    """Where nodes and CLIs reach the backend."""
    backend_host: str = "127.0.0.1"
    backend_port: int = Field(8000, ge=1, le=65535)
    db_pool_min: int = Field(1, ge=1)
    db_pool_max: int = Field(10, ge=1)
    signature_max_skew: int = Field(300, ge=1)
    """Seconds a signed request's timestamp may differ from the server clock."""
    request_max_bytes: int = Field(1024 * 1024, ge=1)
    """Largest JSON body the API accepts."""
    manager_private_key: str | None = Field(None, repr=False)
    """Pool manager key held by the orchestrator to sign invites and eject nodes. Never logged."""
    heartbeat_interval: float = Field(10.0, gt=0)
    """Seconds between node heartbeats."""
    unhealthy_after: float = Field(30.0, gt=0)
    """A node whose last heartbeat is older than this is Unhealthy."""
    dead_after: float = Field(120.0, gt=0)
    """A node whose last heartbeat is older than this is Dead and ejected from its pool."""
    max_unsubmitted_batches: int = Field(4, ge=1)
    """Batches of the current checkpoint a node may have been handed without an on-chain submission
    before it is handed the next: a node must answer every batch, so it cannot keep the easy ones.
    An honest node has one or two in flight (the one it generates, the one it submits)."""

    # --- worker (provider node) ---
    worker_state_dir: Path = Path("~/.local/state/proofpool/worker")
    """Journal and unsubmitted rollout files, one subdirectory per node address."""
    checkpoint_cache_dir: Path = Path("~/.cache/proofpool/checkpoints")
    """Verified checkpoint files, shared by workers and validators on one machine."""
    checkpoint_relays: Annotated[tuple[str, ...], NoDecode] = ()
    """Base URLs of checkpoint relays (`proofpool relay serve`) that workers and validators fetch
    checkpoints through, the object store being the last resort; comma-separated in
    PROOFPOOL_CHECKPOINT_RELAYS, empty by default. Relays are untrusted: what they serve is
    checked against the manifest, and the manifest against the chain."""

    # --- validator ---
    validator_sample_rate: float = Field(1.0, ge=0, le=1)
    """Fraction of submissions fully recomputed (TOPLOC + sampling); the rest get the cheap checks."""
    validator_concurrency: int = Field(1, ge=1)
    """Validation tasks run at once per validator (threads; the recomputation itself uses all cores)."""
    validator_missing_grace: float = Field(600.0, gt=0)
    """Seconds after submission a missing file is retried before it is invalidated as `missing`
    (capped at half the pool's dispute window)."""
    validator_lease: float = Field(900.0, gt=0)
    """Seconds a claimed submission stays ours without a decision before another validator may take it."""
    validator_metrics_port: int = Field(9108, ge=0, le=65535)
    """Prometheus port of the validate worker (the verdict sender uses the next one); 0 turns it off."""
    validator_precision: Literal["bf16", "fp32"] = "bf16"
    """Dtype of the recomputation (bf16 matches the workers' vLLM, fp32 is slower and as strict)."""
    async_window: int = Field(2, ge=0)
    """Accepted model versions: the pool's latest checkpoint and the `async_window` before it."""
    validator_stale_grace: float = Field(60.0, ge=0)
    """Seconds of grace for one version below the window: such a file is not stale when the latest
    checkpoint was published less than this before its submission (two checkpoints published
    seconds apart must not slash an honest node that was assigned just before them). 0: none."""
    verdict_batch: int = Field(32, ge=1, le=256)
    """Accepted keys per `attestWork` transaction."""
    verdict_max_wait: float = Field(5.0, gt=0)
    """Seconds an accepted key waits for its batch to fill before it is attested anyway."""

    # --- indexer ---
    confirmations: int = Field(0, ge=0)
    """Blocks to wait before indexing a block (0 on the devnet)."""
    indexer_batch_blocks: int = Field(500, ge=1)
    """Blocks per eth_getLogs request."""
    indexer_poll_interval: float = Field(1.0, gt=0)
    """Seconds between polls when the indexer is caught up."""

    @field_validator("checkpoint_relays", mode="before")
    @classmethod
    def _split_relays(cls, value: object) -> object:
        """A comma-separated string (the environment's form) as a tuple of checked base URLs, so a
        typo fails at start-up rather than as a relay that never answers."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple):
            return value
        from proofpool.checkpoint.sources import check_relay_url  # lazy: httpx, and only when set
        from proofpool.errors import ConfigError

        try:
            return tuple(check_relay_url(url) for url in value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc

    @property
    def celery_broker_url(self) -> str:
        """The broker Celery uses (BROKER_URL, else REDIS_URL)."""
        return self.broker_url or self.redis_url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings resolved once per process; `get_settings.cache_clear()` re-reads them."""
    return Settings()
