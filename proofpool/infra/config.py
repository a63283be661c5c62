"""The settings of proofpool, read from the environment (prefix `PROOFPOOL_` for our own
settings, plus the conventional names `DATABASE_URL`, `REDIS_URL`, `S3_ENDPOINT_URL`, ...).

One shared base (`CommonSettings`: chain, address books, local state, the backend's URL) and one
class per role holding what that role reads, built from a few blocks two roles share (the object
store, checkpoints, the database, the broker, the served pools):

    CommonSettings     every command and service (`pip install proofpool`)
    WorkerSettings     `proofpool worker` (checkpoints, journal)
    ValidatorSettings  `proofpool validator` (checkpoints, database, broker, served pools, verdicts)
    TrainerSettings    `proofpool trainer` (checkpoints)
    BackendSettings    `proofpool backend/indexer/db` (object store, database, broker, API, indexer)
    Settings           all of them: what `get_settings()` returns

`Settings` composes the role classes by multiple inheritance, so one object serves every caller
and an environment variable has the same name whichever role reads it.

Default paths (each overridable by its variable): local state and address books are the user's,
not the code's: they live in the user's data directory, `$XDG_DATA_HOME/proofpool`, else
`~/.local/share/proofpool` (`state/`, `deployments/`), wherever proofpool runs from; the devnet and
the tests name their own. The contracts folder is build output: from a source checkout (the folder
two levels above this package holds `pyproject.toml` and `contracts/`; an editable install counts)
the checkout's `contracts/`; installed from a wheel, `<data dir>/contracts`, the compiled contracts
then coming from the package itself (`proofpool.infra.chain.artifacts`).

Nothing is built at import time: call `get_settings()` where a setting is needed, so tests
can change the environment first.
"""

from __future__ import annotations

import os
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
"""The source checkout this package runs from (meaningful only when `FROM_CHECKOUT`)."""
FROM_CHECKOUT: Final = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "contracts").is_dir()
"""True when running from a source checkout (or an editable install of one), False from a wheel."""


def user_data_dir() -> Path:
    """`$XDG_DATA_HOME/proofpool` (an absolute XDG_DATA_HOME only, as the spec says), else
    `~/.local/share/proofpool`."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "proofpool"


def _contracts_dir() -> Path:
    """`REPO_ROOT/contracts` from a source checkout (its sources and build), else `<user data dir>/contracts`."""
    return REPO_ROOT / "contracts" if FROM_CHECKOUT else user_data_dir() / "contracts"


class CommonSettings(BaseSettings):
    """Settings every proofpool command and service reads: the chain, address books, local state
    and where the backend is."""

    model_config = SettingsConfigDict(env_prefix="PROOFPOOL_", extra="ignore", frozen=True)

    rpc_url: str = "http://127.0.0.1:8545"
    """JSON-RPC endpoint of the chain (anvil on the devnet)."""
    rpc_timeout: float = Field(10.0, gt=0)
    """Seconds before a JSON-RPC request is abandoned."""
    tx_receipt_timeout: float = Field(60.0, gt=0)
    """Seconds to wait for a transaction to be mined."""
    contracts_dir: Path = Field(default_factory=_contracts_dir)
    """Solidity sources, npm toolchain (solcjs, anvil) and the compiled `build/` folder; without a
    `build/`, the contracts compiled into the installed package are used."""
    deployments_dir: Path = Field(default_factory=lambda: user_data_dir() / "deployments")
    """Address books, one `<chain-id>.json` per chain."""
    state_dir: Path = Field(default_factory=lambda: user_data_dir() / "state")
    """Where local processes keep logs, pid files, nonce locks and data (`chain up`, `storage up`,
    devnet runs, trainer, relay); `--state-dir` on `chain` and `storage` commands."""
    anvil_port: int = Field(8545, ge=1, le=65535)
    """Port of the devnet chain started by `proofpool chain up`."""
    private_key: str | None = Field(None, repr=False)
    """Key that signs this process's transactions (hex). Never logged."""
    backend_url: str = "http://127.0.0.1:8000"
    """Where nodes and CLIs reach the backend."""


class ObjectStoreSettings(CommonSettings):
    """The S3 object store holding rollout files and checkpoints."""

    s3_endpoint_url: str = Field(
        "http://127.0.0.1:8333",
        validation_alias=AliasChoices("S3_ENDPOINT_URL", "PROOFPOOL_S3_ENDPOINT_URL"),
    )
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
    """Largest rollout file a node may upload (and a validator downloads)."""


class CheckpointSettings(ObjectStoreSettings):
    """Fetching the checkpoints a pool publishes (workers, validators, the trainer, relays)."""

    checkpoint_cache_dir: Path = Path("~/.cache/proofpool/checkpoints")
    """Verified checkpoint files, shared by workers and validators on one machine."""
    checkpoint_relays: Annotated[tuple[str, ...], NoDecode] = ()
    """Base URLs of checkpoint relays (`proofpool relay serve`) that workers and validators fetch
    checkpoints through, the object store being the last resort; comma-separated in
    PROOFPOOL_CHECKPOINT_RELAYS, empty by default. Relays are untrusted: what they serve is
    checked against the manifest, and the manifest against the chain."""
    checkpoint_max_bytes: int = Field(64 * 1024**3, ge=1)
    """Largest checkpoint (the sum of its manifest's file sizes) a worker, validator, trainer or relay
    downloads: a pool's manager publishes its manifest, and a manifest may declare any size."""
    async_window: int = Field(2, ge=0)
    """Accepted model versions: the pool's latest checkpoint and the `async_window` before it."""

    @field_validator("checkpoint_relays", mode="before")
    @classmethod
    def _split_relays(cls, value: object) -> object:
        """A comma-separated string (the environment's form) as a tuple of checked base URLs, so a
        typo fails at start-up rather than as a relay that never answers."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple):
            return value
        from proofpool.core.errors import ConfigError

        try:
            from proofpool.infra.checkpoint.sources import check_relay_url  # lazy: httpx, boto3
        except ImportError:  # a base install (no role extra) reads the settings but fetches no checkpoint
            return tuple(str(url).strip().rstrip("/") for url in value)
        try:
            return tuple(check_relay_url(url) for url in value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc


class DatabaseSettings(CommonSettings):
    """The PostgreSQL database of the backend, the indexer and the validators."""

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/proofpool",
        validation_alias=AliasChoices("DATABASE_URL", "PROOFPOOL_DATABASE_URL"),
    )


class BrokerSettings(CommonSettings):
    """Redis and the Celery broker (the indexer dispatches validation tasks, validators take them)."""

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", validation_alias=AliasChoices("REDIS_URL", "PROOFPOOL_REDIS_URL")
    )
    broker_url: str | None = None
    """Celery broker; default: REDIS_URL. RabbitMQ (amqp://) also works."""
    celery_visibility_timeout: int = Field(120, ge=5)
    """Seconds before Redis redelivers the unacknowledged task of a dead worker."""
    validation_redispatch_after: float = Field(300.0, ge=10.0)
    """Seconds after which the indexer sends a submission's validation task again when it is still
    pending on-chain and no validator holds a live claim on it: a task the broker lost (a Redis
    restart without persistence, a worker killed before its unacknowledged task was restored) is
    otherwise never judged. Keep it above `celery_visibility_timeout`; validators dedupe on the work
    key, so a task sent twice is judged once."""

    @property
    def celery_broker_url(self) -> str:
        """The broker Celery uses (BROKER_URL, else REDIS_URL)."""
        return self.broker_url or self.redis_url


class ServedPoolsSettings(CommonSettings):
    """Which pools a validator judges and an indexer dispatches validation tasks for."""

    served_pools: Annotated[tuple[int, ...], NoDecode] = ()
    """Pools this validator judges and this indexer dispatches validation tasks for (comma-separated
    ids in PROOFPOOL_SERVED_POOLS), together with those of `served_managers`. Pools are
    permissionless: without a list, anyone could create pools whose files and checkpoints every
    validator downloads. Both empty: every pool, on the devnet chain (31337) only; elsewhere the
    validator and the indexer refuse to start."""
    served_managers: Annotated[tuple[str, ...], NoDecode] = ()
    """Pool managers (addresses, comma-separated in PROOFPOOL_SERVED_MANAGERS) whose pools are served."""

    @field_validator("served_pools", mode="before")
    @classmethod
    def _split_pools(cls, value: object) -> object:
        """Comma-separated pool ids in the environment."""
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("served_managers", mode="before")
    @classmethod
    def _split_managers(cls, value: object) -> object:
        """Comma-separated addresses in the environment, checksummed (a typo fails at start-up)."""
        from eth_utils import is_address, to_checksum_address

        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple):
            return value
        bad = [str(v) for v in value if not is_address(str(v))]
        if bad:
            raise ValueError(f"not an address: {', '.join(bad)}")
        return tuple(to_checksum_address(str(v)) for v in value)


class WorkerSettings(CheckpointSettings):
    """A provider node (`proofpool worker run`)."""

    worker_state_dir: Path = Path("~/.local/state/proofpool/worker")
    """Journal and unsubmitted rollout files, one subdirectory per node address."""
    worker_reload_in_place: bool = True
    """Load a new checkpoint of the same model into the running vLLM engine (a fraction of a second)
    instead of starting a new engine (seconds); off starts a new engine for every checkpoint."""


class ValidatorSettings(CheckpointSettings, DatabaseSettings, BrokerSettings, ServedPoolsSettings):
    """A validator (`proofpool validator run`): its Celery workers and its verdict sender."""

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
    validator_stale_grace: float = Field(60.0, ge=0)
    """Seconds of grace for one version below the window: such a file is not stale when the latest
    checkpoint was published less than this before its submission (two checkpoints published
    seconds apart must not slash an honest node that was assigned just before them). 0: none."""
    verdict_batch: int = Field(32, ge=1, le=256)
    """Accepted keys per `attestWork` transaction."""
    verdict_max_wait: float = Field(1.0, gt=0)
    """Seconds an accepted key waits for its batch to fill before it is attested anyway. Short, because a
    provider waits this long to learn it will be paid; batches still fill while a transaction is being
    mined (the sender sends one at a time), and a bundle of files is one key already."""
    validator_review_interval: float = Field(15.0, gt=0)
    """Seconds between the verdict sender's looks for other validators' rejections to review (and for
    its own rejections whose challenge window closes); keep it well under the pools' challenge windows."""
    validator_min_gas_eth: Decimal = Field(Decimal("0.01"), ge=0)
    """ETH the validator key must hold for `validator run` to start (every verdict is a transaction it
    pays for); under 10x this it starts with a warning. 0 turns the check off."""


class TrainerSettings(CheckpointSettings):
    """A pool's trainer (`proofpool trainer run`): it reads accepted rollouts from the object store
    and publishes checkpoints; its state lives under `state_dir`."""


class BackendSettings(ObjectStoreSettings, DatabaseSettings, BrokerSettings, ServedPoolsSettings):
    """The operator's services: the HTTP backend (discovery, orchestrator, uploads, ledger), the
    indexer and the database migrations."""

    upload_url_ttl: int = Field(900, ge=1)
    """Seconds a presigned upload URL stays valid."""
    upload_rate_per_minute: int = Field(120, ge=1)
    """Upload URLs one node may request per minute (one per rollout file). Above the file rate of a
    default worker on a default pool (a devnet batch takes about a second: 60 a minute), so such a
    worker is never limited; a node over it waits the 429's Retry-After (docs/operator.md)."""
    backend_host: str = "127.0.0.1"
    backend_port: int = Field(8000, ge=1, le=65535)
    db_pool_min: int = Field(1, ge=1)
    db_pool_max: int = Field(10, ge=1)
    signature_max_skew: int = Field(300, ge=1)
    """Seconds a signed request's timestamp may lag the server clock: how long a signed request
    stays usable (its nonce is remembered that long, plus `signature_max_ahead`)."""
    signature_max_ahead: int = Field(5, ge=0, le=300)
    """Seconds a signed request's timestamp may lead the server clock (a client clock running
    fast). Kept small: when the nonce store starts empty (first start, Redis flushed) requests
    timestamped within this many seconds after are refused, to be signed again
    (`proofpool.infra.nonce_store`)."""
    api_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """Host[:port] values (the Host header) at which clients reach this backend; signed requests
    are bound to the host they are sent to and refused at any other. Comma-separated in
    PROOFPOOL_API_HOSTS; empty (default): the host of `backend_url`. Behind a reverse proxy, list
    the public name(s) and let the proxy pass the Host header through."""
    api_chain_id: int | None = Field(None, ge=1)
    """Chain of the deployment signed requests are bound to (with `api_pool_contract`). Unset
    (default): the chain the indexer follows (database) and its ComputePool from the address book
    in `deployments_dir`, the same facts invites are signed for."""
    api_pool_contract: str | None = None
    """ComputePool address signed requests are bound to; set together with `api_chain_id`."""
    request_max_bytes: int = Field(1024 * 1024, ge=1)
    """Largest request body the API reads, counted as it arrives (chunked bodies included)."""
    metrics_address: str = "127.0.0.1:9107"
    """HOST:PORT of the backend's Prometheus `/metrics`, a server of its own apart from the public
    API (an internal interface; every API worker process binds it with SO_REUSEPORT, and whichever
    takes a scrape answers with the counters of all: `proofpool.backend.metrics`). Port 0: any free
    port; empty: no metrics server."""
    manager_private_key: str | None = Field(None, repr=False)
    """Pool manager key held by the orchestrator to sign invites and eject nodes. Never logged."""
    heartbeat_interval: float = Field(10.0, gt=0)
    """Seconds between node heartbeats (told to each node when it joins)."""
    unhealthy_after: float = Field(30.0, gt=0)
    """A node whose last heartbeat is older than this is Unhealthy."""
    dead_after: float = Field(120.0, gt=0)
    """A node whose last heartbeat is older than this is Dead and ejected from its pool."""
    max_unsubmitted_batches: int = Field(4, ge=1)
    """Batches of the current checkpoint a node may have been handed without an on-chain submission
    before it is handed the next: a node must answer every batch, so it cannot keep the easy ones.
    An honest node has one or two in flight (the one it generates, the one it submits)."""

    # --- indexer ---
    confirmations: int = Field(0, ge=0)
    """Blocks to wait before indexing a block (0 on the devnet)."""
    indexer_batch_blocks: int = Field(500, ge=1)
    """Blocks per eth_getLogs request."""
    indexer_poll_interval: float = Field(1.0, gt=0)
    """Seconds between polls when the indexer is caught up."""

    @field_validator("api_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        """Comma-separated in the environment; each normalized as signed (lower case, no default port)."""
        from proofpool.core.auth.signed_request import normalize_host  # lazy: eth_account

        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple):
            return value
        return tuple(normalize_host(str(host)) for host in value)

    @field_validator("api_pool_contract")
    @classmethod
    def _checksum_pool(cls, value: str | None) -> str | None:
        from eth_utils import is_address, to_checksum_address

        if value is None:
            return None
        if not is_address(value):
            raise ValueError(f"not a 0x address: {value!r}")
        return to_checksum_address(value)

    @field_validator("metrics_address")
    @classmethod
    def _check_metrics_address(cls, value: str) -> str:
        value = value.strip()
        if value:
            split_host_port(value)  # raises ValueError with the reason
        return value

    @model_validator(mode="after")
    def _deployment_pair(self) -> BackendSettings:
        if (self.api_chain_id is None) != (self.api_pool_contract is None):
            raise ValueError("set PROOFPOOL_API_CHAIN_ID and PROOFPOOL_API_POOL_CONTRACT together, or neither")
        return self

    @property
    def signed_request_hosts(self) -> frozenset[str]:
        """Hosts signed requests may be sent to: `api_hosts`, else the host of `backend_url`
        (normalized again here: `model_copy(update=...)` skips the field validators)."""
        from proofpool.core.auth.signed_request import host_of_url, normalize_host

        if self.api_hosts:
            return frozenset(normalize_host(host) for host in self.api_hosts)
        return frozenset({host_of_url(self.backend_url)})

    @property
    def metrics_bind(self) -> tuple[str, int] | None:
        """(host, port) of the metrics server, None when turned off."""
        return split_host_port(self.metrics_address) if self.metrics_address else None


class Settings(WorkerSettings, ValidatorSettings, TrainerSettings, BackendSettings):
    """Every setting of every role, in one object (what `get_settings()` returns)."""


def split_host_port(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9107` for IPv6) as (host, port); `ValueError` saying what is wrong."""
    host, sep, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT with a port 0-65535, got {address!r}")
    return host, int(port)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings resolved once per process; `get_settings.cache_clear()` re-reads them."""
    return Settings()
