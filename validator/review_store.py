"""Reviews of other validators' rejections: the contest side of the challenge game.

A rejection in a pool with a challenge window slashes nobody until the window has passed. Every
validator reviews the rejections of the others while they wait: its verdict sender queues one
review per rejection it sees indexed (`to_review`), a validation slot recomputes the file in full
(`proofpool.validator.review.review`) and records 'upheld' or 'contest' with the evidence hash
(`decide`), and the verdict sender sends the contests (`contestRejection`; `by_state` 'contest',
`mark_sent`) and settles them once the rejection is executed or overturned (`by_state` 'sent',
`mark_settled`). Table `reviews`, revision 0008; functions take the connection first and never
commit. See docs/validator-verdicts.md, "Challenges".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from eth_utils import to_checksum_address
from psycopg import Connection
from psycopg.rows import class_row

ReviewState = Literal["queued", "upheld", "contest", "sent", "settled", "skipped"]


@dataclass(frozen=True)
class Review:
    """One validator's review of one rejection."""

    pool_id: int
    work_key: bytes
    rejected_block: int
    state: ReviewState = "queued"
    evidence_sha256: bytes | None = None


_COLUMNS = "pool_id, work_key, rejected_block, state, evidence_sha256"

# New rejections of others' nodes' work, plus queued reviews whose task was lost (queued longer
# than a lease ago): re-stamped so they are handed out once per lease.
TO_REVIEW = f"""
    WITH fresh AS (
        INSERT INTO reviews (pool_id, work_key, rejected_block, validator)
        SELECT pool_id, work_key, status_block, %(validator)s FROM submissions
         WHERE status = 'rejected' AND node <> %(validator)s AND provider <> %(validator)s
           AND NOT EXISTS (  -- our own rejection
               SELECT 1 FROM validations v
                WHERE v.pool_id = submissions.pool_id AND v.work_key = submissions.work_key
                  AND v.validator = %(validator)s AND v.verdict = 'invalid')
        ON CONFLICT DO NOTHING
        RETURNING {_COLUMNS}
    ), stale AS (
        UPDATE reviews SET queued_at = now()
         WHERE validator = %(validator)s AND state = 'queued'
           AND queued_at < now() - %(lease)s * interval '1 second'
        RETURNING {_COLUMNS}
    )
    SELECT * FROM fresh UNION ALL SELECT * FROM stale"""

_KEY = (
    "pool_id = %(pool_id)s AND work_key = %(work_key)s AND rejected_block = %(rejected_block)s"
    " AND validator = %(validator)s"
)

SELECT_ONE = f"SELECT {_COLUMNS} FROM reviews WHERE {_KEY}"

DECIDE = f"""
    UPDATE reviews SET state = %(state)s, reason = %(reason)s, evidence_sha256 = %(evidence_sha256)s,
                       decided_at = now()
     WHERE {_KEY} AND state = 'queued'"""

BY_STATE = f"""
    SELECT {_COLUMNS} FROM reviews WHERE validator = %(validator)s AND state = %(state)s
     ORDER BY decided_at, pool_id, work_key LIMIT %(limit)s"""

MARK_SENT = f"UPDATE reviews SET state = 'sent', tx_hash = %(tx_hash)s WHERE {_KEY} AND state = 'contest'"

MARK_SETTLED = f"""
    UPDATE reviews SET state = 'settled', note = concat_ws('; ', note, %(note)s::text)
     WHERE {_KEY} AND state = 'sent'"""

MARK_SKIPPED = f"""
    UPDATE reviews SET state = 'skipped', note = concat_ws('; ', note, %(note)s::text)
     WHERE {_KEY} AND state IN ('queued', 'contest')"""


def _params(review: Review, validator: str) -> dict[str, object]:
    return {
        "pool_id": review.pool_id,
        "work_key": review.work_key,
        "rejected_block": review.rejected_block,
        "validator": to_checksum_address(validator),
    }


def to_review(conn: Connection, validator: str, *, lease_seconds: float) -> list[Review]:
    """Queue a review by `validator` of every indexed rejection not of its own nodes' work, and
    return the reviews to hand to a validation slot now (new ones, and ones queued longer than
    `lease_seconds` ago whose task must have been lost)."""
    params = {"validator": to_checksum_address(validator), "lease": float(lease_seconds)}
    with conn.cursor(row_factory=class_row(Review)) as cur:
        return cur.execute(TO_REVIEW, params).fetchall()


def get(conn: Connection, review: Review, validator: str) -> Review | None:
    """The stored row of `review` (its current state)."""
    with conn.cursor(row_factory=class_row(Review)) as cur:
        return cur.execute(SELECT_ONE, _params(review, validator)).fetchone()


def decide(
    conn: Connection,
    review: Review,
    validator: str,
    state: Literal["upheld", "contest"],
    reason: str | None,
    evidence_sha256: bytes,
) -> bool:
    """Record the recomputation's outcome of a queued review; False if it was decided before."""
    params = {**_params(review, validator), "state": state, "reason": reason, "evidence_sha256": evidence_sha256}
    return conn.execute(DECIDE, params).rowcount == 1


def by_state(conn: Connection, validator: str, state: ReviewState, *, limit: int = 64) -> list[Review]:
    """`validator`'s reviews in `state`, oldest decision first."""
    params = {"validator": to_checksum_address(validator), "state": state, "limit": limit}
    with conn.cursor(row_factory=class_row(Review)) as cur:
        return cur.execute(BY_STATE, params).fetchall()


def mark_sent(conn: Connection, review: Review, validator: str, tx_hash: bytes | None) -> bool:
    """A contest went out in transaction `tx_hash` (None: found on-chain after a restart)."""
    return conn.execute(MARK_SENT, {**_params(review, validator), "tx_hash": tx_hash}).rowcount == 1


def mark_settled(conn: Connection, review: Review, validator: str, note: str) -> bool:
    """The contested rejection was executed or overturned (`note` says which)."""
    return conn.execute(MARK_SETTLED, {**_params(review, validator), "note": note}).rowcount == 1


def mark_skipped(conn: Connection, review: Review, validator: str, note: str) -> bool:
    """The review will not (or no longer) contest: `note` says why."""
    return conn.execute(MARK_SKIPPED, {**_params(review, validator), "note": note}).rowcount == 1
