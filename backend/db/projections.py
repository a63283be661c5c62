"""SQL of the chain projections (providers, nodes, pools, memberships, submissions, verdicts,
slashes, rewards, checkpoints, validators), one statement per state change.

Parameters common to every statement: `block` (block number), `tx` (tx hash bytes), `log`
(log index): the position of the log that made the change, kept on the row it changed.
Inserts keyed by a log are `ON CONFLICT DO NOTHING`; upserts of entity rows are written so an
event about a row never seen (a history that starts mid-way) still succeeds. The functions that
fill these parameters from events are in `proofpool.backend.indexer.projections`.
"""

from __future__ import annotations

from psycopg import Connection

PROJECTION_TABLES: tuple[str, ...] = (
    "providers",
    "nodes",
    "pools",
    "memberships",
    "pool_approvals",
    "submissions",
    "verdicts",
    "slashes",
    "rewards",
    "checkpoints",
    "validators",
)
"""Tables computed from `chain_events` alone; a rebuild truncates exactly these."""

# --- providers and stakes -------------------------------------------------------------------

PROVIDER_REGISTERED = """
    INSERT INTO providers (address, registered_block, block_number, tx_hash)
    VALUES (%(provider)s, %(block)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET registered_block = EXCLUDED.registered_block, block_number = EXCLUDED.block_number,
            tx_hash = EXCLUDED.tx_hash"""

STAKED = """
    INSERT INTO providers (address, active_stake, block_number, tx_hash)
    VALUES (%(provider)s, %(active_stake)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET active_stake = EXCLUDED.active_stake, block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

UNBOND_STARTED = """
    INSERT INTO providers (address, unbonding, unbonding_matures_at, block_number, tx_hash)
    VALUES (%(provider)s, %(unbonding)s, to_timestamp(%(matures_at)s), %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET active_stake = providers.active_stake - %(amount)s, unbonding = EXCLUDED.unbonding,
            unbonding_matures_at = EXCLUDED.unbonding_matures_at,
            block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

WITHDRAWN = """
    INSERT INTO providers (address, block_number, tx_hash) VALUES (%(provider)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET unbonding = 0, unbonding_matures_at = NULL,
            block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

SLASHED = """
    INSERT INTO providers (address, slashed_total, block_number, tx_hash)
    VALUES (%(provider)s, %(slashed)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET unbonding = providers.unbonding - %(from_unbonding)s,
            active_stake = providers.active_stake - %(from_active)s,
            slashed_total = providers.slashed_total + %(slashed)s,
            block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

PROVIDER_COMPUTE_UNITS = """
    INSERT INTO providers (address, compute_units, block_number, tx_hash)
    VALUES (%(provider)s, %(compute_units)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET compute_units = EXCLUDED.compute_units, block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

# --- nodes ----------------------------------------------------------------------------------

NODE_ADDED = """
    INSERT INTO nodes (address, provider, compute_units, specs_hash, attested, active, block_number, tx_hash)
    VALUES (%(node)s, %(provider)s, %(compute_units)s, %(specs_hash)s, false, true, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET provider = EXCLUDED.provider, compute_units = EXCLUDED.compute_units, specs_hash = EXCLUDED.specs_hash,
            attested = false, active = true, block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

NODE_REMOVED = """
    UPDATE nodes SET active = false, block_number = %(block)s, tx_hash = %(tx)s WHERE address = %(node)s"""

NODE_ATTESTED = """
    UPDATE nodes SET attested = true, block_number = %(block)s, tx_hash = %(tx)s WHERE address = %(node)s"""

# --- pools ----------------------------------------------------------------------------------

POOL_CREATED = """
    INSERT INTO pools (pool_id, creator, manager, treasury, status, model_uri, spec_sha256, reward_per_unit,
                       validator_fee, slash_amount, dispute_window, validator_slash_share_bps, budget, block_number,
                       tx_hash)
    VALUES (%(pool_id)s, %(creator)s, %(manager)s, %(treasury)s, 'created', %(model_uri)s, %(spec_sha256)s,
            %(reward_per_unit)s, %(validator_fee)s, %(slash_amount)s, %(dispute_window)s,
            %(validator_slash_share_bps)s, 0, %(block)s, %(tx)s)
    ON CONFLICT (pool_id) DO NOTHING"""

POOL_FUNDED = """
    UPDATE pools SET budget = %(budget)s, block_number = %(block)s, tx_hash = %(tx)s WHERE pool_id = %(pool_id)s"""

POOL_STATUS = """
    UPDATE pools SET status = %(status)s, block_number = %(block)s, tx_hash = %(tx)s WHERE pool_id = %(pool_id)s"""

POOL_PAID = """
    UPDATE pools SET budget = budget - %(paid)s, block_number = %(block)s, tx_hash = %(tx)s
    WHERE pool_id = %(pool_id)s"""

# --- memberships ----------------------------------------------------------------------------

NODE_JOINED = """
    INSERT INTO memberships (pool_id, node, provider, state, blacklisted, block_number, tx_hash)
    VALUES (%(pool_id)s, %(node)s, %(provider)s, 'active', false, %(block)s, %(tx)s)
    ON CONFLICT (pool_id, node) DO UPDATE
        SET provider = EXCLUDED.provider, state = 'active', block_number = EXCLUDED.block_number,
            tx_hash = EXCLUDED.tx_hash"""

MEMBER_STATE = """
    UPDATE memberships SET state = %(state)s, block_number = %(block)s, tx_hash = %(tx)s
    WHERE pool_id = %(pool_id)s AND node = %(node)s"""

NODE_BLACKLISTED = """
    INSERT INTO memberships (pool_id, node, blacklisted, block_number, tx_hash)
    VALUES (%(pool_id)s, %(node)s, true, %(block)s, %(tx)s)
    ON CONFLICT (pool_id, node) DO UPDATE
        SET blacklisted = true, block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""

POOL_APPROVED = """
    INSERT INTO pool_approvals (pool_id, provider, max_slash, approved, block_number, tx_hash)
    VALUES (%(pool_id)s, %(provider)s, %(max_slash)s, true, %(block)s, %(tx)s)
    ON CONFLICT (pool_id, provider) DO UPDATE
        SET max_slash = EXCLUDED.max_slash, approved = true, block_number = EXCLUDED.block_number,
            tx_hash = EXCLUDED.tx_hash"""

POOL_APPROVAL_REVOKED = """
    UPDATE pool_approvals SET approved = false, block_number = %(block)s, tx_hash = %(tx)s
    WHERE pool_id = %(pool_id)s AND provider = %(provider)s"""

# --- submissions and verdicts ---------------------------------------------------------------

WORK_SUBMITTED = """
    INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status, submitted_at,
                             block_number, tx_hash, log_index)
    VALUES (%(pool_id)s, %(work_key)s, %(node)s, %(provider)s, %(work_units)s, %(model_version)s, 'pending',
            %(time)s, %(block)s, %(tx)s, %(log)s)
    ON CONFLICT (pool_id, work_key) DO NOTHING"""

# A bundle (submitWorkBundle) is one submission row like any other: work_key is the bundle key,
# work_units the sum of the files' units; its files are kept in event order (revision 0010).
WORK_BUNDLE_SUBMITTED = """
    INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status, submitted_at,
                             block_number, tx_hash, log_index, file_keys, file_units)
    VALUES (%(pool_id)s, %(work_key)s, %(node)s, %(provider)s, %(work_units)s, %(model_version)s, 'pending',
            %(time)s, %(block)s, %(tx)s, %(log)s, %(file_keys)s::bytea[], %(file_units)s::bigint[])
    ON CONFLICT (pool_id, work_key) DO NOTHING"""

# A submission keeps the position of its WorkSubmitted log for good (stable ledger pages and
# time windows); the log that last changed its status is recorded beside it.
WORK_STATUS = """
    UPDATE submissions SET status = %(status)s, status_block = %(block)s, status_tx_hash = %(tx)s
    WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s"""

# A verdict's lag: the blocks from the submission's log to the verdict's (revision 0015).
VERDICT = """
    INSERT INTO verdicts (pool_id, work_key, verdict, validator, reason, block_number, tx_hash, log_index, lag_blocks)
    VALUES (%(pool_id)s, %(work_key)s, %(verdict)s, %(validator)s, %(reason)s, %(block)s, %(tx)s, %(log)s,
            %(block)s - (SELECT s.block_number FROM submissions s
                         WHERE s.pool_id = %(pool_id)s AND s.work_key = %(work_key)s))
    ON CONFLICT (tx_hash, log_index) DO NOTHING"""

# --- slashes, rewards, checkpoints, validators ----------------------------------------------

SLASH = """
    INSERT INTO slashes (pool_id, work_key, provider, validator, validator_share, treasury, treasury_share, amount,
                         block_number, tx_hash, log_index)
    VALUES (%(pool_id)s, %(work_key)s, %(provider)s, %(validator)s, %(validator_share)s, %(treasury)s,
            %(treasury_share)s, %(amount)s, %(block)s, %(tx)s, %(log)s)
    ON CONFLICT (tx_hash, log_index) DO NOTHING"""

REWARD = """
    INSERT INTO rewards (account, pool_id, work_key, kind, amount, block_number, tx_hash, log_index)
    VALUES (%(account)s, %(pool_id)s, %(work_key)s, %(kind)s, %(amount)s, %(block)s, %(tx)s, %(log)s)
    ON CONFLICT (tx_hash, log_index, account, kind) DO NOTHING"""

CHECKPOINT = """
    INSERT INTO checkpoints (pool_id, version, manifest_sha256, uri, block_number, tx_hash, log_index)
    VALUES (%(pool_id)s, %(version)s, %(manifest_sha256)s, %(uri)s, %(block)s, %(tx)s, %(log)s)
    ON CONFLICT (pool_id, version) DO NOTHING"""

VALIDATOR_ROLE = """
    INSERT INTO validators (address, active, block_number, tx_hash) VALUES (%(account)s, %(active)s, %(block)s, %(tx)s)
    ON CONFLICT (address) DO UPDATE
        SET active = EXCLUDED.active, block_number = EXCLUDED.block_number, tx_hash = EXCLUDED.tx_hash"""


def truncate(conn: Connection) -> None:
    """Empty every projection (not the raw events, blocks, cursor or outbox), restarting the ids
    so a rebuild numbers rows in chain order."""
    conn.execute(f"TRUNCATE {', '.join(PROJECTION_TABLES)} RESTART IDENTITY")
