"""`proofpool ledger verify`: rebuild the ledger from the chain alone and diff it against PostgreSQL.

The ledger the backend serves is whatever the indexer wrote. An auditor (or the devnet runner at
the end of a run) wants to know it is exactly what the chain implies, so this module rebuilds it
from nothing but the chain and compares:

1. a scratch database `<dbname>_verify_<random>` is created next to the configured one and
   migrated to head;
2. the indexer's own catch-up step (`Indexer.step`: `eth_getLogs` by range, reorg checks,
   `apply_events`) fills it from the deploy block up to the block the main database's cursor has
   reached, never further: an indexer merely behind the chain head is not a mismatch. There is no
   second projector here, so "the rebuild" cannot drift from "the indexer";
3. the raw events and every projection are read from both databases in key order (the main one
   in one REPEATABLE READ snapshot, so a running indexer cannot move it mid-compare) and merged
   row by row by `diff_rows`, a pure function;
4. the scratch database is dropped, whatever happened (errors, Ctrl-C).

Compared: `chain_events` and `PROJECTION_TABLES` (the tables a rebuild truncates), every column
but the surrogate ids and wall-clock columns in `IGNORED_COLUMNS`. Not compared: `NOT_COMPARED`
says which tables and why. Errors that make a comparison impossible (an unreachable chain or
database, the wrong chain, a database not at head) raise `ProofpoolError`; a finished comparison
always returns a `LedgerDiff`, whose `ok` is the verdict.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from proofpool.backend.db import chain as chain_db
from proofpool.backend.db.projections import PROJECTION_TABLES
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.follow import DB_ERRORS, RPC_ERRORS, Indexer, IndexerOptions
from proofpool.backend.indexer.ledger_diff import DEFAULT_LIMIT, LedgerDiff, TableDiff, diff_rows
from proofpool.backend.indexer.reorg import roll_back
from proofpool.backend.indexer.source import ChainMoved, ChainSource
from psycopg import sql
from web3 import Web3

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra import db
from proofpool.infra.chain.deploy import AddressBook, load_address_book
from proofpool.infra.chain.rpc import connect
from proofpool.infra.config import get_settings

log = logging.getLogger(__name__)

COMPARED_TABLES: tuple[str, ...] = ("chain_events", *PROJECTION_TABLES)
"""Raw events (the chain's logs in the indexed range) and every projection."""

IGNORED_COLUMNS = frozenset({"id", "indexed_at", "created_at", "updated_at", "dispatched_at"})
"""Not derived from chain data: surrogate ids (numbered by insertion, which a rebuild after a
reorg restarts) and wall-clock times of when a row was written."""

NOT_COMPARED: Mapping[str, str] = {
    "alembic_version": "migration bookkeeping (both databases must be at head)",
    "indexer_state": "the cursor: it sets the range rebuilt, it is not ledger data",
    "chain_blocks": "which headers are kept depends on the indexer's range boundaries",
    "outbox": "dispatch state of validation tasks (sent or not), not chain data",
    "validations": "the validators' off-chain work state (claims, leases, evidence)",
    "batch_claims": "which file each assigned batch was accepted for: validator state, off-chain",
    "reviews": "the validators' reviews of each other's rejections: off-chain work state",
    "node_announcements": "what nodes told the backend, off-chain",
    "pool_invites": "invites the manager key signed, off-chain",
    "node_batches": "per-node batch counters of the orchestrator, off-chain",
    "issued_batches": "the highest batch the orchestrator handed each node per version, off-chain",
    "pool_assignment_config": "orchestrator settings, off-chain",
    "pool_stats": "sums of the compared projections, kept by triggers (migration 0012)",
    "contributors": "sums of the compared projections, kept by triggers (migration 0012)",
    "validator_stats": "sums of the compared projections, kept by triggers (migration 0012)",
    "ledger_stats_deltas": "the statistics' pending changes: empty outside a transaction",
    "ledger_stats_fold_requests": "the statistics' pending changes: empty outside a transaction",
    "checkpoint_metric_reads": "what the object store held for each checkpoint's metrics file when it was read "
    "(off-chain; each read is checked against the chain's manifest hash)",
}
"""Tables of the schema deliberately left out, and why (the integration test checks that every
table carrying `block_number` and `tx_hash` is compared)."""

MAX_CHAIN_MOVED = 20
FETCH_ROWS = 2000
SCRATCH_INFIX = "_verify_"
MAX_IDENTIFIER = 63  # PostgreSQL truncates longer database names

Progress = Callable[[int, int], None]
"""Called as blocks are rebuilt: (blocks done, blocks to do)."""


# --- the rebuild --------------------------------------------------------------------------------


class BoundedSource(ChainSource):
    """The chain as of block `last`: an indexer reading it never goes past the block the main
    database's cursor has reached (`last` may be raised, never lowered below what was read)."""

    def __init__(self, w3: Web3, decoder: FastDecoder, last: int) -> None:
        super().__init__(w3, decoder)
        self.last = last

    def head(self) -> int:
        return min(super().head(), self.last)


def scratch_name(database: str) -> str:
    """`<database>_verify_<random>`, shortened to fit PostgreSQL's 63-byte names."""
    suffix = f"{SCRATCH_INFIX}{uuid.uuid4().hex[:8]}"
    return database[: MAX_IDENTIFIER - len(suffix)] + suffix


@contextmanager
def scratch_database(database_url: str) -> Iterator[str]:
    """A migrated scratch database beside `database_url`'s, dropped on exit, even on Ctrl-C."""
    url = db.with_database(database_url, scratch_name(db.database_name(database_url)))
    try:
        try:
            db.ensure_database(url)
        except psycopg.Error as exc:  # e.g. no CREATEDB privilege: say so, not a traceback
            raise ConfigError(f"cannot create the scratch database beside {db.redact(database_url)}: {exc}") from exc
        db.upgrade(url)
        log.info("scratch database ready", extra={"database": db.database_name(url)})
        yield url
    finally:
        try:
            db.drop_database(url)
        except Exception as exc:  # noqa: BLE001 - never hide the error that brought us here
            log.warning(
                "could not drop the scratch database",
                extra={"database": db.database_name(url), "error": f"{exc.__class__.__name__}: {exc}"},
            )


class Rebuild(AbstractContextManager["Rebuild"]):
    """The indexer over the scratch database, driven step by step so that an unreachable chain or
    database ends the verification (exit 2) instead of being waited out as `Indexer.run` does."""

    def __init__(self, w3: Web3, book: AddressBook, url: str, batch_blocks: int, last: int) -> None:
        self.book = book
        self.source = BoundedSource(w3, FastDecoder(book.addresses), last)
        self.indexer = Indexer(self.source, book, url, IndexerOptions(batch_blocks=batch_blocks, confirmations=0))
        self.conn = _connect(url)
        with self.conn.transaction():
            chain_db.init_state(self.conn, chain_id=book.chain_id, next_block=book.deploy_block)

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def cursor(self) -> int:
        """The first block not rebuilt yet."""
        state = chain_db.get_state(self.conn)
        assert state is not None
        return state.next_block

    def rewind(self, next_block: int) -> None:
        """Forget blocks from `next_block` on (the main database rolled back a reorg meanwhile)."""
        with self.conn.transaction():
            roll_back(self.conn, next_block)

    def catch_up(self, last: int, progress: Progress | None = None) -> None:
        """Index up to block `last` (or the chain head, if lower) with the indexer's own step."""
        self.source.last = last
        first, moved = self.cursor(), 0
        while True:
            try:
                progressed = self.indexer.step(self.conn)
            except ChainMoved:
                moved += 1
                if moved > MAX_CHAIN_MOVED:
                    raise ServiceUnavailable("the chain keeps changing under the rebuild; try again") from None
                time.sleep(0.2)
                continue
            except RPC_ERRORS as exc:
                raise ServiceUnavailable(f"the JSON-RPC node failed during the rebuild: {_first_line(exc)}") from exc
            except DB_ERRORS as exc:
                raise ServiceUnavailable(f"PostgreSQL failed during the rebuild: {_first_line(exc)}") from exc
            if not progressed:
                return
            if progress is not None:
                progress(min(self.cursor(), last + 1) - first, max(0, last + 1 - first))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0]}" if text else exc.__class__.__name__


def _connect(url: str) -> psycopg.Connection:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5, application_name="proofpool-ledger-verify")
    except psycopg.OperationalError as exc:
        raise db.connection_error(url, exc) from exc


# --- reading both databases ---------------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    """What to read of one table: the compared columns, its natural key, its text key columns."""

    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    text_keys: frozenset[str]


COLUMNS_SQL = """
    SELECT column_name, data_type FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position"""

KEYS_SQL = """
    SELECT c.contype, array_agg(a.attname::text ORDER BY k.ord)
    FROM pg_constraint c
    CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
    WHERE c.conrelid = to_regclass(%s) AND c.contype IN ('p', 'u')
    GROUP BY c.oid, c.contype, c.conname
    ORDER BY c.contype, c.conname"""


def table_shape(conn: psycopg.Connection, table: str) -> TableShape:
    """Columns and key of `table` from the catalog: the primary key, or the first unique key
    when the primary key is a surrogate id (verdicts, slashes, rewards, chain_events)."""
    types = {name: kind for name, kind in conn.execute(COLUMNS_SQL, (table,)).fetchall()}
    columns = tuple(name for name in types if name not in IGNORED_COLUMNS)
    keys = [tuple(cols) for _, cols in conn.execute(KEYS_SQL, (table,)).fetchall()]
    natural = next((k for k in keys if not IGNORED_COLUMNS.intersection(k)), None)
    if natural is None:
        raise ConfigError(f"table {table} has no key of chain data to compare rows by")
    text = frozenset(c for c in natural if types[c] in ("text", "character varying"))
    return TableShape(table, columns, natural, text)


def stream_rows(conn: psycopg.Connection, shape: TableShape, name: str) -> Iterator[tuple[Any, ...]]:
    """The table's compared columns in key order, from a server-side cursor (inside the caller's
    transaction). Text keys sort in the "C" collation, which is Python's code-point order."""
    order = sql.SQL(", ").join(
        sql.SQL('{} COLLATE "C"').format(sql.Identifier(c)) if c in shape.text_keys else sql.Identifier(c)
        for c in shape.key
    )
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
        sql.SQL(", ").join(map(sql.Identifier, shape.columns)), sql.Identifier(shape.table), order
    )
    with conn.cursor(name=name) as cur:
        cur.itersize = FETCH_ROWS
        cur.execute(query)
        yield from cur


def compare(chain_conn: psycopg.Connection, db_conn: psycopg.Connection, limit: int) -> list[TableDiff]:
    """Every compared table, rebuilt (`chain_conn`) against the main database (`db_conn`); both
    connections must be inside a transaction (server-side cursors)."""
    out = []
    for table in COMPARED_TABLES:
        shape = table_shape(chain_conn, table)
        out.append(
            diff_rows(
                table,
                shape.key,
                shape.columns,
                stream_rows(chain_conn, shape, f"verify_chain_{table}"),
                stream_rows(db_conn, shape, f"verify_db_{table}"),
                limit,
            )
        )
    return out


# --- the whole verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    """The chain to rebuild from: its connection, the deployment on it and its head at the start."""

    w3: Web3
    book: AddressBook
    head: int


def _chain(rpc_url: str, deployments_dir: Path | None, book: AddressBook | None) -> Chain:
    settings = get_settings()
    w3 = connect(rpc_url, timeout=settings.rpc_timeout)
    try:
        chain_id, head = w3.eth.chain_id, w3.eth.block_number
    except RPC_ERRORS as exc:
        raise ServiceUnavailable(f"no JSON-RPC node answers at {rpc_url} ({_first_line(exc)})") from exc
    if book is None:
        book = load_address_book(chain_id, deployments_dir or settings.deployments_dir)
    if book.chain_id != chain_id:
        raise ConfigError(f"the RPC node at {rpc_url} serves chain {chain_id}, the address book is for {book.chain_id}")
    return Chain(w3, book, head)


def _check_database(url: str, chain_id: int) -> chain_db.IndexerState | None:
    """The main database's cursor, after checking it is at head and indexes this chain."""
    status = db.current(url)
    if status.revision != status.head:
        raise ConfigError(
            f"database {db.redact(url)} is at revision {status.revision or '(none)'}, not {status.head}: "
            "run `proofpool db upgrade` (the rebuild uses the current schema)"
        )
    with _connect(url) as conn:
        state = chain_db.get_state(conn)
    if state is not None and state.chain_id != chain_id:
        raise ConfigError(f"database {db.redact(url)} indexes chain {state.chain_id}, the RPC node serves {chain_id}")
    return state


def _last_block(state: chain_db.IndexerState | None, book: AddressBook) -> int:
    """The last block the main database has indexed (deploy block - 1: none)."""
    return (state.next_block if state is not None else book.deploy_block) - 1


def verify_ledger(
    database_url: str | None = None,
    rpc_url: str | None = None,
    deployments_dir: Path | None = None,
    *,
    book: AddressBook | None = None,
    batch_blocks: int | None = None,
    limit: int = DEFAULT_LIMIT,
    progress: Progress | None = None,
) -> LedgerDiff:
    """Rebuild the ledger from the chain into a scratch database, up to the block the database at
    `database_url` has indexed, and diff the two (see the module docstring).

    `book` (the deployment) wins over `deployments_dir`; defaults come from the settings. Raises
    `ProofpoolError` (`ServiceUnavailable`, `ConfigError`) when no comparison can be made."""
    settings = get_settings()
    started = time.monotonic()
    url = database_url or settings.database_url
    rpc = rpc_url or settings.rpc_url
    chain = _chain(rpc, deployments_dir, book)
    book = chain.book
    last = _last_block(_check_database(url, book.chain_id), book)
    with (
        scratch_database(url) as scratch_url,
        Rebuild(chain.w3, book, scratch_url, batch_blocks or settings.indexer_batch_blocks, last) as rebuild,
    ):
        rebuild.catch_up(last, progress)
        with _connect(url) as main:
            main.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            main.read_only = True
            with main.transaction():  # one snapshot: a running indexer cannot move it mid-compare
                last = _align(rebuild, _last_block(chain_db.get_state(main), book), progress)
                with rebuild.conn.transaction():
                    tables = compare(rebuild.conn, main, limit)
        reached = rebuild.cursor() - 1
    diff = LedgerDiff(book.chain_id, db.database_name(url), book.deploy_block, last, chain.head, tables)
    if reached < last:
        diff.problems.append(
            f"the database's cursor is at block {last + 1} but the chain ends at block {reached}: it indexed "
            "blocks this chain does not have (another chain, or a devnet that was reset?)"
        )
    diff.seconds = time.monotonic() - started
    log.info("ledger verified", extra={"ok": diff.ok, "differences": diff.differences, "to_block": last})
    return diff


def _align(rebuild: Rebuild, last: int, progress: Progress | None) -> int:
    """Bring the rebuild to the main database's snapshot: further if its indexer went on while we
    rebuilt, back if it rolled back a reorg meanwhile. Returns the block compared up to."""
    if rebuild.cursor() > last + 1:
        rebuild.rewind(last + 1)
    rebuild.catch_up(last, progress)
    return last
