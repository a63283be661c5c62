"""The validators' verdict store: one row per submission a validator claimed, decided and sent.

Revision ID: 0004
Revises: 0003

Validation tasks claim a submission, record their verdict here, and one flusher per validator
key sends the decided verdicts on-chain (see `validator/store.py`, `validator/verdicts.py` and
docs/validator-verdicts.md). PostgreSQL is the buffer between the two: a verdict is never lost
when a process dies, and the primary key makes one row, hence one verdict, per submission.

Unlike the chain tables this is not rebuildable from the chain (claims, leases, evidence and
undelivered verdicts exist only here), so it has no block_number; `tx_hash` ties a sent row to
its transaction.

- `lease_until`: the claimer's lease; another validator may take an undecided row over after it.
- `note`: why a row was superseded, or how a row was found sent on-chain (recovered after a crash).
- `validations_waiting` (partial, decided rows only): the flusher's "my decided verdicts by pool,
  oldest first"; it holds only the few rows waiting to be sent, so it stays small.
- `validations_validator_state`: the status command's counts per validator, state and verdict.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE validations (
    pool_id      BIGINT NOT NULL,
    work_key     BYTEA NOT NULL CHECK (octet_length(work_key) = 32),
    validator    TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'claimed' CHECK (state IN ('claimed', 'decided', 'sent', 'superseded')),
    verdict      TEXT CHECK (verdict IN ('accepted', 'invalid')),
    reason       TEXT,
    evidence     JSONB NOT NULL DEFAULT '{}'::jsonb,
    claimed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until  TIMESTAMPTZ NOT NULL,
    decided_at   TIMESTAMPTZ,
    sent_at      TIMESTAMPTZ,
    tx_hash      BYTEA,
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   TEXT,
    note         TEXT,
    PRIMARY KEY (pool_id, work_key),
    -- a verdict and its time exist exactly when the row left 'claimed'
    CONSTRAINT validations_verdict_when_decided CHECK ((state = 'claimed') = (verdict IS NULL)),
    CONSTRAINT validations_decided_at_when_decided CHECK ((state = 'claimed') = (decided_at IS NULL)),
    CONSTRAINT validations_sent_at_when_sent CHECK ((state = 'sent') = (sent_at IS NOT NULL)),
    -- the reason of an invalid verdict goes on-chain as a bytes32
    CONSTRAINT validations_invalid_reason CHECK (
        verdict IS DISTINCT FROM 'invalid' OR (reason IS NOT NULL AND octet_length(reason) BETWEEN 1 AND 32)
    )
);
CREATE INDEX validations_waiting ON validations (validator, verdict, pool_id, decided_at, work_key)
    WHERE state = 'decided';
CREATE INDEX validations_validator_state ON validations (validator, state, verdict);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS validations;
"""


def upgrade() -> None:
    """Create the verdict store."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it. Verdicts already on-chain stay in the chain tables (`verdicts`); decided but unsent
    rows are lost with it, so stop the validators and let their flushers drain first."""
    op.execute(DOWNGRADE)
