"""Chain tables: raw events, blocks seen, the indexer cursor, the projections and the outbox.

Revision ID: 0001
Revises: (none)

Conventions (shared by every later revision):
- addresses are checksummed TEXT; hashes and keys BYTEA; uint256 NUMERIC(78,0); times TIMESTAMPTZ;
- every projection row carries `block_number` and `tx_hash` of the log that last changed it
  (submissions, verdicts, slashes, rewards, checkpoints also carry its `log_index`), so an auditor
  can tie each row to a transaction and keyset pages can order by `(block_number, log_index)`;
- projections have no foreign keys to each other: the indexer rebuilds them from `chain_events`
  after a reorg, table by table, and an event for an unseen row must never fail the rebuild.

Off-chain tables (announced nodes, uploads, ...) belong to later revisions of their owners.
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE chain_blocks (
    number       BIGINT PRIMARY KEY,
    hash         BYTEA NOT NULL,
    parent_hash  BYTEA NOT NULL,
    timestamp    TIMESTAMPTZ NOT NULL
);

CREATE TABLE indexer_state (
    id          SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    chain_id    BIGINT NOT NULL,
    next_block  BIGINT NOT NULL CHECK (next_block >= 0),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE chain_events (
    id            BIGSERIAL PRIMARY KEY,
    block_number  BIGINT NOT NULL,
    block_hash    BYTEA NOT NULL,
    tx_hash       BYTEA NOT NULL,
    log_index     INTEGER NOT NULL,
    contract      TEXT NOT NULL,
    address       TEXT NOT NULL,
    name          TEXT NOT NULL,
    args          JSONB NOT NULL,
    UNIQUE (tx_hash, log_index)
);
CREATE INDEX chain_events_position ON chain_events (block_number, log_index);
CREATE INDEX chain_events_name ON chain_events (name, block_number, log_index);

CREATE TABLE providers (
    address                TEXT PRIMARY KEY,
    active_stake           NUMERIC(78, 0) NOT NULL DEFAULT 0,
    unbonding              NUMERIC(78, 0) NOT NULL DEFAULT 0,
    unbonding_matures_at   TIMESTAMPTZ,
    slashed_total          NUMERIC(78, 0) NOT NULL DEFAULT 0,
    compute_units          NUMERIC(78, 0) NOT NULL DEFAULT 0,
    registered_block       BIGINT,
    block_number           BIGINT NOT NULL,
    tx_hash                BYTEA NOT NULL
);
CREATE INDEX providers_position ON providers (block_number);

CREATE TABLE nodes (
    address        TEXT PRIMARY KEY,
    provider       TEXT NOT NULL,
    compute_units  BIGINT NOT NULL,
    specs_hash     BYTEA NOT NULL,
    attested       BOOLEAN NOT NULL DEFAULT false,
    active         BOOLEAN NOT NULL DEFAULT true,
    block_number   BIGINT NOT NULL,
    tx_hash        BYTEA NOT NULL
);
CREATE INDEX nodes_provider ON nodes (provider);

CREATE TABLE pools (
    pool_id                    BIGINT PRIMARY KEY,
    creator                    TEXT NOT NULL,
    manager                    TEXT NOT NULL,
    treasury                   TEXT NOT NULL,
    status                     TEXT NOT NULL CHECK (status IN ('created', 'active', 'closed')),
    model_uri                  TEXT NOT NULL,
    reward_per_unit            NUMERIC(78, 0) NOT NULL,
    validator_fee              NUMERIC(78, 0) NOT NULL,
    slash_amount               NUMERIC(78, 0) NOT NULL,
    dispute_window             BIGINT NOT NULL,
    validator_slash_share_bps  INTEGER NOT NULL,
    budget                     NUMERIC(78, 0) NOT NULL DEFAULT 0,
    block_number               BIGINT NOT NULL,
    tx_hash                    BYTEA NOT NULL
);

-- state NULL: never joined (a manager may blacklist any address); provider NULL likewise.
CREATE TABLE memberships (
    pool_id       BIGINT NOT NULL,
    node          TEXT NOT NULL,
    provider      TEXT,
    state         TEXT CHECK (state IN ('active', 'left', 'ejected', 'slashed')),
    blacklisted   BOOLEAN NOT NULL DEFAULT false,
    block_number  BIGINT NOT NULL,
    tx_hash       BYTEA NOT NULL,
    PRIMARY KEY (pool_id, node)
);
CREATE INDEX memberships_node ON memberships (node);
CREATE INDEX memberships_provider ON memberships (provider);

CREATE TABLE submissions (
    pool_id        BIGINT NOT NULL,
    work_key       BYTEA NOT NULL,
    node           TEXT NOT NULL,
    provider       TEXT NOT NULL,
    work_units     BIGINT NOT NULL,
    model_version  BIGINT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'accepted', 'invalid', 'finalized', 'forfeited')),
    submitted_at   TIMESTAMPTZ NOT NULL,
    block_number   BIGINT NOT NULL,
    tx_hash        BYTEA NOT NULL,
    log_index      INTEGER NOT NULL,
    status_block   BIGINT,
    status_tx_hash BYTEA,
    PRIMARY KEY (pool_id, work_key)
);
CREATE INDEX submissions_position ON submissions (block_number, log_index);
CREATE INDEX submissions_pool_position ON submissions (pool_id, block_number, log_index);
CREATE INDEX submissions_provider_position ON submissions (provider, block_number, log_index);
CREATE INDEX submissions_node_position ON submissions (node, block_number, log_index);
CREATE INDEX submissions_status_position ON submissions (status, block_number, log_index);
CREATE INDEX submissions_submitted_at ON submissions (submitted_at);

CREATE TABLE verdicts (
    id            BIGSERIAL PRIMARY KEY,
    pool_id       BIGINT NOT NULL,
    work_key      BYTEA NOT NULL,
    verdict       TEXT NOT NULL CHECK (verdict IN ('accepted', 'invalid')),
    validator     TEXT NOT NULL,
    reason        TEXT,
    block_number  BIGINT NOT NULL,
    tx_hash       BYTEA NOT NULL,
    log_index     INTEGER NOT NULL,
    UNIQUE (tx_hash, log_index)
);
CREATE INDEX verdicts_position ON verdicts (block_number, log_index);
CREATE INDEX verdicts_pool_position ON verdicts (pool_id, block_number, log_index);
CREATE INDEX verdicts_validator_position ON verdicts (validator, block_number, log_index);
CREATE INDEX verdicts_work_key ON verdicts (pool_id, work_key);

CREATE TABLE slashes (
    id               BIGSERIAL PRIMARY KEY,
    pool_id          BIGINT NOT NULL,
    work_key         BYTEA NOT NULL,
    provider         TEXT NOT NULL,
    validator        TEXT NOT NULL,
    validator_share  NUMERIC(78, 0) NOT NULL,
    treasury         TEXT NOT NULL,
    treasury_share   NUMERIC(78, 0) NOT NULL,
    amount           NUMERIC(78, 0) NOT NULL,
    block_number     BIGINT NOT NULL,
    tx_hash          BYTEA NOT NULL,
    log_index        INTEGER NOT NULL,
    UNIQUE (tx_hash, log_index)
);
CREATE INDEX slashes_position ON slashes (block_number, log_index);
CREATE INDEX slashes_pool_position ON slashes (pool_id, block_number, log_index);
CREATE INDEX slashes_provider_position ON slashes (provider, block_number, log_index);

CREATE TABLE rewards (
    id            BIGSERIAL PRIMARY KEY,
    account       TEXT NOT NULL,
    pool_id       BIGINT,
    work_key      BYTEA,
    kind          TEXT NOT NULL CHECK (kind IN ('provider_reward', 'validator_fee', 'slash_share', 'withdrawal')),
    amount        NUMERIC(78, 0) NOT NULL,
    block_number  BIGINT NOT NULL,
    tx_hash       BYTEA NOT NULL,
    log_index     INTEGER NOT NULL,
    UNIQUE (tx_hash, log_index, account, kind)
);
CREATE INDEX rewards_position ON rewards (block_number, log_index);
CREATE INDEX rewards_account_position ON rewards (account, block_number, log_index);
CREATE INDEX rewards_pool_position ON rewards (pool_id, block_number, log_index);

CREATE TABLE checkpoints (
    pool_id          BIGINT NOT NULL,
    version          BIGINT NOT NULL,
    manifest_sha256  BYTEA NOT NULL,
    uri              TEXT NOT NULL,
    block_number     BIGINT NOT NULL,
    tx_hash          BYTEA NOT NULL,
    log_index        INTEGER NOT NULL,
    PRIMARY KEY (pool_id, version)
);

CREATE TABLE validators (
    address       TEXT PRIMARY KEY,
    active        BOOLEAN NOT NULL,
    block_number  BIGINT NOT NULL,
    tx_hash       BYTEA NOT NULL
);

CREATE TABLE outbox (
    id             BIGSERIAL PRIMARY KEY,
    task           TEXT NOT NULL,
    args           JSONB NOT NULL,
    dedupe_key     TEXT NOT NULL UNIQUE,
    block_number   BIGINT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    dispatched_at  TIMESTAMPTZ
);
CREATE INDEX outbox_undispatched ON outbox (id) WHERE dispatched_at IS NULL;
CREATE INDEX outbox_block ON outbox (block_number);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS outbox;
DROP TABLE IF EXISTS validators;
DROP TABLE IF EXISTS checkpoints;
DROP TABLE IF EXISTS rewards;
DROP TABLE IF EXISTS slashes;
DROP TABLE IF EXISTS verdicts;
DROP TABLE IF EXISTS submissions;
DROP TABLE IF EXISTS memberships;
DROP TABLE IF EXISTS pools;
DROP TABLE IF EXISTS nodes;
DROP TABLE IF EXISTS providers;
DROP TABLE IF EXISTS chain_events;
DROP TABLE IF EXISTS indexer_state;
DROP TABLE IF EXISTS chain_blocks;
"""


def upgrade() -> None:
    """Create the chain tables."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop the chain tables (all chain data is rebuildable from the chain)."""
    op.execute(DOWNGRADE)
