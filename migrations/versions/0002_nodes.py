"""Off-chain tables of discovery and the orchestrator: node announcements, issued invites,
per-node batch counters, per-pool assignment settings.

Revision ID: 0002
Revises: 0001

None of these can be rebuilt from the chain, so none carries block_number/tx_hash: an
announcement is what a node told us, an invite what the manager key signed, a batch counter
how far a node got. Liveness (heartbeats) is in Redis, not here: it changes every few seconds.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE node_announcements (
    address       TEXT PRIMARY KEY,
    provider      TEXT NOT NULL,
    specs         JSONB NOT NULL DEFAULT '{}'::jsonb,
    endpoint      TEXT,
    announced_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX node_announcements_provider ON node_announcements (provider);

-- `nonce` is the invite's EIP-712 nonce: unique per row, so every signed digest is new.
-- `membership_block`: block of the node's membership row when the invite was signed (NULL: none);
-- an invite is handed out again only while that is unchanged, i.e. while it cannot have been used.
CREATE TABLE pool_invites (
    nonce             BIGSERIAL PRIMARY KEY,
    pool_id           BIGINT NOT NULL,
    node              TEXT NOT NULL,
    provider          TEXT NOT NULL,
    manager           TEXT NOT NULL,
    expiry            BIGINT NOT NULL,
    signature         BYTEA NOT NULL,
    membership_block  BIGINT,
    issued_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX pool_invites_node ON pool_invites (pool_id, node, expiry DESC);

-- The batch a node works on for one checkpoint version; a new version restarts at 0.
CREATE TABLE node_batches (
    pool_id        BIGINT NOT NULL,
    node           TEXT NOT NULL,
    model_version  BIGINT NOT NULL,
    batch          BIGINT NOT NULL DEFAULT 0 CHECK (batch >= 0),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, node)
);

-- NULL columns keep the defaults of proofpool.core.assignment.AssignmentConfig.
CREATE TABLE pool_assignment_config (
    pool_id     BIGINT PRIMARY KEY,
    batch_size  INTEGER CHECK (batch_size BETWEEN 1 AND 4096),
    group_size  INTEGER CHECK (group_size BETWEEN 1 AND 4096),
    max_tokens  INTEGER CHECK (max_tokens BETWEEN 1 AND 4096),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS pool_assignment_config;
DROP TABLE IF EXISTS node_batches;
DROP TABLE IF EXISTS pool_invites;
DROP TABLE IF EXISTS node_announcements;
"""


def upgrade() -> None:
    """Create the discovery and orchestrator tables."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them (announcements and counters are rebuilt as nodes announce and heartbeat again)."""
    op.execute(DOWNGRADE)
