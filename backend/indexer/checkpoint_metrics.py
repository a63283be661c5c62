"""The checkpoint metrics reader: the trainer's figures of every checkpoint the indexer recorded,
verified and stored for the `checkpoint_metrics` ledger listing.

For each row of `checkpoints` without a read (or with a `missing` read that is due again), it reads
the checkpoint's manifest and `proofpool-metrics.json` from the object store, each checked against
the hash that vouches for it (`proofpool.infra.checkpoint.read_published_metrics`: the manifest
against the chain's hash, the file against its manifest entry), and stores the outcome in
`checkpoint_metric_reads`: the figures when verified, otherwise a status and why. Every outcome
but `missing` is final, so nothing is read forever; `missing` is tried again `MISSING_ATTEMPTS`
times in all, `RETRY_SECONDS` apart and doubling. A store that cannot be asked at all
(unreachable, refusing the credentials) is waited out without counting an attempt.

It runs as a thread of the indexer process (`CheckpointMetricsLoop`), on its own connection and
never inside the indexer's transactions: a slow or absent store never holds up indexing, and the
indexer's lock makes it the only writer of the reads. It wakes after each indexing commit that
may have added checkpoints, else every poll interval.
"""

from __future__ import annotations

import logging
from typing import Final

import psycopg
from proofpool.backend.db import checkpoint_metrics as db
from proofpool.backend.db.checkpoint_metrics import CheckpointToRead, Read
from proofpool.backend.indexer.side_loop import SideLoop

from proofpool.core.ledger_listings import CHECKPOINT_FIGURES, Kind
from proofpool.infra.checkpoint import MetricsReading, MetricsStatus, read_published_metrics
from proofpool.infra.storage import ObjectStore, StorageError

log = logging.getLogger(__name__)

APPLICATION_NAME: Final = "proofpool-indexer-checkpoint-metrics"
"""How the reader names its PostgreSQL session (pg_stat_activity)."""
MISSING_ATTEMPTS: Final = 5
"""Reads of a checkpoint whose manifest or metrics file the store lacks, before `missing` is final."""
RETRY_SECONDS: Final = 30.0
"""Wait before the second read of a missing checkpoint; doubled before each further one (30 s to 4 min)."""
BATCH: Final = 20
"""Checkpoints read per pass (each costs two small GETs)."""
_MAX_BIGINT: Final = 2**63 - 1


def settle(checkpoint: CheckpointToRead, reading: MetricsReading) -> Read:
    """The row to store for `reading`: the served figures of a verified file (a figure the ledger
    serves as an integer must be one, else the file is `malformed`), and when to read again."""
    figures: dict[str, int | float | None] = dict.fromkeys(db.FIGURES)
    if reading.status is MetricsStatus.VERIFIED and reading.metrics is not None:
        for column in CHECKPOINT_FIGURES:
            value = reading.metrics.figures.get(column.name)
            if value is None:
                continue
            if column.kind is Kind.INT:
                if not (float(value).is_integer() and 0 <= value <= _MAX_BIGINT):
                    detail = f"the metrics file gives {column.name} = {value}, not a count"
                    return Read(MetricsStatus.MALFORMED.value, detail, dict.fromkeys(db.FIGURES), None)
                value = int(value)
            figures[column.name] = float(value) if column.kind is Kind.FLOAT else value
        return Read(reading.status.value, None, figures, None)
    retry = None
    if reading.status is MetricsStatus.MISSING and checkpoint.attempts + 1 < MISSING_ATTEMPTS:
        retry = RETRY_SECONDS * 2**checkpoint.attempts
    return Read(reading.status.value, reading.detail, figures, retry)


def read_due(conn: psycopg.Connection, store: ObjectStore, limit: int = BATCH) -> int:
    """Read and record the figures of up to `limit` checkpoints awaiting a read; returns how many.
    A `StorageError` (the store cannot be asked) leaves the rest for the next pass."""
    checkpoints = db.to_read(conn, limit)
    for checkpoint in checkpoints:
        reading = read_published_metrics(
            store, checkpoint.pool_id, checkpoint.version, checkpoint.manifest_sha256, checkpoint.uri
        )
        read = settle(checkpoint, reading)
        db.record(conn, checkpoint, read)
        log.info(
            "checkpoint metrics read",
            extra={
                "pool": checkpoint.pool_id,
                "version": checkpoint.version,
                "status": read.status,
                "detail": read.detail,
                "retry_in": read.retry_after,
            },
        )
    return len(checkpoints)


class CheckpointMetricsLoop(SideLoop):
    """Runs `read_due` beside the indexer (module docstring, `proofpool.backend.indexer.side_loop`);
    an object store that cannot be asked is waited out, but not by a drain (`indexer run --once`):
    those checkpoints wait for the next run."""

    what = "checkpoint metrics"
    application_name = APPLICATION_NAME

    def __init__(
        self,
        store: ObjectStore,
        database_url: str,
        poll_interval: float = 1.0,
        max_backoff: float = 30.0,
        session_timeout: float = 60.0,
    ) -> None:
        super().__init__("checkpoint-metrics", database_url, poll_interval, max_backoff, session_timeout)
        self.store = store
        self.read = 0

    def work(self, conn: psycopg.Connection) -> int:
        done = read_due(conn, self.store)
        self.read += done
        return done

    def outage(self, exc: Exception) -> str | None:
        return "the object store" if isinstance(exc, StorageError) else None

    def give_up_draining(self, what: str) -> bool:
        return True
