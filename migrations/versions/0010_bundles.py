"""The files of a bundled submission (`WorkBundleSubmitted.fileKeys` / `fileUnits`).

Revision ID: 0010
Revises: 0009

A bundle records many rollout files in one `submitWorkBundle` transaction. It is one on-chain
`Work` record keyed by its bundle key, so it is one ordinary `submissions` row (work_key = bundle
key, work_units = the sum of the files' units); the files themselves are only in calldata and in
the event, so this row is where the ledger keeps them:

- `submissions.file_keys BYTEA[]`: each file's key (its sha256), in the event's (ascending) order;
- `submissions.file_units BIGINT[]`: each file's work units, same length and order.

Both are NULL for a `submitWork` submission (one file whose key is the row's work_key) and both
set for a bundle; the CHECK keeps them consistent, so a reader needs no other rule. Rows indexed
before this revision are all single files, which NULL already says.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE submissions
    ADD COLUMN file_keys BYTEA[],
    ADD COLUMN file_units BIGINT[],
    ADD CONSTRAINT submissions_files_check CHECK (
        (file_keys IS NULL AND file_units IS NULL)
        OR (file_keys IS NOT NULL AND file_units IS NOT NULL
            AND cardinality(file_keys) >= 1
            AND cardinality(file_keys) = cardinality(file_units))
    );
"""

DOWNGRADE = """
ALTER TABLE submissions
    DROP CONSTRAINT IF EXISTS submissions_files_check,
    DROP COLUMN IF EXISTS file_units,
    DROP COLUMN IF EXISTS file_keys;
"""


def upgrade() -> None:
    """Add the file arrays of bundled submissions (NULL: a single-file submission)."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them; a bundle's row then keeps only its key and summed units, not its files."""
    op.execute(DOWNGRADE)
