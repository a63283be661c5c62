"""The ledger's lookups and the market view: indexes for transaction and bundle-file search, and
`market`, one row per pool with what a market page shows of it.

Revision ID: 0013
Revises: 0012

The ledger API filters submissions, verdicts, slashes, rewards and checkpoints by the transaction
that logged them (`tx_hash=`), submissions by the one that last changed their status
(`status_tx_hash=`) and by a file they hold (`file=`: the submission whose work key is that hash
or whose bundle lists it). Each is a handful of rows among millions, so each needs an index that
finds them without a walk:

- `submissions_tx_position (tx_hash, block_number, log_index)` and
  `checkpoints_tx_position (tx_hash, block_number, log_index)`: a transaction's rows in key order
  (either direction). verdicts, slashes and rewards need none: their UNIQUE (tx_hash, log_index…)
  constraints of revision 0001 already lead with tx_hash, and one transaction's few rows sort in
  memory.
- `submissions_status_tx_position (status_tx_hash, block_number, log_index)`, partial (NULL while
  pending): the submissions whose status a transaction changed last, the only record of a
  forfeit, an expiry or a rejection.
- `submissions_work_key (work_key)`: a work key in any pool (the primary key leads with pool_id).
- `submissions_file_keys`, a GIN index on `file_keys`: the bundles holding a file
  (`file_keys @> ARRAY[key]`); single-file submissions have NULL there and add nothing to it. With
  `submissions_work_key` the planner ORs the two bitmaps for a `file=` lookup.

Newest-first pages walk the indexes of revisions 0001 and 0003 backwards and need none of their own.

The view `market` (the `market` listing) joins each pool's row with its `pool_stats` row (NULLs
before the pool's first submission, slash or credit), the version of its latest checkpoint
(`checkpoints_pkey` read backwards) and the count of its active memberships (its rows of
`memberships_pkey`). A page of 50 pools is then one indexed query, where a market page asked
three lists per pool; the subqueries run only for the rows the page returns.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

INDEXES = {
    "submissions_tx_position": "ON submissions (tx_hash, block_number, log_index)",
    "submissions_status_tx_position": (
        "ON submissions (status_tx_hash, block_number, log_index) WHERE status_tx_hash IS NOT NULL"
    ),
    "checkpoints_tx_position": "ON checkpoints (tx_hash, block_number, log_index)",
    "submissions_work_key": "ON submissions (work_key)",
    "submissions_file_keys": "ON submissions USING gin (file_keys) WHERE file_keys IS NOT NULL",
}

MARKET = """
CREATE VIEW market AS
SELECT p.pool_id, p.creator, p.manager, p.treasury, p.status, p.model_uri, p.spec_sha256, p.reward_per_unit,
       p.validator_fee, p.slash_amount, p.dispute_window, p.validator_slash_share_bps, p.budget, p.block_number,
       p.tx_hash,
       s.submissions, s.files, s.pending, s.accepted, s.rejected, s.invalid, s.finalized, s.forfeited, s.expired,
       s.work_units_accepted, s.slashed, s.rewards_paid, s.validator_fees,
       (SELECT max(c.version) FROM checkpoints c WHERE c.pool_id = p.pool_id) AS latest_checkpoint,
       (SELECT count(*) FROM memberships m WHERE m.pool_id = p.pool_id AND m.state = 'active') AS active_members
FROM pools p
LEFT JOIN pool_stats s ON s.pool_id = p.pool_id
"""


def upgrade() -> None:
    """Create the lookup indexes and the market view."""
    for name, definition in INDEXES.items():
        op.execute(f"CREATE INDEX {name} {definition}")
    op.execute(MARKET)


def downgrade() -> None:
    """Drop them (the lookups then scan their tables; the market asks each pool's lists)."""
    op.execute("DROP VIEW IF EXISTS market")
    for name in reversed(INDEXES):
        op.execute(f"DROP INDEX IF EXISTS {name}")
