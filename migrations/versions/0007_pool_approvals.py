"""Providers' approvals of pools (`PoolApproved`, `PoolApprovalRevoked`).

Revision ID: 0007
Revises: 0006

A node can join only a pool its provider approved, with the most the pool may slash from the
provider in total (`ComputePool.approvePool`). The orchestrator reads this projection before it
signs an invite, so a node of a provider that has not approved the pool is told why instead of
being handed an invite the contract refuses.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE pool_approvals (
    pool_id       BIGINT NOT NULL,
    provider      TEXT NOT NULL,
    max_slash     NUMERIC(78, 0) NOT NULL,
    approved      BOOLEAN NOT NULL,
    block_number  BIGINT NOT NULL,
    tx_hash       BYTEA NOT NULL,
    PRIMARY KEY (pool_id, provider)
);
CREATE INDEX pool_approvals_provider ON pool_approvals (provider);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS pool_approvals;
"""


def upgrade() -> None:
    """Add the approvals projection."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it; the orchestrator then signs invites without knowing about approvals."""
    op.execute(DOWNGRADE)
