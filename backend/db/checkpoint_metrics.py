"""SQL of the checkpoint metrics reads (migration 0014): which checkpoints await a read of their
trainer's figures, and what a read found (see `proofpool.backend.indexer.checkpoint_metrics`).

The figure columns are the listing's (`proofpool.core.ledger_listings.CHECKPOINT_FIGURES`), so
the names in the SQL come from that declaration, never from input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import Connection
from psycopg.rows import class_row

from proofpool.core.ledger_listings import CHECKPOINT_FIGURES

FIGURES: Final = tuple(column.name for column in CHECKPOINT_FIGURES)

TO_READ = """
    SELECT c.pool_id, c.version, c.manifest_sha256, c.uri, COALESCE(r.attempts, 0) AS attempts
    FROM checkpoints c
    LEFT JOIN checkpoint_metric_reads r
           ON r.pool_id = c.pool_id AND r.version = c.version AND r.manifest_sha256 = c.manifest_sha256
    WHERE r.pool_id IS NULL OR r.retry_at <= now()
    ORDER BY c.block_number, c.log_index
    LIMIT %(limit)s"""

RECORD = f"""
    INSERT INTO checkpoint_metric_reads
        (pool_id, version, manifest_sha256, status, detail, attempts, read_at, retry_at, {", ".join(FIGURES)})
    VALUES (%(pool_id)s, %(version)s, %(manifest_sha256)s, %(status)s, %(detail)s, %(attempts)s, now(),
            now() + make_interval(secs => %(retry_after)s), {", ".join(f"%({name})s" for name in FIGURES)})
    ON CONFLICT (pool_id, version, manifest_sha256) DO UPDATE
        SET status = EXCLUDED.status, detail = EXCLUDED.detail, attempts = EXCLUDED.attempts,
            read_at = EXCLUDED.read_at, retry_at = EXCLUDED.retry_at,
            {", ".join(f"{name} = EXCLUDED.{name}" for name in FIGURES)}"""


@dataclass(frozen=True)
class CheckpointToRead:
    """A checkpoint the chain recorded whose figures have not been read, or are due again."""

    pool_id: int
    version: int
    manifest_sha256: bytes
    uri: str
    attempts: int
    """Reads made so far (each found the figures missing)."""


@dataclass(frozen=True)
class Read:
    """What one read of a checkpoint's figures found, as stored."""

    status: str
    detail: str | None
    figures: dict[str, int | float | None]
    """A value (or None) for every name of `FIGURES`."""
    retry_after: float | None
    """Seconds until the checkpoint is read again; None: this read is final."""


def to_read(conn: Connection, limit: int) -> list[CheckpointToRead]:
    """Up to `limit` checkpoints awaiting a read, oldest on the chain first."""
    with conn.cursor(row_factory=class_row(CheckpointToRead)) as cur:
        return cur.execute(TO_READ, {"limit": limit}).fetchall()


def record(conn: Connection, checkpoint: CheckpointToRead, read: Read) -> None:
    """Store `read` as the checkpoint's current read (its attempt number is the next one)."""
    conn.execute(
        RECORD,
        {
            "pool_id": checkpoint.pool_id,
            "version": checkpoint.version,
            "manifest_sha256": checkpoint.manifest_sha256,
            "status": read.status,
            "detail": read.detail,
            "attempts": checkpoint.attempts + 1,
            "retry_after": read.retry_after,
            **{name: read.figures.get(name) for name in FIGURES},
        },
    )
