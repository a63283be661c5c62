"""Rebuilding the projections from `chain_events` alone.

Used after a reorg (the raw events above the fork point are deleted, then every projection is
recomputed from what remains, inside the same transaction) and by `proofpool indexer rebuild`
and the ledger-equality test. Cost: one pass over every stored event, about as fast as indexing
them (see docs/indexer.md); the outbox is not touched, so no task is sent twice by a rebuild.
"""

from __future__ import annotations

import logging
import time

from proofpool.backend.db import chain as chain_db
from proofpool.backend.db import projections as projections_db
from proofpool.backend.indexer.projections import apply_events
from psycopg import Connection

log = logging.getLogger(__name__)


def rebuild_projections(conn: Connection, chunk: int = 5000) -> int:
    """Truncate the projections and replay every stored event in chain order, in the caller's
    transaction; returns the number of events replayed."""
    started = time.monotonic()
    projections_db.truncate(conn)
    replayed = 0
    for events in chain_db.stream_events(conn, chunk):
        apply_events(conn, events)
        replayed += len(events)
    log.info("projections rebuilt", extra={"events": replayed, "seconds": round(time.monotonic() - started, 3)})
    return replayed
