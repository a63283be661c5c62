"""Indexes the public ledger's submission pages need beyond those of revision 0001.

Revision ID: 0003
Revises: 0002

- `submissions_pool_status_position (pool_id, status, block_number, log_index)`: "pool P, status
  S" walks key order directly instead of walking the pool's rows and filtering by status (the
  trainer's "accepted work of pool P", an auditor's "invalid work of pool P").
- `submissions_time_position (submitted_at) INCLUDE (block_number, log_index, status)`: a time
  window's keys (and status filter) read from the index alone, so a `since` page sorts only the
  window's keys (see `backend.db.ledger.page_sql`). It covers every query of 0001's
  `submissions_submitted_at`, which could be dropped.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the ledger's submission indexes."""
    op.execute(
        "CREATE INDEX submissions_pool_status_position ON submissions (pool_id, status, block_number, log_index)"
    )
    op.execute(
        "CREATE INDEX submissions_time_position ON submissions (submitted_at) INCLUDE (block_number, log_index, status)"
    )


def downgrade() -> None:
    """Drop them (0001's indexes still serve every page, slower)."""
    op.execute("DROP INDEX submissions_time_position")
    op.execute("DROP INDEX submissions_pool_status_position")
