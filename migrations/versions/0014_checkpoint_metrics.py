"""The trainer's figures per checkpoint: `checkpoint_metric_reads` and the `checkpoint_metrics` view.

Revision ID: 0014
Revises: 0013

A published checkpoint carries its trainer's figures in `proofpool-metrics.json`, listed in its
manifest (docs/checkpoints.md). The indexer's checkpoint metrics reader
(`proofpool.backend.indexer.checkpoint_metrics`) reads the file of each row of `checkpoints`,
verified against the manifest and the manifest against the chain's hash, and records what it found:

- `checkpoint_metric_reads`, one row per (pool, version, manifest sha256) read: `status`
  (verified, unlisted, missing, mismatch, malformed), `detail` (why not verified), the figures
  the ledger serves (null unless verified, or when the file has no such figure), `attempts`,
  `read_at`, and `retry_at`, when a `missing` read is tried again (null: final). Keyed by the
  manifest hash too: a reorg that replaces a checkpoint leaves the old row behind, unserved, and
  a chain that brings the same checkpoint back finds its row again.
- `checkpoint_metrics`, the view the ledger listing of that name pages (`proofpool.core
  .ledger_listings.CHECKPOINT_METRICS`): one row per row of `checkpoints`, joined with the read of
  exactly its manifest hash, `pending` while there is none. So the listing never serves figures of
  a checkpoint the chain no longer has, and pages in the order of `checkpoints`' primary key.
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE checkpoint_metric_reads (
    pool_id          BIGINT NOT NULL,
    version          BIGINT NOT NULL,
    manifest_sha256  BYTEA NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('verified', 'unlisted', 'missing', 'mismatch', 'malformed')),
    detail           TEXT,
    attempts         INTEGER NOT NULL DEFAULT 1,
    read_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    retry_at         TIMESTAMPTZ,
    mean_reward      DOUBLE PRECISION,
    loss             DOUBLE PRECISION,
    samples          BIGINT,
    tokens           BIGINT,
    grad_norm        DOUBLE PRECISION,
    inner_loss       DOUBLE PRECISION,
    inner_loss_last  DOUBLE PRECISION,
    delta_norm       DOUBLE PRECISION,
    contributors     BIGINT,
    PRIMARY KEY (pool_id, version, manifest_sha256)
);
CREATE INDEX checkpoint_metric_reads_retry ON checkpoint_metric_reads (retry_at) WHERE retry_at IS NOT NULL;

CREATE VIEW checkpoint_metrics AS
SELECT c.pool_id, c.version, c.manifest_sha256, COALESCE(r.status, 'pending') AS status, r.detail,
       r.mean_reward, r.loss, r.samples, r.tokens, r.grad_norm,
       r.inner_loss, r.inner_loss_last, r.delta_norm, r.contributors
FROM checkpoints c
LEFT JOIN checkpoint_metric_reads r
       ON r.pool_id = c.pool_id AND r.version = c.version AND r.manifest_sha256 = c.manifest_sha256;
"""

DOWNGRADE = """
DROP VIEW IF EXISTS checkpoint_metrics;
DROP TABLE IF EXISTS checkpoint_metric_reads;
"""


def upgrade() -> None:
    """Create the reads table and the listing's view."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them (the figures stay in the store, in each checkpoint's metrics record)."""
    op.execute(DOWNGRADE)
