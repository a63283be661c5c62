"""The indexer loop: follow the chain range by range into PostgreSQL, then dispatch the outbox.

Per range `[next_block, min(next_block + batch - 1, head - confirmations)]`, one transaction:
store the raw events (idempotent on tx hash + log index) and the headers seen, apply the new
events to the projections, queue one validation task per new `WorkSubmitted` or
`WorkBundleSubmitted`, move the cursor.
A crash anywhere leaves either all of it or none of it, so a restart resumes at the cursor with
no gap and no duplicate. Before a range is written it is checked against the stored blocks; a
mismatch is a reorg, handled by `proofpool.backend.indexer.reorg` (fork point, rollback, re-index).

Faults: a lost or restarted PostgreSQL (including `pg_terminate_backend`), an unreachable RPC
node or broker are waited out with capped exponential backoff, logging what is awaited; the
range in flight is rolled back by PostgreSQL and read again from the cursor, never skipped.
Beside the loop run two threads on their own sessions, woken after each commit: the outbox
dispatcher, and the checkpoint metrics reader (`proofpool.backend.indexer.checkpoint_metrics`:
each new checkpoint's trainer figures, verified from the store), so neither the broker nor the
store ever holds up indexing.
Only one indexer writes at a time: it holds a session advisory lock while it runs. Its sessions
are bounded (`proofpool.backend.indexer.session`): no DB call waits forever, and a session whose client is
gone is ended by the server within `session_timeout`, so its lock never outlives it for long.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
import requests
from proofpool.backend.db import chain as chain_db
from proofpool.backend.db import outbox as outbox_db
from proofpool.backend.db.outbox import OutboxTask
from proofpool.backend.indexer.checkpoint_metrics import CheckpointMetricsLoop
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.outbox import (
    SUBMISSION_EVENTS,
    Dispatcher,
    DispatchLoop,
    celery_sender,
    validation_tasks,
)
from proofpool.backend.indexer.projections import apply_events
from proofpool.backend.indexer.reorg import conflict_in_range, find_fork, roll_back, tip_conflict
from proofpool.backend.indexer.session import connect
from proofpool.backend.indexer.side_loop import SideLoop
from proofpool.backend.indexer.source import ChainMoved, ChainSource, RangeBatch, RangeRefused

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.chain.deploy import AddressBook
from proofpool.infra.config import Settings
from proofpool.infra.db import connection_error, redact
from proofpool.infra.served import ServedPools
from proofpool.infra.storage import ObjectStore

log = logging.getLogger(__name__)

SideLoopT = TypeVar("SideLoopT", bound=SideLoop)

DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
RPC_ERRORS = (requests.RequestException, ServiceUnavailable, ConnectionError, TimeoutError)
APPLICATION_NAME = "proofpool-indexer"
"""How the indexer names its PostgreSQL session (pg_stat_activity), for operators and fault drills."""


@dataclass
class IndexerStats:
    """Counters of one `Indexer.run`, for logs, the CLI and the benchmark."""

    ranges: int = 0
    blocks: int = 0
    events: int = 0
    new_events: int = 0
    tasks_queued: int = 0
    tasks_sent: int = 0
    reorgs: int = 0
    retries: int = 0
    lock_waits: int = 0
    """Times the indexer found its lock held by another session and waited."""
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "ranges": self.ranges,
            "blocks": self.blocks,
            "events": self.events,
            "new_events": self.new_events,
            "tasks_queued": self.tasks_queued,
            "tasks_sent": self.tasks_sent,
            "reorgs": self.reorgs,
            "retries": self.retries,
            "lock_waits": self.lock_waits,
            "seconds": round(time.monotonic() - self.started, 3),
        }


@dataclass(frozen=True)
class IndexerOptions:
    """How the loop runs (defaults from `Settings`: confirmations, batch size, poll interval)."""

    batch_blocks: int = 500
    confirmations: int = 0
    poll_interval: float = 1.0
    from_block: int | None = None
    """Start here instead of the cursor: re-index from an earlier block (idempotent), or set the
    first block of a fresh database. Never jumps ahead of an existing cursor (that would skip)."""
    max_backoff: float = 30.0
    session_timeout: float = 60.0
    """Seconds that bound every statement and idle transaction of the indexer's sessions and,
    on PostgreSQL 14+, how long the server keeps a silent session (and so its lock) alive.
    Must exceed `max_backoff` plus the slowest JSON-RPC call (the session idles meanwhile)."""
    served: ServedPools = field(default_factory=lambda: ServedPools(everything=True))
    """Pools whose submissions get a validation task (`Settings.served_pools` / `served_managers`);
    every submission is indexed either way."""


class Indexer:
    """Follows one deployment (`book`) on `source` into the database at `database_url`."""

    def __init__(
        self,
        source: ChainSource,
        book: AddressBook,
        database_url: str,
        options: IndexerOptions | None = None,
        dispatcher: Dispatcher | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        self.source = source
        self.book = book
        self.database_url = database_url
        self.options = options or IndexerOptions()
        self.dispatcher = dispatcher
        self.store = store
        """Where checkpoints are stored: the checkpoint metrics reader runs when it is given."""
        self.stats = IndexerStats()
        self._conn: psycopg.Connection | None = None
        self._from_block_pending = self.options.from_block
        self._span = self.options.batch_blocks

    # --- connection ---------------------------------------------------------------------------

    def _connect(self, stop: threading.Event) -> psycopg.Connection:
        """A connection holding the indexer lock; waits (with backoff) for the database and the lock."""
        delay = 0.2
        while not stop.is_set():
            try:
                conn = connect(
                    self.database_url, application_name=APPLICATION_NAME, session_timeout=self.options.session_timeout
                )
            except DB_ERRORS as exc:
                problem = (
                    connection_error(self.database_url, exc) if isinstance(exc, psycopg.OperationalError) else None
                )
                if isinstance(problem, ConfigError):  # a missing database will not appear by waiting
                    raise problem from exc
                self._wait(stop, delay, "PostgreSQL", redact(self.database_url), exc)
                delay = min(delay * 2, self.options.max_backoff)
                continue
            if chain_db.try_lock(conn):
                return conn
            holder = chain_db.lock_holder(conn)
            conn.close()
            self.stats.lock_waits += 1
            log.warning("waiting for the indexer lock", extra={"held_by_backend_pid": holder, "retry_in": delay})
            stop.wait(delay)
            delay = min(delay * 2, self.options.max_backoff)
        raise InterruptedError("stopped while connecting")

    def _wait(self, stop: threading.Event, delay: float, what: str, where: str, exc: BaseException) -> None:
        self.stats.retries += 1
        log.warning(
            f"waiting for {what}",
            extra={"at": where, "error": f"{exc.__class__.__name__}: {str(exc).strip()[:200]}", "retry_in": delay},
        )
        stop.wait(delay)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- the loop -----------------------------------------------------------------------------

    def run(self, *, once: bool = False, stop: threading.Event | None = None) -> IndexerStats:
        """Index until stopped (or, with `once`, until caught up with the chain and the outbox sent)."""
        stop = stop or threading.Event()
        delay = 0.2
        dispatch: DispatchLoop | None = None
        metrics: CheckpointMetricsLoop | None = None
        try:
            while not stop.is_set():
                for side in (dispatch, metrics):
                    if side is not None and side.error is not None:
                        raise side.error
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = self._connect(stop)
                        self._start(self._conn)
                        dispatch = dispatch or self._start_dispatch()  # once the database is known good
                        metrics = metrics or self._start_metrics()
                    progressed = self.step(self._conn)
                    for side in (dispatch, metrics):
                        if progressed and side is not None:
                            side.notify()
                    delay = 0.2
                except DB_ERRORS as exc:
                    self.close()
                    self._wait(stop, delay, "PostgreSQL", redact(self.database_url), exc)
                    delay = min(delay * 2, self.options.max_backoff)
                    continue
                except RPC_ERRORS as exc:
                    self._wait(stop, delay, "the JSON-RPC node", str(self.source.w3.provider), exc)
                    delay = min(delay * 2, self.options.max_backoff)
                    continue
                except ChainMoved as exc:
                    log.info("chain moved while reading a range; reading it again", extra={"reason": str(exc)})
                    stop.wait(min(delay, self.options.poll_interval))
                    continue
                if not progressed:
                    if once:
                        break
                    stop.wait(self.options.poll_interval)
            for side in (dispatch, metrics):
                if side is not None and not stop.is_set():
                    side.drain(stop)
        except InterruptedError:
            pass
        finally:
            self.close()
            if dispatch is not None:
                dispatch.halt()
                self.stats.tasks_sent, self.stats.retries = dispatch.sent, self.stats.retries + dispatch.retries
            if metrics is not None:
                metrics.halt()
                self.stats.retries += metrics.retries
        for side in (dispatch, metrics):
            if side is not None and side.error is not None:
                raise side.error
        log.info("indexer stopped", extra=self.stats.as_dict())
        return self.stats

    def _start_dispatch(self) -> DispatchLoop | None:
        if self.dispatcher is None:
            return None
        return self._started(DispatchLoop(self.dispatcher, self.database_url, *self._side_options()))

    def _start_metrics(self) -> CheckpointMetricsLoop | None:
        if self.store is None:
            return None
        return self._started(CheckpointMetricsLoop(self.store, self.database_url, *self._side_options()))

    def _side_options(self) -> tuple[float, float, float]:
        """A side loop's poll interval, longest backoff and session timeout: the indexer's own."""
        return self.options.poll_interval, self.options.max_backoff, self.options.session_timeout

    @staticmethod
    def _started(loop: SideLoopT) -> SideLoopT:
        loop.start()
        return loop

    def _start(self, conn: psycopg.Connection) -> None:
        """Check the cursor belongs to this chain; create it, or move it for `--from-block`."""
        chain_id = self.source.chain_id()
        if chain_id != self.book.chain_id:
            raise ConfigError(f"the RPC node serves chain {chain_id}, the address book is for {self.book.chain_id}")
        if not chain_db.schema_ready(conn):
            raise ConfigError(f"database {redact(self.database_url)} has no chain tables: run `proofpool db upgrade`")
        with conn.transaction():
            first = self._from_block_pending if self._from_block_pending is not None else self.book.deploy_block
            chain_db.init_state(conn, chain_id=chain_id, next_block=first)
            state = chain_db.get_state(conn, for_update=True)
            assert state is not None
            if state.chain_id != chain_id:
                raise ConfigError(
                    f"database {redact(self.database_url)} indexes chain {state.chain_id}, not {chain_id}: "
                    "use another database"
                )
            if self._from_block_pending is not None and self._from_block_pending < state.next_block:
                chain_db.set_cursor(conn, self._from_block_pending)
                log.info("re-indexing from an earlier block", extra={"from_block": self._from_block_pending})
            elif self._from_block_pending is not None and self._from_block_pending > state.next_block:
                log.warning(
                    "ignoring --from-block ahead of the cursor (it would skip blocks)",
                    extra={"from_block": self._from_block_pending, "cursor": state.next_block},
                )
        self._from_block_pending = None
        log.info("indexer started", extra={"chain_id": chain_id, "next_block": self._cursor(conn)})

    def _cursor(self, conn: psycopg.Connection) -> int:
        state = chain_db.get_state(conn)
        assert state is not None
        return state.next_block

    def step(self, conn: psycopg.Connection) -> bool:
        """Index one range, or handle one reorg; False when there is nothing new to do."""
        start = self._cursor(conn)
        safe = self.source.head() - self.options.confirmations
        if start > safe:
            conflict = tip_conflict(conn, self.source, start)
            if conflict is None:
                return False
            self._reorg(conn, conflict)
            return True
        end = min(start + self._span - 1, safe)
        try:
            batch = self.source.fetch_range(start, end)
        except RangeRefused as exc:
            if self._span == 1:
                raise
            self._span = max(1, self._span // 2)
            log.warning("the node refused a log range; halving it", extra={"blocks": self._span, "error": str(exc)})
            return True
        self._span = min(self.options.batch_blocks, self._span * 2)
        conflict = conflict_in_range(conn, batch)
        if conflict is not None:
            self._reorg(conn, conflict)
            return True
        self._write(conn, batch)
        return True

    def _reorg(self, conn: psycopg.Connection, conflict: int) -> None:
        fork = find_fork(conn, self.source, conflict, self.book.deploy_block)
        log.warning("reorg detected", extra={"conflict_block": conflict, "fork_block": fork})
        with conn.transaction():
            roll_back(conn, fork)
        self.stats.reorgs += 1

    def _served(self, conn: psycopg.Connection, tasks: list[OutboxTask]) -> list[OutboxTask]:
        """The tasks of served pools (pool managers read from the projection just applied)."""
        served = self.options.served
        if served.everything or not tasks:
            return tasks
        pools = sorted({int(task.args[0]) for task in tasks})
        rows = conn.execute("SELECT pool_id, manager FROM pools WHERE pool_id = ANY(%s)", (pools,)).fetchall()
        managers = {int(pool_id): manager for pool_id, manager in rows}
        kept = [task for task in tasks if served.allows(int(task.args[0]), managers.get)]
        if len(kept) < len(tasks):
            log.debug("submissions of pools not served: no validation task", extra={"skipped": len(tasks) - len(kept)})
        return kept

    def _write(self, conn: psycopg.Connection, batch: RangeBatch) -> None:
        """Everything a range changes, in one transaction (the cursor moves with the data)."""
        started = time.monotonic()
        with conn.transaction():
            state = chain_db.get_state(conn, for_update=True)
            if state is None or state.next_block != batch.start:
                raise ChainMoved(f"cursor moved to {state and state.next_block} while range {batch.start} was read")
            new = chain_db.insert_events(conn, batch.events)
            chain_db.upsert_blocks(conn, list(batch.headers.values()))
            apply_events(conn, new)
            tasks = self._served(conn, validation_tasks(new))
            outbox_db.enqueue(conn, tasks)
            chain_db.set_cursor(conn, batch.end + 1)
        for event in new:
            if event.name in SUBMISSION_EVENTS:
                log.debug(
                    "submission indexed",
                    extra={
                        "pool": event.args["poolId"],
                        "node": event.args["node"],
                        "work_key": event.args["workKey"],
                        "files": len(event.args.get("fileKeys") or ()) or 1,
                        "block": event.block_number,
                    },
                )
        self.stats.ranges += 1
        self.stats.blocks += batch.end - batch.start + 1
        self.stats.events += len(batch.events)
        self.stats.new_events += len(new)
        self.stats.tasks_queued += len(tasks)
        log.info(
            "range indexed",
            extra={
                "from_block": batch.start,
                "to_block": batch.end,
                "events": len(batch.events),
                "new_events": len(new),
                "tasks": len(tasks),
                "seconds": round(time.monotonic() - started, 3),
            },
        )


def setup_indexer(
    settings: Settings,
    *,
    dispatch: bool = True,
    from_block: int | None = None,
    batch_blocks: int | None = None,
    database_url: str | None = None,
    rpc_url: str | None = None,
    checkpoint_metrics: bool = True,
) -> Indexer:
    """An indexer for the configured chain, address book, database and broker; with
    `checkpoint_metrics`, reading checkpoints' figures from the configured object store too."""
    from proofpool.infra.broker import make_celery
    from proofpool.infra.chain.client import ChainClient

    client = ChainClient.from_settings(None, rpc_url=rpc_url or settings.rpc_url)
    dispatcher = (
        Dispatcher(
            celery_sender(make_celery(settings, "proofpool-indexer")),
            redispatch_after=settings.validation_redispatch_after,
        )
        if dispatch
        else None
    )
    options = IndexerOptions(
        batch_blocks=batch_blocks or settings.indexer_batch_blocks,
        confirmations=settings.confirmations,
        poll_interval=settings.indexer_poll_interval,
        from_block=from_block,
        served=ServedPools.configure(settings.served_pools, settings.served_managers, client.book.chain_id),
    )
    if dispatch:
        log.info("validation tasks for %s", options.served.describe())
    source = ChainSource(client.w3, FastDecoder(client.book.addresses))
    store = ObjectStore.from_settings(settings) if checkpoint_metrics else None
    return Indexer(source, client.book, database_url or settings.database_url, options, dispatcher, store)
