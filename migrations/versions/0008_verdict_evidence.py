"""Verdict evidence and rejections that wait for their challenge window.

Revision ID: 0008
Revises: 0007

Every verdict commits on-chain to the sha256 of its evidence, a JSON document the validator
keeps in the object store (`validator.evidence`): `validations.evidence_sha256` is that hash, so a
restarted flusher sends the same commitment. A rejection in a pool with a challenge window is
`Rejected` on-chain until the window passes (or a quorum of other validators contests it):
`submissions.status` gains 'rejected', and `validations.settled_at` marks a sent rejection whose
outcome (executed, or overturned) the reporting validator has seen, so its execution pass stops
looking at it.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE validations
    ADD COLUMN evidence_sha256 BYTEA CHECK (octet_length(evidence_sha256) = 32),
    ADD COLUMN settled_at TIMESTAMPTZ;
CREATE INDEX validations_unsettled ON validations (validator, sent_at)
    WHERE state = 'sent' AND verdict = 'invalid' AND settled_at IS NULL;
ALTER TABLE submissions DROP CONSTRAINT submissions_status_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_status_check
    CHECK (status IN ('pending', 'accepted', 'invalid', 'finalized', 'forfeited', 'rejected'));
"""

DOWNGRADE = """
UPDATE submissions SET status = 'pending' WHERE status = 'rejected';
ALTER TABLE submissions DROP CONSTRAINT submissions_status_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_status_check
    CHECK (status IN ('pending', 'accepted', 'invalid', 'finalized', 'forfeited'));
DROP INDEX IF EXISTS validations_unsettled;
ALTER TABLE validations DROP COLUMN IF EXISTS settled_at, DROP COLUMN IF EXISTS evidence_sha256;
"""


def upgrade() -> None:
    """Add the evidence hash, the settlement mark and the 'rejected' submission status."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them; rejected submissions read as pending again."""
    op.execute(DOWNGRADE)
