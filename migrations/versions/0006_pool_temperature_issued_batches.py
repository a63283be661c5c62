"""The pool's sampling temperature, and the highest batch handed to each node per checkpoint.

Revision ID: 0006
Revises: 0005

`pool_assignment_config.temperature`: the temperature is part of the assignment (NULL keeps the
default of `proofpool.core.assignment.AssignmentConfig`), so a node cannot choose it; validators reject
rows sampled at any other temperature.

`issued_batches`: the orchestrator hands out batches 0, 1, 2, ... of a checkpoint version, one
after the node reports the previous one, and records the highest it handed out here. A validator
accepts a file only for a batch up to that number, so a node cannot search the batch counters
ahead of its own for easy problems. `node_batches` holds only the current version's counter; this
table keeps every version, as validators judge files of older versions inside the async window.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE pool_assignment_config
    ADD COLUMN temperature REAL CHECK (temperature BETWEEN 0.05 AND 10);

CREATE TABLE issued_batches (
    pool_id        BIGINT NOT NULL,
    node           TEXT NOT NULL,
    model_version  BIGINT NOT NULL CHECK (model_version >= 0),
    last_batch     BIGINT NOT NULL CHECK (last_batch >= 0),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, node, model_version)
);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS issued_batches;
ALTER TABLE pool_assignment_config DROP COLUMN IF EXISTS temperature;
"""


def upgrade() -> None:
    """Add the pool temperature and the issued-batch record."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop both; validators then search every batch counter and trust the row temperatures' range only."""
    op.execute(DOWNGRADE)
