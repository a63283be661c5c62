"""Validator state that a reorg leaves dangling: the `batch_claims` (revision 0005) and
`validations` (revision 0004) rows of submissions whose `WorkSubmitted` (or, for a bundle,
`WorkBundleSubmitted`) the reorg removed, and the `reviews` (revision 0008) of rejections the
reorg removed.

Neither table is a chain projection (no block_number, not rebuilt from events), so the rollback
of the chain tables does not reach them. Left in place, a removed submission's batch claim makes
the node's re-submitted file of that batch a `duplicate_batch`, and its decided or sent
validation row makes the validators skip the submission should the same transaction be mined
again (its verdict transaction is gone with the reorg). Deleting both returns the submission to
"never seen": if it comes back, it is dispatched and judged afresh. A bundle's batch claims are
found under its bundle key or under any of its file keys, whichever the validator claimed with.

Called by `proofpool.backend.indexer.reorg.roll_back` before the raw events are deleted, in its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import Connection

DELETE_VALIDATOR_STATE_FROM = """
    WITH removed AS (
        SELECT (args->>'poolId')::numeric::bigint AS pool_id,
               decode(substr(args->>'workKey', 3), 'hex') AS work_key
          FROM chain_events
         WHERE block_number >= %(block)s AND name IN ('WorkSubmitted', 'WorkBundleSubmitted')
    ), claimed_keys AS (
        SELECT pool_id, work_key FROM removed
        UNION
        SELECT (e.args->>'poolId')::numeric::bigint, decode(substr(f.key, 3), 'hex')
          FROM chain_events e CROSS JOIN LATERAL jsonb_array_elements_text(e.args->'fileKeys') AS f(key)
         WHERE e.block_number >= %(block)s AND e.name = 'WorkBundleSubmitted'
    ), claims AS (
        DELETE FROM batch_claims c USING claimed_keys r
         WHERE c.pool_id = r.pool_id AND c.work_key = r.work_key
        RETURNING 1
    ), decisions AS (
        DELETE FROM validations v USING removed r
         WHERE v.pool_id = r.pool_id AND v.work_key = r.work_key
        RETURNING 1
    ), reviewed AS (
        DELETE FROM reviews WHERE rejected_block >= %(block)s
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM claims), (SELECT count(*) FROM decisions), (SELECT count(*) FROM reviewed)"""


@dataclass(frozen=True)
class ValidatorStateRemoved:
    """Rows deleted because their submission was rolled back."""

    batch_claims: int
    validations: int
    reviews: int = 0
    """Reviews of rejections mined at or above the fork point (the rejection is gone with them)."""


def delete_validator_state_from(conn: Connection, block: int) -> ValidatorStateRemoved:
    """Delete the batch claims and validation rows of submissions indexed at or above `block`
    (run it before the raw events are deleted: they say which submissions those are)."""
    row = conn.execute(DELETE_VALIDATOR_STATE_FROM, {"block": block}).fetchone()
    assert row is not None  # an aggregate always returns a row
    return ValidatorStateRemoved(batch_claims=int(row[0]), validations=int(row[1]), reviews=int(row[2]))
