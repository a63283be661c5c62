"""Raw chain data the indexer keeps: events (`chain_events`), blocks seen (`chain_blocks`) and its
cursor (`indexer_state`). Sync psycopg: the indexer is one process with one connection.

Callers own the transaction (see `proofpool.backend.indexer.follow`): a range's events, blocks, projections,
outbox rows and the cursor commit together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from proofpool.backend.indexer.records import BlockHeader, IndexedEvent
from psycopg import Connection

INDEXER_LOCK_ID = 0x70726F6F66  # "proof": session advisory lock held by the one running indexer

INSERT_EVENTS = """
    INSERT INTO chain_events (block_number, block_hash, tx_hash, log_index, contract, address, name, args)
    SELECT b, bh, tx, li, c, a, n, args::jsonb
    FROM unnest(%(block_number)s::bigint[], %(block_hash)s::bytea[], %(tx_hash)s::bytea[], %(log_index)s::int[],
                %(contract)s::text[], %(address)s::text[], %(name)s::text[], %(args)s::text[])
         AS e(b, bh, tx, li, c, a, n, args)
    ORDER BY b, li
    ON CONFLICT (tx_hash, log_index) DO NOTHING
    RETURNING tx_hash, log_index"""

UPSERT_BLOCKS = """
    INSERT INTO chain_blocks (number, hash, parent_hash, timestamp)
    SELECT n, h, p, to_timestamp(t)
    FROM unnest(%(number)s::bigint[], %(hash)s::bytea[], %(parent_hash)s::bytea[], %(timestamp)s::bigint[])
         AS b(n, h, p, t)
    ON CONFLICT (number) DO UPDATE
        SET hash = EXCLUDED.hash, parent_hash = EXCLUDED.parent_hash, timestamp = EXCLUDED.timestamp"""

SELECT_STATE = "SELECT chain_id, next_block FROM indexer_state WHERE id = 1"
SELECT_STATE_FOR_UPDATE = SELECT_STATE + " FOR UPDATE"
INIT_STATE = """
    INSERT INTO indexer_state (id, chain_id, next_block) VALUES (1, %(chain_id)s, %(next_block)s)
    ON CONFLICT (id) DO NOTHING"""
SET_CURSOR = "UPDATE indexer_state SET next_block = %(next_block)s, updated_at = now() WHERE id = 1"

SELECT_BLOCKS = "SELECT number, hash, parent_hash, extract(epoch FROM timestamp)::bigint FROM chain_blocks"
SELECT_BLOCKS_AT = SELECT_BLOCKS + " WHERE number = ANY(%(numbers)s::bigint[])"
SELECT_BLOCKS_BELOW = SELECT_BLOCKS + " WHERE number < %(below)s ORDER BY number DESC LIMIT %(limit)s"

COUNT_EVENTS_FROM = "SELECT count(*) FROM chain_events WHERE block_number >= %(block)s"
DELETE_EVENTS_FROM = "DELETE FROM chain_events WHERE block_number >= %(block)s"
DELETE_BLOCKS_FROM = "DELETE FROM chain_blocks WHERE number >= %(block)s"

SELECT_EVENTS = """
    SELECT e.block_number, e.block_hash, e.tx_hash, e.log_index, e.contract, e.address, e.name, e.args,
           extract(epoch FROM b.timestamp)::bigint
    FROM chain_events e JOIN chain_blocks b ON b.number = e.block_number
    ORDER BY e.block_number, e.log_index"""


@dataclass(frozen=True)
class IndexerState:
    """The cursor: the chain indexed and the first block not yet indexed."""

    chain_id: int
    next_block: int


def schema_ready(conn: Connection) -> bool:
    """True when the chain tables exist (the database was migrated)."""
    row = conn.execute("SELECT to_regclass('indexer_state') IS NOT NULL").fetchone()
    return bool(row and row[0])


def try_lock(conn: Connection) -> bool:
    """Take the indexer's session lock; False when another indexer process holds it."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (INDEXER_LOCK_ID,)).fetchone()
    return bool(row and row[0])


def lock_holder(conn: Connection) -> int | None:
    """Backend pid of the session holding the indexer lock, for the "waiting for" log line."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s AND granted LIMIT 1",
        (INDEXER_LOCK_ID >> 32, INDEXER_LOCK_ID & 0xFFFFFFFF),
    ).fetchone()
    return int(row[0]) if row else None


def get_state(conn: Connection, *, for_update: bool = False) -> IndexerState | None:
    row = conn.execute(SELECT_STATE_FOR_UPDATE if for_update else SELECT_STATE).fetchone()
    return IndexerState(chain_id=int(row[0]), next_block=int(row[1])) if row else None


def init_state(conn: Connection, *, chain_id: int, next_block: int) -> None:
    """Create the cursor row unless it exists."""
    conn.execute(INIT_STATE, {"chain_id": chain_id, "next_block": next_block})


def set_cursor(conn: Connection, next_block: int) -> None:
    conn.execute(SET_CURSOR, {"next_block": next_block})


def insert_events(conn: Connection, events: Sequence[IndexedEvent]) -> list[IndexedEvent]:
    """Store events; return those that were new, in chain order (the rest were stored before)."""
    if not events:
        return []
    params = {
        "block_number": [e.block_number for e in events],
        "block_hash": [e.block_hash for e in events],
        "tx_hash": [e.tx_hash for e in events],
        "log_index": [e.log_index for e in events],
        "contract": [e.contract for e in events],
        "address": [e.address for e in events],
        "name": [e.name for e in events],
        "args": [json.dumps(e.args, separators=(",", ":")) for e in events],
    }
    inserted = {(bytes(tx), int(li)) for tx, li in conn.execute(INSERT_EVENTS, params).fetchall()}
    return [e for e in events if e.key in inserted]


def upsert_blocks(conn: Connection, headers: Sequence[BlockHeader]) -> None:
    """Store the headers of blocks seen (a later reorg check compares against these hashes)."""
    if not headers:
        return
    conn.execute(
        UPSERT_BLOCKS,
        {
            "number": [h.number for h in headers],
            "hash": [h.hash for h in headers],
            "parent_hash": [h.parent_hash for h in headers],
            "timestamp": [h.timestamp for h in headers],
        },
    )


def _header(row: tuple) -> BlockHeader:
    return BlockHeader(number=int(row[0]), hash=bytes(row[1]), parent_hash=bytes(row[2]), timestamp=int(row[3]))


def blocks_at(conn: Connection, numbers: Sequence[int]) -> dict[int, BlockHeader]:
    """Stored headers at these heights (heights never stored are absent)."""
    if not numbers:
        return {}
    rows = conn.execute(SELECT_BLOCKS_AT, {"numbers": list(numbers)}).fetchall()
    return {int(r[0]): _header(r) for r in rows}


def blocks_below(conn: Connection, below: int, limit: int) -> list[BlockHeader]:
    """Up to `limit` stored headers under `below`, highest first (the reorg walk-back)."""
    return [_header(r) for r in conn.execute(SELECT_BLOCKS_BELOW, {"below": below, "limit": limit}).fetchall()]


def delete_from(conn: Connection, block: int) -> int:
    """Remove raw events and blocks at or above `block`; returns the number of events removed."""
    row = conn.execute(COUNT_EVENTS_FROM, {"block": block}).fetchone()
    conn.execute(DELETE_EVENTS_FROM, {"block": block})
    conn.execute(DELETE_BLOCKS_FROM, {"block": block})
    return int(row[0]) if row else 0


def stream_events(conn: Connection, chunk: int = 5000) -> Iterator[list[IndexedEvent]]:
    """Every stored event in chain order, `chunk` at a time, from a server-side cursor."""
    with conn.cursor(name="proofpool_rebuild_events") as cur:
        cur.itersize = chunk
        cur.execute(SELECT_EVENTS)
        while rows := cur.fetchmany(chunk):
            yield [
                IndexedEvent(
                    block_number=int(r[0]),
                    block_hash=bytes(r[1]),
                    tx_hash=bytes(r[2]),
                    log_index=int(r[3]),
                    contract=r[4],
                    address=r[5],
                    name=r[6],
                    args=r[7],
                    block_time=datetime.fromtimestamp(int(r[8]), UTC),
                )
                for r in rows
            ]
