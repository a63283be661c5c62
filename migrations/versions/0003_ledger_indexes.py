"""Indexes the public ledger's submission pages need beyond those of revision 0001.

Revision ID: 0003
Revises: 0002

- `submissions_pool_status_position (pool_id, status, block_number, log_index)`: "pool P, status
  S" walks key order directly instead of walking the pool's rows and filtering by status (the
  trainer's "accepted work of pool P", an auditor's "invalid work of pool P").
- `submissions_time_position (submitted_at) INCLUDE (block_number, log_index, status)`: a time
  window's keys (and status filter) read from the index alone, so a `since` page sorts only the
  window's keys (see `proofpool.backend.db.ledger.page_sql`). It covers every query of 0001's
  `submissions_submitted_at`, which could be dropped.
- `submissions_pool_time_position (pool_id, submitted_at) INCLUDE (block_number, log_index, status)`:
  the same for a time window within one pool ("pool P last week").
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


COVERING = "INCLUDE (block_number, log_index, status)"
INDEXES = {
    "submissions_pool_status_position": "ON submissions (pool_id, status, block_number, log_index)",
    "submissions_time_position": f"ON submissions (submitted_at) {COVERING}",
    "submissions_pool_time_position": f"ON submissions (pool_id, submitted_at) {COVERING}",
}


def upgrade() -> None:
    """Create the ledger's submission indexes."""
    for name, definition in INDEXES.items():
        op.execute(f"CREATE INDEX {name} {definition}")


def downgrade() -> None:
    """Drop them (0001's indexes still serve every page, slower)."""
    for name in reversed(INDEXES):
        op.execute(f"DROP INDEX {name}")
