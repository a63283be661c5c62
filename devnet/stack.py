"""The devnet's services as real processes: a fresh anvil with the contracts and an open pool,
the indexer and the backend on a migrated database, all sharing one environment that workers
(and later validators and the trainer) are started with.

PostgreSQL, Redis and the object store are given (they run as machine services, or the caller
started SeaweedFS); everything else is started here and stopped by `close()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from proofpool.devnet.interrupt import deferred_interrupts
from proofpool.devnet.market import DEVNET_MODEL_URI, Cast, devnet_pool_params, open_market
from proofpool.devnet.services import Service, cli_environment, http_ok, spawn_cli, stop_all, wait_until

from proofpool.envs import spec_commitment
from proofpool.infra.chain.anvil import AnvilProcess, free_port, start_anvil
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts, write_address_book
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN

Say = Callable[[str], None]


@dataclass
class DevnetStack:
    """Running devnet services and the environment that points a proofpool process at them."""

    root: Path
    anvil: AnvilProcess
    admin: ChainClient
    cast: Cast
    pool_id: int
    env: dict[str, str]
    backend_url: str
    services: list[Service] = field(default_factory=list)

    def spawn(
        self, name: str, args: list[str], extra_env: Mapping[str, str] | None = None, *, nice: int = 0
    ) -> Service:
        """Start `proofpool ARGS` with the stack's environment (plus `extra_env`) at niceness `nice`,
        logging to root/NAME.log."""
        with deferred_interrupts():  # started means recorded, or `close()` would not stop it
            service = spawn_cli(name, args, {**self.env, **(extra_env or {})}, self.root / f"{name}.log", nice=nice)
            self.services.append(service)
        return service

    def restart(self, service: Service) -> Service:
        """Start a stopped (or killed) service again in its place in `services`."""
        with deferred_interrupts():
            again = service.restarted()
            self.services[self.services.index(service)] = again
        return again

    def close(self) -> None:
        """Stop every service started here (all at once, 30 s grace), then the chain; a Ctrl-C
        meanwhile does not cut this short."""
        with deferred_interrupts():
            stop_all(list(reversed(self.services)), timeout=30)
            self.anvil.stop()


def start_stack(
    root: Path,
    *,
    database_url: str,
    redis_url: str,
    s3_env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    dispatch: bool = False,
    budget: int = 1_000 * TOKEN,
    model_uri: str = DEVNET_MODEL_URI,
    say: Say = lambda _line: None,
) -> DevnetStack:
    """Start anvil (contracts deployed, pool 1 funded and started), the indexer and the backend.

    `database_url` must be migrated to head; `s3_env` points at the object store (see
    `SeaweedProcess.env`). The backend holds the pool manager's key so it can sign invites.
    With `dispatch`, the indexer sends a validation task per submission to the Celery broker
    (REDIS_URL), for validators to consume. `budget` (base units) funds the pool, created with
    `model_uri` (a `spec://` pool's spec must be in the object store already). Everything the stack
    writes is under `root`: logs, the address book, and its processes' state (`root/state`, unless
    `extra_env` names another PROOFPOOL_STATE_DIR).
    """
    root.mkdir(parents=True, exist_ok=True)
    cast = Cast()
    anvil: AnvilProcess | None = None
    stack: DevnetStack | None = None
    try:
        with deferred_interrupts():  # interrupted while waiting for it, start_anvil would leave it running
            anvil = start_anvil(log_path=root / "anvil.log")
        w3 = connect(anvil.url)
        say(f"anvil on {anvil.url}: deploying the contracts")
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        deployments = root / "deployments"
        write_address_book(book, deployments)
        admin = ChainClient.build(w3, book, cast.admin)
        params = replace(devnet_pool_params(cast), model_uri=model_uri, spec_sha256=spec_commitment(model_uri))
        pool_id = open_market(admin, cast, params, budget)
        say(f"pool {pool_id} created, funded and started")
        port = free_port()
        backend_url = f"http://127.0.0.1:{port}"
        env = cli_environment(
            {
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_url,
                "PROOFPOOL_RPC_URL": anvil.url,
                "PROOFPOOL_DEPLOYMENTS_DIR": str(deployments),
                "PROOFPOOL_STATE_DIR": str(root / "state"),  # nonce locks and the like stay with the stack
                "PROOFPOOL_BACKEND_URL": backend_url,
                "PROOFPOOL_BACKEND_PORT": str(port),
                "PROOFPOOL_INDEXER_POLL_INTERVAL": "0.1",
                "PROOFPOOL_HEARTBEAT_INTERVAL": "1",
                "PROOFPOOL_UPLOAD_RATE_PER_MINUTE": "600",
                **s3_env,
                **(extra_env or {}),
            }
        )
        stack = DevnetStack(root, anvil, admin, cast, pool_id, env, backend_url)
        indexer = stack.spawn("indexer", ["indexer", "run"] if dispatch else ["indexer", "run", "--no-dispatch"])
        backend = stack.spawn(
            "backend",
            ["backend", "serve", "--no-access-log", "--log-level", "warning"],
            {"PROOFPOOL_MANAGER_PRIVATE_KEY": cast.manager.key.hex()},
        )
        wait_until(lambda: http_ok(backend_url + "/healthz"), timeout=60, what="the backend", service=backend)
        wait_until(lambda: indexer.alive, timeout=1, what="the indexer", service=indexer)
        say(f"backend on {backend_url}, indexer following the chain")
        return stack
    except BaseException:
        if stack is not None:
            stack.close()
        elif anvil is not None:
            with deferred_interrupts():
                anvil.stop()
        raise
