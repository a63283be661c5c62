"""Verdict evidence, rejections that wait for their challenge window, and validators' reviews of them.

Revision ID: 0008
Revises: 0007

Every verdict commits on-chain to the sha256 of its evidence, a JSON document the validator
keeps in the object store (`proofpool.validator.evidence`): `validations.evidence_sha256` is that hash, so a
restarted flusher sends the same commitment. A rejection in a pool with a challenge window is
`Rejected` on-chain until the window passes (or a quorum of other validators contests it):
`submissions.status` gains 'rejected' (and 'expired': Pending work of a closed pool that nobody
judged within its wind-up, `ComputePool.expireWork`), and `validations.settled_at` marks a sent rejection whose
outcome (executed, or overturned) the reporting validator has seen, so its execution pass stops
looking at it.

`reviews` holds the other side of the game: each validator's review of another validator's
rejection (`validator.reviews`). A row is queued when the validator sees the rejection indexed,
decided by a full recomputation of the file ('upheld', or 'contest' with the evidence hash), then
'sent' (the `contestRejection` transaction) and 'settled' once the rejection is executed or
overturned; or 'skipped' (the validator's own rejection, its own node's work, a pool it does not
serve, or a rejection settled before the contest could go out). One row per validator
and rejection: `rejected_block` tells apart a second rejection of a key whose first was overturned.
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
    CHECK (status IN ('pending', 'accepted', 'invalid', 'finalized', 'forfeited', 'rejected', 'expired'));

CREATE TABLE reviews (
    pool_id          BIGINT NOT NULL,
    work_key         BYTEA NOT NULL CHECK (octet_length(work_key) = 32),
    rejected_block   BIGINT NOT NULL,
    validator        TEXT NOT NULL,
    state            TEXT NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'upheld', 'contest', 'sent', 'settled', 'skipped')),
    reason           TEXT,
    evidence_sha256  BYTEA CHECK (octet_length(evidence_sha256) = 32),
    queued_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at       TIMESTAMPTZ,
    tx_hash          BYTEA,
    note             TEXT,
    PRIMARY KEY (pool_id, work_key, rejected_block, validator),
    CONSTRAINT reviews_contest_has_evidence CHECK (state NOT IN ('contest', 'sent') OR evidence_sha256 IS NOT NULL)
);
CREATE INDEX reviews_open ON reviews (validator, state, queued_at) WHERE state IN ('queued', 'contest', 'sent');
"""

DOWNGRADE = """
DROP TABLE IF EXISTS reviews;
UPDATE submissions SET status = 'pending' WHERE status IN ('rejected', 'expired');
ALTER TABLE submissions DROP CONSTRAINT submissions_status_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_status_check
    CHECK (status IN ('pending', 'accepted', 'invalid', 'finalized', 'forfeited'));
DROP INDEX IF EXISTS validations_unsettled;
ALTER TABLE validations DROP COLUMN IF EXISTS settled_at, DROP COLUMN IF EXISTS evidence_sha256;
"""


def upgrade() -> None:
    """Add the evidence hash, the settlement mark, the 'rejected' submission status and `reviews`."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them; rejected submissions read as pending again."""
    op.execute(DOWNGRADE)
