"""Reorg handling: notice that stored blocks are no longer on the chain, find the fork point,
and roll back everything at or above it.

Detection compares what the indexer stored (`chain_blocks`: every block that held one of our
logs, every range start and end) with the chain: a stored hash that differs from the chain's
at the same height, a range whose first block does not extend the stored block before it, or a
stored block the chain no longer has (anvil's `evm_revert` shortens the chain).

Rollback, in one transaction: delete the validators' batch claims and validation rows of the
submissions above the fork point (`proofpool.backend.db.reorg`: else a re-submitted file of the same batch
would be a `duplicate_batch`), delete raw events and blocks at or above the fork point, delete
unsent outbox rows of those blocks, move the cursor back to the fork point, and rebuild the
projections from the remaining raw events (only when events were removed). The follow loop
then re-indexes the new chain from the fork point.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proofpool.backend.db import chain as chain_db
from proofpool.backend.db import outbox as outbox_db
from proofpool.backend.db.reorg import delete_validator_state_from
from proofpool.backend.indexer.rebuild import rebuild_projections
from proofpool.backend.indexer.source import ChainSource, RangeBatch
from psycopg import Connection

log = logging.getLogger(__name__)

WALK_BACK_CHUNK = 64


@dataclass(frozen=True)
class Rollback:
    """What a reorg removed."""

    fork_block: int
    events_removed: int
    tasks_removed: int
    batch_claims_removed: int = 0
    validations_removed: int = 0


def conflict_in_range(conn: Connection, batch: RangeBatch) -> int | None:
    """Highest height at which the stored blocks disagree with a freshly read range, or None."""
    stored = chain_db.blocks_at(conn, [batch.start - 1, *batch.headers])
    conflicts = [n for n, header in batch.headers.items() if n in stored and stored[n].hash != header.hash]
    previous, first = stored.get(batch.start - 1), batch.headers.get(batch.start)
    if previous is not None and first is not None and first.parent_hash != previous.hash:
        conflicts.append(batch.start - 1)
    return max(conflicts) if conflicts else None


def tip_conflict(conn: Connection, source: ChainSource, next_block: int) -> int | None:
    """When caught up: is the last stored block still on the chain? Its height if not."""
    stored = chain_db.blocks_below(conn, next_block, 1)
    if not stored:
        return None
    on_chain = source.header(stored[0].number)
    if on_chain is not None and on_chain.hash == stored[0].hash:
        return None
    return stored[0].number


def find_fork(conn: Connection, source: ChainSource, conflict: int, floor: int) -> int:
    """First height to re-index: one above the highest stored block at or below `conflict` whose
    hash the chain still has (`floor`, the deploy block, when none matches)."""
    below = conflict + 1
    while stored := chain_db.blocks_below(conn, below, WALK_BACK_CHUNK):
        on_chain = source.headers([header.number for header in stored])
        for header in stored:
            current = on_chain[header.number]
            if current is not None and current.hash == header.hash:
                return max(header.number + 1, floor)
        below = stored[-1].number
    return floor


def roll_back(conn: Connection, fork_block: int) -> Rollback:
    """Remove everything at or above `fork_block` and recompute the projections, in the caller's
    transaction."""
    validator_state = delete_validator_state_from(conn, fork_block)  # needs the events it names
    events_removed = chain_db.delete_from(conn, fork_block)
    tasks_removed = outbox_db.delete_undispatched_from(conn, fork_block)
    chain_db.set_cursor(conn, fork_block)
    if events_removed:
        rebuild_projections(conn)
    rollback = Rollback(
        fork_block=fork_block,
        events_removed=events_removed,
        tasks_removed=tasks_removed,
        batch_claims_removed=validator_state.batch_claims,
        validations_removed=validator_state.validations,
    )
    log.warning(
        "reorg rolled back",
        extra={
            "fork_block": fork_block,
            "events_removed": events_removed,
            "tasks_removed": tasks_removed,
            "batch_claims_removed": validator_state.batch_claims,
            "validations_removed": validator_state.validations,
        },
    )
    return rollback
