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

# Validation tasks sent at least `after` seconds ago whose submission is still pending and that no
# validator holds (no validation row, or only a claim whose lease ran out): marked unsent again, so
# the dispatcher sends them once more under the same task id. Driven by the few pending submissions
# (status index), each joined to its outbox row by its unique dedupe key.
REQUEUE_UNCLAIMED = """
    UPDATE outbox SET dispatched_at = NULL
    WHERE id IN (
        SELECT o.id FROM submissions s
        JOIN outbox o ON o.dedupe_key = s.pool_id || ':0x' || encode(s.work_key, 'hex')
        WHERE s.status = 'pending' AND o.task = %(task)s
          AND o.dispatched_at < now() - make_interval(secs => %(after)s)
          AND NOT EXISTS (
              SELECT 1 FROM validations v WHERE v.pool_id = s.pool_id AND v.work_key = s.work_key
                AND (v.state <> 'claimed' OR v.lease_until > now()))
        ORDER BY o.dispatched_at LIMIT %(limit)s
        FOR UPDATE OF o SKIP LOCKED)
    RETURNING dedupe_key"""


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


def requeue_unclaimed(conn: Connection, task: str, after: float, limit: int) -> list[str]:
    """Mark unsent again the `task` rows sent `after` seconds ago or more whose submission is still
    pending with no live claim (at most `limit`, oldest first); returns their dedupe keys."""
    rows = conn.execute(REQUEUE_UNCLAIMED, {"task": task, "after": after, "limit": limit}).fetchall()
    return [r[0] for r in rows]


def count_pending(conn: Connection) -> int:
    row = conn.execute(COUNT_PENDING).fetchone()
    return int(row[0]) if row else 0
