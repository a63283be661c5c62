"""`proofpool backend`: run the HTTP backend and the orchestrator's sweeper (operators)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from proofpool.cli.common import JsonOption, console, needs_extra, print_json
from rich.console import Console

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.config import Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from proofpool.backend.orchestrator.sweeper import Watch

app = typer.Typer(no_args_is_help=True)


def check_services(settings: Settings) -> str:
    """Fail with a one-line reason unless PostgreSQL (migrated to head) and Redis answer.

    Checked before uvicorn starts, so an operator reads "PostgreSQL is not reachable at ..."
    instead of a lifespan traceback from every worker. Returns the schema revision.
    """
    from redis import Redis
    from redis.exceptions import RedisError

    from proofpool.infra import db

    status = db.current(settings.database_url)  # raises ServiceUnavailable / ConfigError with a hint
    if status.revision != status.head:
        raise ConfigError(
            f"database {status.name} is at revision {status.revision or 'base'}, not {status.head}: "
            "run `proofpool db upgrade`"
        )
    client = Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    except (RedisError, OSError) as exc:
        raise ServiceUnavailable(
            f"Redis is not reachable at {settings.redis_url} ({exc}); start it (e.g. `redis-server --daemonize yes`) "
            "or point REDIS_URL at a running server"
        ) from exc
    finally:
        client.close()
    return status.revision


EXPLORER_PATH = "/explorer"
"""Where `backend serve` mounts the explorer (`proofpool.explorer.app.MOUNT_PATH`)."""


def backend_with_explorer() -> FastAPI:
    """The backend app with the explorer mounted under `EXPLORER_PATH`, reading the backend's ledger
    API in-process (uvicorn's factory: each worker process builds its own)."""
    from proofpool.backend.app import create_app
    from proofpool.explorer.app import mount_explorer

    app = create_app()
    mount_explorer(app, EXPLORER_PATH)
    return app


@app.command()
@needs_extra("backend")
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind. Default: $PROOFPOOL_BACKEND_HOST.")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port to bind. Default: $PROOFPOOL_BACKEND_PORT.")
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes; about one per core (2 on the devnet machine).")
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="Log every request (costly at thousands of heartbeats/s).")] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level: debug, info, warning, error.")] = "info",
    explorer: Annotated[
        bool, typer.Option(help="Serve the explorer's pages under /explorer (read-only, over the ledger API).")
    ] = True,
) -> None:
    """Run the backend (discovery, orchestrator, uploads, ledger, /healthz) with uvicorn, and the
    explorer under /explorer; Prometheus /metrics is served apart, on PROOFPOOL_METRICS_ADDRESS (an
    internal address), summed over the worker processes."""
    import contextlib

    import uvicorn
    from proofpool.backend.metrics import multiprocess_dir
    from proofpool.backend.orchestrator.manager_key import manager_key

    settings = get_settings()
    revision = check_services(settings)
    manager = manager_key(settings)  # a key that cannot be loaded stops the start, not every invite later
    bind_host, bind_port = host or settings.backend_host, port or settings.backend_port
    console.print(
        f"backend on http://{bind_host}:{bind_port} ({workers} worker{'s' * (workers > 1)}, schema {revision}); "
        f"invites and ejections {f'enabled as manager {manager.address}' if manager else 'off: no manager key'}"
        + (f"; explorer on http://{bind_host}:{bind_port}{EXPLORER_PATH}/" if explorer else "")
    )
    # Several processes share the counters through files (`proofpool.backend.metrics`); the directory
    # must be in the environment before uvicorn spawns them, since each reads it at its first metric.
    with multiprocess_dir() if workers > 1 else contextlib.nullcontext():
        uvicorn.run(
            "proofpool.cli.backend:backend_with_explorer" if explorer else "proofpool.backend.app:create_app",
            factory=True,
            host=bind_host,
            port=bind_port,
            workers=workers,
            access_log=access_log,
            log_level=log_level,
        )


@app.command()
@needs_extra("backend")
def sweep(
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between sweeps.")] = 15.0,
    once: Annotated[bool, typer.Option("--once", help="Sweep once and exit.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report Dead members; send no transaction.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Eject Dead members (no heartbeat for $PROOFPOOL_DEAD_AFTER s) from the pools the manager key manages.

    Needs PROOFPOOL_MANAGER_PRIVATE_KEY, the database, Redis and the chain. Run one per
    deployment (a second one is harmless: a Redis claim lets only one eject each node).
    """
    import asyncio

    from proofpool.backend.orchestrator.sweeper import Ejection, run_sweeper

    settings = get_settings()
    check_services(settings)

    def started(watch: Watch) -> None:
        # Said on stderr under --json, so stdout stays one JSON object per ejection.
        (Console(stderr=True) if json_out else console).print(describe_watch(watch), highlight=False, soft_wrap=True)

    def report(ejection: Ejection) -> None:
        if json_out:
            print_json(ejection.__dict__)
            return
        silent = "never seen" if ejection.silent_for is None else f"silent {ejection.silent_for:.0f} s"
        tail = f" tx {ejection.tx_hash}" if ejection.tx_hash else f" ({ejection.reason})" if ejection.reason else ""
        console.print(f"pool {ejection.pool_id} node {ejection.node} ({silent}): {ejection.outcome}{tail}")

    try:
        asyncio.run(
            run_sweeper(settings, interval=interval, once=once, dry_run=dry_run, report=report, started=started)
        )
    except KeyboardInterrupt:
        console.print("sweeper stopped")


def describe_watch(watch: Watch) -> str:
    """The sweeper's start line: the manager key, its pools, when a member counts as dead, how often."""
    pools = ", ".join(f"{pool_id} ({status})" for pool_id, status in watch.pools.items()) or "none indexed yet"
    mode = "; dry run: reports only, sends no transaction" if watch.dry_run else ""
    return (
        f"sweeper for manager {watch.manager}: pools {pools}; ejects members silent for more than "
        f"{watch.dead_after:g} s (PROOFPOOL_DEAD_AFTER), sweeping every {watch.interval:g} s{mode}"
    )
