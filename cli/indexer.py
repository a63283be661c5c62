"""`proofpool indexer`: follow the chain into PostgreSQL and dispatch validations (operators)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer
from proofpool.cli.common import JsonOption, RpcOption, console, needs_extra, print_json
from proofpool.cli.logs import enable_progress_logs

from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)

DatabaseOption = Annotated[
    str | None, typer.Option("--database-url", help="PostgreSQL URL. Default: $DATABASE_URL.", show_default=False)
]


def _progress_logs() -> None:
    """Progress lines on stderr for the indexer's loggers (the CLI default level is WARNING)."""
    enable_progress_logs("proofpool.backend.indexer", "proofpool.backend.db", "proofpool.infra.db")


@app.command()
@needs_extra("backend")
def run(
    once: Annotated[bool, typer.Option("--once", help="Stop when caught up with the chain and the outbox.")] = False,
    from_block: Annotated[
        int | None,
        typer.Option(
            "--from-block",
            min=0,
            help="Start here: re-index from an earlier block (idempotent) or set a fresh database's first block. "
            "A block ahead of the cursor is ignored: it would skip blocks.",
        ),
    ] = None,
    batch_blocks: Annotated[
        int | None, typer.Option("--batch-blocks", min=1, help="Blocks per eth_getLogs range. Default: settings.")
    ] = None,
    dispatch: Annotated[
        bool, typer.Option("--dispatch/--no-dispatch", help="Send outbox tasks to Celery (the broker).")
    ] = True,
    database_url: DatabaseOption = None,
    rpc_url: RpcOption = None,
    json_out: JsonOption = False,
) -> None:
    """Index the contracts' events into PostgreSQL range by range, roll back reorgs, and send one
    validation task per new submission. Stops cleanly on SIGTERM or Ctrl-C."""
    from proofpool.backend.indexer.follow import setup_indexer

    _progress_logs()
    settings = get_settings()
    indexer = setup_indexer(
        settings,
        dispatch=dispatch,
        from_block=from_block,
        batch_blocks=batch_blocks,
        database_url=database_url,
        rpc_url=rpc_url,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stats = indexer.run(once=once, stop=stop)
    except KeyboardInterrupt:
        stop.set()
        stats = indexer.stats
    if json_out:
        print_json(stats.as_dict())
    else:
        s = stats.as_dict()
        console.print(
            f"indexed {s['new_events']} new events in {s['ranges']} ranges ({s['blocks']} blocks), "
            f"{s['tasks_sent']} tasks sent, {s['reorgs']} reorgs, {s['retries']} retries, {s['seconds']} s"
        )


@app.command()
@needs_extra("backend")
def rebuild(database_url: DatabaseOption = None) -> None:
    """Recompute every projection from the stored raw events (one transaction; the outbox is kept).
    Waits for a running indexer to stop: both would write the projections."""
    import psycopg
    from proofpool.backend.db import chain as chain_db
    from proofpool.backend.indexer.rebuild import rebuild_projections

    from proofpool.core.errors import ProofpoolError
    from proofpool.infra.db import connection_error

    _progress_logs()
    url = database_url or get_settings().database_url
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise connection_error(url, exc) from exc
    with conn:
        if not chain_db.try_lock(conn):
            raise ProofpoolError(
                f"an indexer is running (backend pid {chain_db.lock_holder(conn)}): stop it before a rebuild"
            )
        with conn.transaction():
            replayed = rebuild_projections(conn)
    console.print(f"rebuilt the projections from {replayed} events")


@app.command()
@needs_extra("backend")
def status(database_url: DatabaseOption = None, rpc_url: RpcOption = None, json_out: JsonOption = False) -> None:
    """Cursor, chain head, lag in blocks and unsent tasks."""
    import psycopg
    from proofpool.backend.db import chain as chain_db
    from proofpool.backend.db import outbox as outbox_db

    from proofpool.infra.chain.rpc import connect
    from proofpool.infra.db import connection_error

    settings = get_settings()
    url = database_url or settings.database_url
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            state = chain_db.get_state(conn)
            pending = outbox_db.count_pending(conn)
    except psycopg.OperationalError as exc:
        raise connection_error(url, exc) from exc
    head = connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout).eth.block_number
    data = {
        "chain_id": state.chain_id if state else None,
        "next_block": state.next_block if state else None,
        "head": head,
        "lag_blocks": max(0, head + 1 - state.next_block) if state else None,
        "pending_tasks": pending,
    }
    if json_out:
        print_json(data)
    elif state is None:
        console.print(f"not indexed yet (chain head {head}): run `proofpool indexer run`")
    else:
        console.print(
            f"chain {data['chain_id']}: next block {data['next_block']}, head {head}, "
            f"{data['lag_blocks']} blocks behind, {pending} tasks not yet sent"
        )
