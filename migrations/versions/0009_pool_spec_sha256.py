"""The pool spec hash each pool committed to at creation (`PoolCreated.specSha256`).

Revision ID: 0009
Revises: 0008

`pools.spec_sha256` is the sha256 of the pool spec a `spec://` pool runs, 32 zero bytes for a pool
without one, exactly as the contract stored it. The orchestrator refuses to hand out work for a
pool whose spec hash its model URI does not name (`proofpool.envs.check_spec_commitment`), the
ledger lists it, and `proofpool ledger verify` compares it like every other projected column.
Rows indexed before this revision came from a ComputePool without the field: they read as "no
spec" (the default), and a rebuild from such a chain gives the same.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE pools
    ADD COLUMN spec_sha256 BYTEA NOT NULL DEFAULT decode(repeat('00', 32), 'hex')
        CHECK (octet_length(spec_sha256) = 32);
"""

DOWNGRADE = """
ALTER TABLE pools DROP COLUMN IF EXISTS spec_sha256;
"""


def upgrade() -> None:
    """Add the spec hash of every pool (zero bytes: no spec)."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it; the orchestrator then cannot check a pool's spec hash against its model URI."""
    op.execute(DOWNGRADE)
