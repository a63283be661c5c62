"""A fresh, isolated market for a guide to run against: what an operator has before following the
guide (PostgreSQL, Redis, optionally a chain and an object store), none of it shared with another
run: its own database name, Redis database, ports, home directory and working directory."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from proofpool.infra import db
from proofpool.infra.chain.anvil import advance_time, free_port, start_anvil
from proofpool.infra.chain.rpc import connect
from proofpool.infra.config import get_settings
from proofpool.infra.storage.seaweed import start_seaweed

GUIDE_REDIS_DB = 13
KEY_PASSWORD = "guide-test-password"
S3_ACCESS_KEY = "proofpool-devnet"
S3_SECRET_KEY = "proofpool-devnet-secret"
_OWN_VARIABLES = ("PROOFPOOL_", "DATABASE_URL", "REDIS_URL", "S3_", "AWS_", "XDG_", "VLLM_", "PROMETHEUS_")


@dataclass
class Stack:
    """Where the guide's market lives, and the environment its commands start from."""

    workdir: Path
    database_url: str
    redis_url: str
    backend_port: int
    metrics_port: int
    validator_metrics_port: int
    relay_ports: tuple[int, int] = (0, 0)
    rpc_url: str = ""
    s3_endpoint: str = ""
    bucket: str = "proofpool-guide"
    env: dict[str, str] = field(default_factory=dict)

    def advance_time(self, seconds: int) -> None:
        """Let `seconds` pass on the stack's chain (anvil time travel)."""
        advance_time(connect(self.rpc_url), seconds)


@contextmanager
def isolated_stack(root: Path, *, chain: bool, storage: bool) -> Iterator[Stack]:
    """A stack under `root`; `chain`/`storage`: the test starts anvil / SeaweedFS as the operator's
    existing chain and object store (a guide that starts its own leaves them False)."""
    workdir = root / "work"
    home = root / "home"
    workdir.mkdir(parents=True)
    home.mkdir()
    settings = get_settings()
    database_url = db.with_database(settings.database_url, f"proofpool_guide_{uuid.uuid4().hex[:10]}")
    redis_url = settings.redis_url.rsplit("/", 1)[0] + f"/{GUIDE_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    stack = Stack(workdir, database_url, redis_url, free_port(), free_port(), _port_pair(), (free_port(), free_port()))
    stack.env = _base_env(stack, home)
    with ExitStack() as cleanup:
        cleanup.callback(db.drop_database, database_url)
        if chain:
            anvil = cleanup.enter_context(start_anvil(log_path=root / "anvil.log"))
            stack.rpc_url = anvil.url
            stack.env["PROOFPOOL_RPC_URL"] = anvil.url
        else:
            port = free_port()
            stack.rpc_url = f"http://127.0.0.1:{port}"
            stack.env["PROOFPOOL_RPC_URL"] = stack.rpc_url
            stack.env["PROOFPOOL_ANVIL_PORT"] = str(port)
        if storage:
            store = cleanup.enter_context(
                start_seaweed(
                    root / "seaweed",
                    access_key=S3_ACCESS_KEY,
                    secret_key=S3_SECRET_KEY,
                    bucket=stack.bucket,
                    log_path=root / "seaweed.log",
                )
            )
            stack.s3_endpoint = store.endpoint_url
        else:
            stack.s3_endpoint = f"http://127.0.0.1:{free_port()}"
            stack.env["S3_ENDPOINT_URL"] = stack.s3_endpoint
            stack.env["PROOFPOOL_S3_BUCKET"] = stack.bucket
        yield stack


def _base_env(stack: Stack, home: Path) -> dict[str, str]:
    """The reader's terminal: the installed `proofpool` on PATH, a home of its own (keys, caches,
    the user data directory), PostgreSQL and Redis, a password for the keystores the guide makes
    (a reader types it at the prompt), and nothing of the caller's proofpool settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_VARIABLES)}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        HOME=str(home),
        REDIS_URL=stack.redis_url,
        DATABASE_URL=stack.database_url,
        PROOFPOOL_KEY_PASSWORD=KEY_PASSWORD,
        PROOFPOOL_BACKEND_URL=f"http://127.0.0.1:{stack.backend_port}",
        PROOFPOOL_BACKEND_PORT=str(stack.backend_port),
        PROOFPOOL_METRICS_ADDRESS=f"127.0.0.1:{stack.metrics_port}",
        PROOFPOOL_VALIDATOR_METRICS_PORT=str(stack.validator_metrics_port),
        COLUMNS="100",
        VLLM_CPU_KVCACHE_SPACE="1",
        OMP_NUM_THREADS="1",
    )
    return env


def _port_pair() -> int:
    """A free port whose successor is free too (a validator's metrics port and its sender's)."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and _free(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
