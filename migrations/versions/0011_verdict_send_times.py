"""When each verdict's transaction was sent (`validations.send_started_at`).

Revision ID: 0011
Revises: 0010

`sent_at` is when the sender recorded the mined receipt; `send_started_at` is when it handed the
transaction to the node. Between the two is the chain; before it, the wait for an attestation batch
and the flush's own reads. Together with `claimed_at`/`decided_at` (here) and the outbox's
`created_at`/`dispatched_at` they time every stage of a submission (`proofpool.validator.stages`).
NULL for verdicts found on-chain after a restart (nobody knows when they were sent) and for rows
written before this revision.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE validations ADD COLUMN send_started_at TIMESTAMPTZ;
"""

DOWNGRADE = """
ALTER TABLE validations DROP COLUMN IF EXISTS send_started_at;
"""


def upgrade() -> None:
    """Add the send time of every verdict transaction."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it; the stage timings then stop at the decision."""
    op.execute(DOWNGRADE)
