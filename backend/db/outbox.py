"""The outbox: tasks to send to Celery, written in the same transaction as the events that
caused them and marked once sent (see `proofpool.backend.indexer.outbox` for the delivery guarantee)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

INSERT = """
    INSERT INTO outbox (task, args, dedupe_key, block_number)
    SELECT t, a::jsonb, k, b FROM unnest(%(task)s::text[], %(args)s::text[], %(key)s::text[], %(block)s::bigint[])
         AS o(t, a, k, b)
    ORDER BY b
    ON CONFLICT (dedupe_key) DO NOTHING"""

CLAIM_PENDING = """
    SELECT id, task, args, dedupe_key FROM outbox WHERE dispatched_at IS NULL
    ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""

MARK_DISPATCHED = "UPDATE outbox SET dispatched_at = now() WHERE id = ANY(%(ids)s::bigint[])"

DELETE_UNDISPATCHED_FROM = "DELETE FROM outbox WHERE block_number >= %(block)s AND dispatched_at IS NULL"

COUNT_PENDING = "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL"


@dataclass(frozen=True)
class OutboxTask:
    """One task to send: by name, with JSON args, under a dedupe key unique per cause."""

    task: str
    args: list[Any]
    dedupe_key: str
    block_number: int


@dataclass(frozen=True)
class PendingRow:
    id: int
    task: str
    args: list[Any]
    dedupe_key: str


def enqueue(conn: Connection, tasks: Sequence[OutboxTask]) -> None:
    """Add tasks; a dedupe key seen before is skipped (its task was queued already)."""
    if not tasks:
        return
    conn.execute(
        INSERT,
        {
            "task": [t.task for t in tasks],
            "args": [json.dumps(t.args) for t in tasks],
            "key": [t.dedupe_key for t in tasks],
            "block": [t.block_number for t in tasks],
        },
    )


def claim_pending(conn: Connection, limit: int) -> list[PendingRow]:
    """Lock up to `limit` unsent rows, oldest first (other dispatchers skip them)."""
    rows = conn.execute(CLAIM_PENDING, {"limit": limit}).fetchall()
    return [PendingRow(id=int(r[0]), task=r[1], args=list(r[2]), dedupe_key=r[3]) for r in rows]


def mark_dispatched(conn: Connection, ids: Sequence[int]) -> None:
    conn.execute(MARK_DISPATCHED, {"ids": list(ids)})


def delete_undispatched_from(conn: Connection, block: int) -> int:
    """Drop unsent tasks caused by blocks a reorg removed; sent ones stay (see docs/indexer.md)."""
    return conn.execute(DELETE_UNDISPATCHED_FROM, {"block": block}).rowcount


def count_pending(conn: Connection) -> int:
    row = conn.execute(COUNT_PENDING).fetchone()
    return int(row[0]) if row else 0
