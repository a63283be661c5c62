"""One accepted rollout file per assigned batch: the validators' `batch_claims`.

Revision ID: 0005
Revises: 0004

A batch (pool, node, checkpoint version, batch counter) fixes a file's problems and sampling seed
(`proofpool.core.assignment`), so the same rows can be re-encoded into a file with other bytes, hence
another work key, and would pass every per-file check a second time. A validator that accepts a
file claims its batch here, in the transaction that records the verdict; a second file of the same
batch finds the first one's key and is invalidated as `duplicate_batch` (see
`validator/checks/assignment.py`). The primary key is the arbiter between validators.

Like `validations`, this is validator state, not a chain projection: no block_number.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE batch_claims (
    pool_id        BIGINT NOT NULL,
    node           TEXT NOT NULL,
    model_version  BIGINT NOT NULL CHECK (model_version >= 0),
    batch          BIGINT NOT NULL CHECK (batch >= 0),
    work_key       BYTEA NOT NULL CHECK (octet_length(work_key) = 32),
    claimed_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, node, model_version, batch)
);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS batch_claims;
"""


def upgrade() -> None:
    """Create the batch claims."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them; files judged afterwards could again be accepted twice for one batch."""
    op.execute(DOWNGRADE)
