"""How long each verdict took: `verdicts.lag_blocks`.

Revision ID: 0015
Revises: 0014

A validator's lag is how far behind the submissions it judges it runs: for each verdict, the blocks
from the log that submitted the work (`submissions.block_number`) to the verdict's own log. The
indexer's projector writes it with the verdict (`proofpool.backend.db.projections.VERDICT`); this
revision computes it for the verdicts indexed before it, from the same two rows, so a rebuild from
the chain (`proofpool ledger verify`) finds the same value. Null only for a verdict whose submission
the ledger does not hold, which the chain's contract never produces.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE verdicts ADD COLUMN lag_blocks BIGINT CHECK (lag_blocks >= 0);
UPDATE verdicts v SET lag_blocks = v.block_number - s.block_number
FROM submissions s
WHERE s.pool_id = v.pool_id AND s.work_key = v.work_key;
"""

DOWNGRADE = "ALTER TABLE verdicts DROP COLUMN lag_blocks;"


def upgrade() -> None:
    """Add the column and fill it for the verdicts already indexed."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it."""
    op.execute(DOWNGRADE)
