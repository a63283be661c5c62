"""Ledger statistics kept exact by triggers: `pool_stats`, `contributors`, `validator_stats`.

Revision ID: 0012
Revises: 0011

The ledger's aggregates (per pool, per pool and node, per validator) as tables the API pages like
any listing (`proofpool.core.ledger_listings`), so a dashboard reads a pool's totals or its
leaderboard in one indexed page at any ledger size instead of summing a million submissions:

- `pool_stats`, one row per pool with any submission, slash or credit: submissions and files (a
  bundle counts its files), one count per submission status, `work_units_accepted` (accepted or
  finalized work), `slashed` (sum of its slashes), `rewards_paid` and `validator_fees` (its
  provider_reward and validator_fee credits);
- `contributors`, one row per pool and node with a submission: the node's `provider` (that of its
  latest submission in the pool, by chain position), its submissions, files, pending, accepted
  (accepted or finalized), invalid, work units accepted, `rewards` (provider_reward credits of its
  submissions) and `slashed` (slashes of its submissions);
- `validator_stats`, one row per account with a verdict or a validator_fee or slash_share credit:
  verdicts accepted and invalid, `fees`, `slash_shares` (its slash_share credits: its share of the
  slashes it reported and what it was awarded for proving another validator wrong).

A credit or slash is attributed to a contributor through the submission `(pool_id, work_key)`
names. The indexer projects events in chain order, so a submission is there before anything paid
or slashed for it; a history indexed from a later block (`indexer run --from-block`) may hold a
credit for a submission it never saw: the credit counts for the pool but for no contributor, and
is attributed should the submission row appear later (its insertion adds the credits and slashes
already recorded for it). Sums of work units are BIGINT: accepted work is what a validator counted
in the files, far from 2^63.

How they stay exact. Row-level AFTER triggers on `submissions`, `verdicts`, `slashes` and `rewards`
turn every INSERT, UPDATE and DELETE into signed deltas (a status change moves one count to
another; any other UPDATE subtracts the old row's share and adds the new one's), appended to the
unlogged `ledger_stats_deltas`, one row per change. One deferred constraint trigger per
transaction (requested through `ledger_stats_fold_requests`) folds them into the statistics at
COMMIT: one upsert per pool, node and validator touched, then rows with nothing left to count are
deleted. Adding to the statistics row by row instead would update one pool's row thousands of
times in one indexer transaction, and each update walks every earlier version of that row (none
can be pruned before the commit): quadratic in the events per transaction (20,000 updates of one
row: 6.8 s; 40,000: 28 s; appending 40,000 deltas and folding them: 0.3 s). Inside a transaction
the statistics therefore show what was committed before it (`SET CONSTRAINTS ALL IMMEDIATE` folds
after every statement); a reader in another session always sees them exact. The deltas are empty
outside a transaction, so an unlogged table (emptied by crash recovery) loses nothing.

A TRUNCATE of a source table (the projections' rebuild after a reorg, `indexer rebuild`) fires no
row trigger: a statement trigger recomputes all three from the source tables instead
(`ledger_stats_rebuild()`, also this revision's backfill of an existing ledger), and the rows the
rebuild then replays are counted by the row triggers.

Columns the listings do not serve: `source_rows` (pool_stats, validator_stats) counts the source
rows a statistics row sums, so that it is deleted exactly when the last one goes (a credit of 0
tokens still makes a pool appear); `provider_block`, `provider_log_index` (contributors) are the
chain position of the submission that named the provider, so a new submission replaces it
without a query, and only one that goes makes the fold look the latest one up.
New indexes `rewards_work_key` and `slashes_work_key` (pool_id, work_key) find a submission's
credits and slashes in O(log n) for the triggers and for the submission lookup of the API.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

SOURCE_TABLES = ("submissions", "verdicts", "slashes", "rewards")
"""The projections whose rows the statistics count."""

TABLES = """
CREATE TABLE pool_stats (
    pool_id              BIGINT PRIMARY KEY,
    submissions          BIGINT NOT NULL DEFAULT 0,
    files                BIGINT NOT NULL DEFAULT 0,
    pending              BIGINT NOT NULL DEFAULT 0,
    accepted             BIGINT NOT NULL DEFAULT 0,
    rejected             BIGINT NOT NULL DEFAULT 0,
    invalid              BIGINT NOT NULL DEFAULT 0,
    finalized            BIGINT NOT NULL DEFAULT 0,
    forfeited            BIGINT NOT NULL DEFAULT 0,
    expired              BIGINT NOT NULL DEFAULT 0,
    work_units_accepted  BIGINT NOT NULL DEFAULT 0,
    slashed              NUMERIC(78, 0) NOT NULL DEFAULT 0,
    rewards_paid         NUMERIC(78, 0) NOT NULL DEFAULT 0,
    validator_fees       NUMERIC(78, 0) NOT NULL DEFAULT 0,
    source_rows          BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE contributors (
    pool_id              BIGINT NOT NULL,
    node                 TEXT NOT NULL,
    provider             TEXT NOT NULL,
    submissions          BIGINT NOT NULL DEFAULT 0,
    files                BIGINT NOT NULL DEFAULT 0,
    pending              BIGINT NOT NULL DEFAULT 0,
    accepted             BIGINT NOT NULL DEFAULT 0,
    invalid              BIGINT NOT NULL DEFAULT 0,
    work_units_accepted  BIGINT NOT NULL DEFAULT 0,
    rewards              NUMERIC(78, 0) NOT NULL DEFAULT 0,
    slashed              NUMERIC(78, 0) NOT NULL DEFAULT 0,
    provider_block       BIGINT NOT NULL,
    provider_log_index   INTEGER NOT NULL,
    PRIMARY KEY (pool_id, node)
);
-- The listing's node and provider filters, each walking its rows in key order.
CREATE INDEX contributors_node ON contributors (node, pool_id);
CREATE INDEX contributors_provider ON contributors (provider, pool_id, node);

CREATE TABLE validator_stats (
    validator          TEXT PRIMARY KEY,
    verdicts_accepted  BIGINT NOT NULL DEFAULT 0,
    verdicts_invalid   BIGINT NOT NULL DEFAULT 0,
    fees               NUMERIC(78, 0) NOT NULL DEFAULT 0,
    slash_shares       NUMERIC(78, 0) NOT NULL DEFAULT 0,
    source_rows        BIGINT NOT NULL DEFAULT 0
);

-- One row per change of a source row, waiting for the fold at COMMIT (empty outside a
-- transaction; no index: only appended, then taken whole). A row counts for the pool `pool_id`
-- (pool_stats), for the contributor (pool_id, node) when `node` is set, and for the validator
-- `validator` when set. Columns named as in the statistics, except: node_rewards and
-- node_slashed go to the contributor only (a submission taking over credits and slashes
-- recorded before it, which its pool counted already); validator_fees goes to the pool and to
-- the validator (fees); source_rows counts for the pool, validator_rows for the validator. A
-- submission that came names its provider and position (provider, provider_block,
-- provider_log_index); one that went sets provider_lost.
CREATE UNLOGGED TABLE ledger_stats_deltas (
    pool_id              BIGINT,
    node                 TEXT,
    validator            TEXT,
    provider             TEXT,
    provider_block       BIGINT,
    provider_log_index   INTEGER,
    provider_lost        BOOLEAN NOT NULL DEFAULT false,
    source_rows          BIGINT NOT NULL DEFAULT 0,
    submissions          BIGINT NOT NULL DEFAULT 0,
    files                BIGINT NOT NULL DEFAULT 0,
    pending              BIGINT NOT NULL DEFAULT 0,
    accepted             BIGINT NOT NULL DEFAULT 0,
    rejected             BIGINT NOT NULL DEFAULT 0,
    invalid              BIGINT NOT NULL DEFAULT 0,
    finalized            BIGINT NOT NULL DEFAULT 0,
    forfeited            BIGINT NOT NULL DEFAULT 0,
    expired              BIGINT NOT NULL DEFAULT 0,
    work_units_accepted  BIGINT NOT NULL DEFAULT 0,
    slashed              NUMERIC(78, 0) NOT NULL DEFAULT 0,
    rewards_paid         NUMERIC(78, 0) NOT NULL DEFAULT 0,
    validator_fees       NUMERIC(78, 0) NOT NULL DEFAULT 0,
    node_rewards         NUMERIC(78, 0) NOT NULL DEFAULT 0,
    node_slashed         NUMERIC(78, 0) NOT NULL DEFAULT 0,
    validator_rows       BIGINT NOT NULL DEFAULT 0,
    verdicts_accepted    BIGINT NOT NULL DEFAULT 0,
    verdicts_invalid     BIGINT NOT NULL DEFAULT 0,
    slash_shares         NUMERIC(78, 0) NOT NULL DEFAULT 0
);
-- One row per transaction with deltas: its deferred trigger runs the fold at COMMIT.
CREATE UNLOGGED TABLE ledger_stats_fold_requests (
    xid  xid8 NOT NULL DEFAULT pg_current_xact_id()
);

CREATE INDEX rewards_work_key ON rewards (pool_id, work_key);
CREATE INDEX slashes_work_key ON slashes (pool_id, work_key);
"""

# --- the fold ---------------------------------------------------------------------------------

FOLD = """
-- Called by every row trigger after it appended its deltas: the first call of a transaction
-- queues the fold (a transaction-local setting remembers it; the fold clears it, so deltas
-- appended after a fold run early under SET CONSTRAINTS ALL IMMEDIATE queue another).
CREATE FUNCTION ledger_stats_request_fold() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('proofpool.ledger_stats_fold', true) IS DISTINCT FROM 'requested' THEN
        PERFORM set_config('proofpool.ledger_stats_fold', 'requested', true);
        INSERT INTO ledger_stats_fold_requests DEFAULT VALUES;
    END IF;
END $$;

-- Every delta of this transaction (the only ones a transaction sees: each folds its own before
-- it commits) added to the statistics, one upsert per key, in key order (concurrent folds lock
-- rows in the same order: no deadlock); rows left with nothing to count go. A contributor's
-- provider is that of its latest submission: the latest of the one it had and those that came,
-- unless one went (a DELETE or an UPDATE that moved it), when the submissions are asked. A
-- contributor with no row and no submission left (added and removed in this transaction) has
-- deltas summing to zero and is skipped.
CREATE FUNCTION ledger_stats_fold() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    empty_pools       BIGINT[];
    gone_pools        BIGINT[];
    gone_nodes        TEXT[];
    empty_validators  TEXT[];
BEGIN
    PERFORM set_config('proofpool.ledger_stats_fold', '', true);
    DELETE FROM ledger_stats_fold_requests;

    WITH taken AS (DELETE FROM ledger_stats_deltas RETURNING *),
    pools AS (
        INSERT INTO pool_stats AS s (pool_id, submissions, files, pending, accepted, rejected, invalid, finalized,
                                     forfeited, expired, work_units_accepted, slashed, rewards_paid, validator_fees,
                                     source_rows)
        SELECT pool_id, sum(submissions), sum(files), sum(pending), sum(accepted), sum(rejected), sum(invalid),
               sum(finalized), sum(forfeited), sum(expired), sum(work_units_accepted), sum(slashed),
               sum(rewards_paid), sum(validator_fees), sum(source_rows)
          FROM taken WHERE pool_id IS NOT NULL GROUP BY pool_id ORDER BY pool_id
        ON CONFLICT (pool_id) DO UPDATE SET
            submissions = s.submissions + EXCLUDED.submissions,
            files = s.files + EXCLUDED.files,
            pending = s.pending + EXCLUDED.pending,
            accepted = s.accepted + EXCLUDED.accepted,
            rejected = s.rejected + EXCLUDED.rejected,
            invalid = s.invalid + EXCLUDED.invalid,
            finalized = s.finalized + EXCLUDED.finalized,
            forfeited = s.forfeited + EXCLUDED.forfeited,
            expired = s.expired + EXCLUDED.expired,
            work_units_accepted = s.work_units_accepted + EXCLUDED.work_units_accepted,
            slashed = s.slashed + EXCLUDED.slashed,
            rewards_paid = s.rewards_paid + EXCLUDED.rewards_paid,
            validator_fees = s.validator_fees + EXCLUDED.validator_fees,
            source_rows = s.source_rows + EXCLUDED.source_rows
        RETURNING s.pool_id, s.source_rows),
    summed AS (
        SELECT pool_id, node, bool_or(provider_lost) AS provider_lost, sum(submissions) AS submissions,
               sum(files) AS files, sum(pending) AS pending, sum(accepted + finalized) AS accepted,
               sum(invalid) AS invalid, sum(work_units_accepted) AS work_units_accepted,
               sum(node_rewards) AS rewards, sum(node_slashed) AS slashed
          FROM taken WHERE node IS NOT NULL GROUP BY pool_id, node),
    arrived AS (
        SELECT DISTINCT ON (pool_id, node) pool_id, node, provider, provider_block, provider_log_index
          FROM taken WHERE provider IS NOT NULL
         ORDER BY pool_id, node, provider_block DESC, provider_log_index DESC),
    placed AS (
        SELECT d.*, COALESCE(latest.provider, c.provider) AS provider,
               COALESCE(latest.block, c.provider_block) AS provider_block,
               COALESCE(latest.log, c.provider_log_index) AS provider_log_index
          FROM summed d
          LEFT JOIN contributors c ON c.pool_id = d.pool_id AND c.node = d.node
          LEFT JOIN arrived a ON a.pool_id = d.pool_id AND a.node = d.node
          LEFT JOIN LATERAL (
              SELECT candidate.* FROM (
                  SELECT c.provider, c.provider_block, c.provider_log_index WHERE NOT d.provider_lost
                  UNION ALL
                  SELECT a.provider, a.provider_block, a.provider_log_index WHERE NOT d.provider_lost
                  UNION ALL
                  (SELECT s.provider, s.block_number, s.log_index FROM submissions s
                    WHERE d.provider_lost AND s.pool_id = d.pool_id AND s.node = d.node
                    ORDER BY s.block_number DESC, s.log_index DESC LIMIT 1)
              ) AS candidate(provider, block, log)
              WHERE candidate.provider IS NOT NULL ORDER BY candidate.block DESC, candidate.log DESC LIMIT 1
          ) AS latest ON true),
    nodes AS (
        INSERT INTO contributors AS c (pool_id, node, provider, provider_block, provider_log_index, submissions, files,
                                       pending, accepted, invalid, work_units_accepted, rewards, slashed)
        SELECT pool_id, node, provider, provider_block, provider_log_index, submissions, files, pending, accepted,
               invalid, work_units_accepted, rewards, slashed
          FROM placed WHERE provider IS NOT NULL ORDER BY pool_id, node
        ON CONFLICT (pool_id, node) DO UPDATE SET
            provider = EXCLUDED.provider,
            provider_block = EXCLUDED.provider_block,
            provider_log_index = EXCLUDED.provider_log_index,
            submissions = c.submissions + EXCLUDED.submissions,
            files = c.files + EXCLUDED.files,
            pending = c.pending + EXCLUDED.pending,
            accepted = c.accepted + EXCLUDED.accepted,
            invalid = c.invalid + EXCLUDED.invalid,
            work_units_accepted = c.work_units_accepted + EXCLUDED.work_units_accepted,
            rewards = c.rewards + EXCLUDED.rewards,
            slashed = c.slashed + EXCLUDED.slashed
        RETURNING c.pool_id, c.node, c.submissions),
    validators AS (
        INSERT INTO validator_stats AS v (validator, verdicts_accepted, verdicts_invalid, fees, slash_shares,
                                          source_rows)
        SELECT validator, sum(verdicts_accepted), sum(verdicts_invalid), sum(validator_fees), sum(slash_shares),
               sum(validator_rows)
          FROM taken WHERE validator IS NOT NULL GROUP BY validator ORDER BY validator
        ON CONFLICT (validator) DO UPDATE SET
            verdicts_accepted = v.verdicts_accepted + EXCLUDED.verdicts_accepted,
            verdicts_invalid = v.verdicts_invalid + EXCLUDED.verdicts_invalid,
            fees = v.fees + EXCLUDED.fees,
            slash_shares = v.slash_shares + EXCLUDED.slash_shares,
            source_rows = v.source_rows + EXCLUDED.source_rows
        RETURNING v.validator, v.source_rows)
    SELECT (SELECT array_agg(pool_id) FROM pools WHERE source_rows = 0),
           (SELECT array_agg(pool_id) FROM nodes WHERE submissions = 0),
           (SELECT array_agg(node) FROM nodes WHERE submissions = 0),
           (SELECT array_agg(validator) FROM validators WHERE source_rows = 0)
      INTO empty_pools, gone_pools, gone_nodes, empty_validators;

    DELETE FROM pool_stats WHERE pool_id = ANY (empty_pools);
    DELETE FROM contributors c USING unnest(gone_pools, gone_nodes) AS gone(pool_id, node)
     WHERE c.pool_id = gone.pool_id AND c.node = gone.node;
    DELETE FROM validator_stats WHERE validator = ANY (empty_validators);
    RETURN NULL;
END $$;
"""

# --- the row triggers: each row's signed share of the statistics ------------------------------
# An INSERT adds its row's share, a DELETE subtracts it, an UPDATE does both (old, then new),
# except the common status change, which appends the difference as one row.

COUNT = """
-- The share of submission `s` (sign 1: it came; -1: it went), with the credits and slashes
-- already recorded for its (pool_id, work_key), which now belong to (or leave) its node.
CREATE FUNCTION ledger_stats_add_submission(s submissions, sign INT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger_stats_deltas (pool_id, node, provider, provider_block, provider_log_index, provider_lost,
                                     source_rows, submissions, files, pending, accepted, rejected, invalid, finalized,
                                     forfeited, expired, work_units_accepted, node_rewards, node_slashed)
    VALUES (s.pool_id, s.node, CASE WHEN sign > 0 THEN s.provider END, CASE WHEN sign > 0 THEN s.block_number END,
            CASE WHEN sign > 0 THEN s.log_index END, sign < 0,
            sign, sign, sign * COALESCE(cardinality(s.file_keys), 1),
            sign * (s.status = 'pending')::int, sign * (s.status = 'accepted')::int,
            sign * (s.status = 'rejected')::int, sign * (s.status = 'invalid')::int,
            sign * (s.status = 'finalized')::int, sign * (s.status = 'forfeited')::int,
            sign * (s.status = 'expired')::int,
            sign * CASE WHEN s.status IN ('accepted', 'finalized') THEN s.work_units ELSE 0 END,
            sign * (SELECT COALESCE(sum(r.amount), 0) FROM rewards r
                     WHERE r.pool_id = s.pool_id AND r.work_key = s.work_key AND r.kind = 'provider_reward'),
            sign * (SELECT COALESCE(sum(x.amount), 0) FROM slashes x
                     WHERE x.pool_id = s.pool_id AND x.work_key = s.work_key));
END $$;

CREATE FUNCTION ledger_stats_count_submission() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (OLD.pool_id, OLD.work_key, OLD.node, OLD.provider, OLD.block_number, OLD.log_index)
                            = (NEW.pool_id, NEW.work_key, NEW.node, NEW.provider, NEW.block_number, NEW.log_index) THEN
        -- Same submission, same node and provider: its credits and slashes stay where they are.
        INSERT INTO ledger_stats_deltas (pool_id, node, files, pending, accepted, rejected, invalid, finalized,
                                         forfeited, expired, work_units_accepted)
        VALUES (NEW.pool_id, NEW.node,
                COALESCE(cardinality(NEW.file_keys), 1) - COALESCE(cardinality(OLD.file_keys), 1),
                (NEW.status = 'pending')::int - (OLD.status = 'pending')::int,
                (NEW.status = 'accepted')::int - (OLD.status = 'accepted')::int,
                (NEW.status = 'rejected')::int - (OLD.status = 'rejected')::int,
                (NEW.status = 'invalid')::int - (OLD.status = 'invalid')::int,
                (NEW.status = 'finalized')::int - (OLD.status = 'finalized')::int,
                (NEW.status = 'forfeited')::int - (OLD.status = 'forfeited')::int,
                (NEW.status = 'expired')::int - (OLD.status = 'expired')::int,
                CASE WHEN NEW.status IN ('accepted', 'finalized') THEN NEW.work_units ELSE 0 END
                - CASE WHEN OLD.status IN ('accepted', 'finalized') THEN OLD.work_units ELSE 0 END);
    ELSE
        IF TG_OP <> 'INSERT' THEN
            PERFORM ledger_stats_add_submission(OLD, -1);
        END IF;
        IF TG_OP <> 'DELETE' THEN
            PERFORM ledger_stats_add_submission(NEW, 1);
        END IF;
    END IF;
    PERFORM ledger_stats_request_fold();
    RETURN NULL;
END $$;

CREATE FUNCTION ledger_stats_count_verdict() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO ledger_stats_deltas (validator, validator_rows, verdicts_accepted, verdicts_invalid)
        VALUES (OLD.validator, -1, -(OLD.verdict = 'accepted')::int, -(OLD.verdict = 'invalid')::int);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO ledger_stats_deltas (validator, validator_rows, verdicts_accepted, verdicts_invalid)
        VALUES (NEW.validator, 1, (NEW.verdict = 'accepted')::int, (NEW.verdict = 'invalid')::int);
    END IF;
    PERFORM ledger_stats_request_fold();
    RETURN NULL;
END $$;

-- A slash counts for its pool and for the node of its submission (node NULL: none recorded).
CREATE FUNCTION ledger_stats_add_slash(x slashes, sign INT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger_stats_deltas (pool_id, node, source_rows, slashed, node_slashed)
    VALUES (x.pool_id,
            (SELECT s.node FROM submissions s WHERE s.pool_id = x.pool_id AND s.work_key = x.work_key),
            sign, sign * x.amount, sign * x.amount);
END $$;

CREATE FUNCTION ledger_stats_count_slash() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM ledger_stats_add_slash(OLD, -1);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM ledger_stats_add_slash(NEW, 1);
    END IF;
    PERFORM ledger_stats_request_fold();
    RETURN NULL;
END $$;

-- A credit (provider_reward, validator_fee, slash_share) counts for its pool; a provider reward
-- also for the node of its submission; a validator fee or slash share for the credited account.
-- A withdrawal counts nowhere.
CREATE FUNCTION ledger_stats_add_reward(r rewards, sign INT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF r.kind = 'withdrawal' THEN
        RETURN;
    END IF;
    INSERT INTO ledger_stats_deltas (pool_id, node, validator, source_rows, rewards_paid, node_rewards,
                                     validator_fees, validator_rows, slash_shares)
    VALUES (r.pool_id,
            CASE WHEN r.kind = 'provider_reward' THEN
                (SELECT s.node FROM submissions s WHERE s.pool_id = r.pool_id AND s.work_key = r.work_key) END,
            CASE WHEN r.kind <> 'provider_reward' THEN r.account END,
            sign,
            sign * CASE WHEN r.kind = 'provider_reward' THEN r.amount ELSE 0 END,
            sign * CASE WHEN r.kind = 'provider_reward' THEN r.amount ELSE 0 END,
            sign * CASE WHEN r.kind = 'validator_fee' THEN r.amount ELSE 0 END,
            sign * (r.kind <> 'provider_reward')::int,
            sign * CASE WHEN r.kind = 'slash_share' THEN r.amount ELSE 0 END);
END $$;

CREATE FUNCTION ledger_stats_count_reward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM ledger_stats_add_reward(OLD, -1);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM ledger_stats_add_reward(NEW, 1);
    END IF;
    PERFORM ledger_stats_request_fold();
    RETURN NULL;
END $$;
"""

# --- the rebuild (after a TRUNCATE, and the backfill) -----------------------------------------

REBUILD = """
CREATE FUNCTION ledger_stats_rebuild() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ledger_stats_deltas;
    DELETE FROM pool_stats;
    DELETE FROM contributors;
    DELETE FROM validator_stats;

    INSERT INTO pool_stats (pool_id, submissions, files, pending, accepted, rejected, invalid, finalized, forfeited,
                            expired, work_units_accepted, slashed, rewards_paid, validator_fees, source_rows)
    SELECT pool_id, sum(submissions), sum(files), sum(pending), sum(accepted), sum(rejected), sum(invalid),
           sum(finalized), sum(forfeited), sum(expired), sum(work_units_accepted), sum(slashed), sum(rewards_paid),
           sum(validator_fees), sum(source_rows)
      FROM (
        SELECT pool_id, count(*) AS submissions, sum(COALESCE(cardinality(file_keys), 1)) AS files,
               count(*) FILTER (WHERE status = 'pending') AS pending,
               count(*) FILTER (WHERE status = 'accepted') AS accepted,
               count(*) FILTER (WHERE status = 'rejected') AS rejected,
               count(*) FILTER (WHERE status = 'invalid') AS invalid,
               count(*) FILTER (WHERE status = 'finalized') AS finalized,
               count(*) FILTER (WHERE status = 'forfeited') AS forfeited,
               count(*) FILTER (WHERE status = 'expired') AS expired,
               COALESCE(sum(work_units) FILTER (WHERE status IN ('accepted', 'finalized')), 0) AS work_units_accepted,
               0 AS slashed, 0 AS rewards_paid, 0 AS validator_fees, count(*) AS source_rows
          FROM submissions GROUP BY pool_id
        UNION ALL
        SELECT pool_id, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, sum(amount), 0, 0, count(*)
          FROM slashes GROUP BY pool_id
        UNION ALL
        SELECT pool_id, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
               COALESCE(sum(amount) FILTER (WHERE kind = 'provider_reward'), 0),
               COALESCE(sum(amount) FILTER (WHERE kind = 'validator_fee'), 0), count(*)
          FROM rewards WHERE pool_id IS NOT NULL AND kind <> 'withdrawal' GROUP BY pool_id
      ) AS parts
     GROUP BY pool_id;

    INSERT INTO contributors (pool_id, node, provider, provider_block, provider_log_index, submissions, files,
                              pending, accepted, invalid, work_units_accepted, rewards, slashed)
    SELECT s.pool_id, s.node, latest.provider, latest.block_number, latest.log_index,
           count(*), sum(COALESCE(cardinality(s.file_keys), 1)),
           count(*) FILTER (WHERE s.status = 'pending'),
           count(*) FILTER (WHERE s.status IN ('accepted', 'finalized')),
           count(*) FILTER (WHERE s.status = 'invalid'),
           COALESCE(sum(s.work_units) FILTER (WHERE s.status IN ('accepted', 'finalized')), 0),
           COALESCE(sum(paid.amount), 0), COALESCE(sum(taken.amount), 0)
      FROM submissions s
      JOIN (SELECT DISTINCT ON (pool_id, node) pool_id, node, provider, block_number, log_index FROM submissions
             ORDER BY pool_id, node, block_number DESC, log_index DESC) AS latest
        ON latest.pool_id = s.pool_id AND latest.node = s.node
      LEFT JOIN (SELECT pool_id, work_key, sum(amount) AS amount FROM rewards WHERE kind = 'provider_reward'
                  GROUP BY pool_id, work_key) AS paid ON paid.pool_id = s.pool_id AND paid.work_key = s.work_key
      LEFT JOIN (SELECT pool_id, work_key, sum(amount) AS amount FROM slashes
                  GROUP BY pool_id, work_key) AS taken ON taken.pool_id = s.pool_id AND taken.work_key = s.work_key
     GROUP BY s.pool_id, s.node, latest.provider, latest.block_number, latest.log_index;

    INSERT INTO validator_stats (validator, verdicts_accepted, verdicts_invalid, fees, slash_shares, source_rows)
    SELECT validator, sum(verdicts_accepted), sum(verdicts_invalid), sum(fees), sum(slash_shares), sum(source_rows)
      FROM (
        SELECT validator, count(*) FILTER (WHERE verdict = 'accepted') AS verdicts_accepted,
               count(*) FILTER (WHERE verdict = 'invalid') AS verdicts_invalid, 0 AS fees, 0 AS slash_shares,
               count(*) AS source_rows
          FROM verdicts GROUP BY validator
        UNION ALL
        SELECT account, 0, 0, COALESCE(sum(amount) FILTER (WHERE kind = 'validator_fee'), 0),
               COALESCE(sum(amount) FILTER (WHERE kind = 'slash_share'), 0), count(*)
          FROM rewards WHERE kind IN ('validator_fee', 'slash_share') GROUP BY account
      ) AS parts
     GROUP BY validator;
END $$;

CREATE FUNCTION ledger_stats_rebuild_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ledger_stats_rebuild();
    RETURN NULL;
END $$;
"""

# An UPDATE that changes nothing the statistics read (the indexer rewrites status_block on every
# status change, an UPDATE may set a status to what it was) runs no trigger function at all.
TRIGGERS = """
CREATE CONSTRAINT TRIGGER ledger_stats_fold AFTER INSERT ON ledger_stats_fold_requests
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_stats_fold();

CREATE TRIGGER ledger_stats_count AFTER INSERT OR DELETE ON submissions
    FOR EACH ROW EXECUTE FUNCTION ledger_stats_count_submission();
CREATE TRIGGER ledger_stats_recount AFTER UPDATE ON submissions FOR EACH ROW
    WHEN ((OLD.pool_id, OLD.work_key, OLD.node, OLD.provider, OLD.status, OLD.work_units, cardinality(OLD.file_keys),
           OLD.block_number, OLD.log_index)
          IS DISTINCT FROM (NEW.pool_id, NEW.work_key, NEW.node, NEW.provider, NEW.status, NEW.work_units,
                            cardinality(NEW.file_keys), NEW.block_number, NEW.log_index))
    EXECUTE FUNCTION ledger_stats_count_submission();

CREATE TRIGGER ledger_stats_count AFTER INSERT OR DELETE ON verdicts
    FOR EACH ROW EXECUTE FUNCTION ledger_stats_count_verdict();
CREATE TRIGGER ledger_stats_recount AFTER UPDATE ON verdicts FOR EACH ROW
    WHEN ((OLD.validator, OLD.verdict) IS DISTINCT FROM (NEW.validator, NEW.verdict))
    EXECUTE FUNCTION ledger_stats_count_verdict();

CREATE TRIGGER ledger_stats_count AFTER INSERT OR DELETE ON slashes
    FOR EACH ROW EXECUTE FUNCTION ledger_stats_count_slash();
CREATE TRIGGER ledger_stats_recount AFTER UPDATE ON slashes FOR EACH ROW
    WHEN ((OLD.pool_id, OLD.work_key, OLD.amount) IS DISTINCT FROM (NEW.pool_id, NEW.work_key, NEW.amount))
    EXECUTE FUNCTION ledger_stats_count_slash();

CREATE TRIGGER ledger_stats_count AFTER INSERT OR DELETE ON rewards
    FOR EACH ROW EXECUTE FUNCTION ledger_stats_count_reward();
CREATE TRIGGER ledger_stats_recount AFTER UPDATE ON rewards FOR EACH ROW
    WHEN ((OLD.account, OLD.pool_id, OLD.work_key, OLD.kind, OLD.amount)
          IS DISTINCT FROM (NEW.account, NEW.pool_id, NEW.work_key, NEW.kind, NEW.amount))
    EXECUTE FUNCTION ledger_stats_count_reward();
""" + "".join(
    f"""
CREATE TRIGGER ledger_stats_rebuild AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_stats_rebuild_after_truncate();"""
    for table in SOURCE_TABLES
)

DOWNGRADE = (
    "".join(
        f"""
DROP TRIGGER IF EXISTS ledger_stats_rebuild ON {table};
DROP TRIGGER IF EXISTS ledger_stats_recount ON {table};
DROP TRIGGER IF EXISTS ledger_stats_count ON {table};"""
        for table in SOURCE_TABLES
    )
    + """
DROP TABLE IF EXISTS ledger_stats_fold_requests;
DROP FUNCTION IF EXISTS ledger_stats_rebuild_after_truncate();
DROP FUNCTION IF EXISTS ledger_stats_rebuild();
DROP FUNCTION IF EXISTS ledger_stats_count_reward();
DROP FUNCTION IF EXISTS ledger_stats_add_reward(rewards, INT);
DROP FUNCTION IF EXISTS ledger_stats_count_slash();
DROP FUNCTION IF EXISTS ledger_stats_add_slash(slashes, INT);
DROP FUNCTION IF EXISTS ledger_stats_count_verdict();
DROP FUNCTION IF EXISTS ledger_stats_count_submission();
DROP FUNCTION IF EXISTS ledger_stats_add_submission(submissions, INT);
DROP FUNCTION IF EXISTS ledger_stats_fold();
DROP FUNCTION IF EXISTS ledger_stats_request_fold();
DROP TABLE IF EXISTS ledger_stats_deltas;
DROP TABLE IF EXISTS validator_stats;
DROP TABLE IF EXISTS contributors;
DROP TABLE IF EXISTS pool_stats;
DROP INDEX IF EXISTS slashes_work_key;
DROP INDEX IF EXISTS rewards_work_key;
"""
)


def upgrade() -> None:
    """Create the statistics, their deltas and triggers, and fill them from the rows already there
    (the triggers exist before the backfill and both commit together: no row is missed)."""
    op.execute(TABLES)
    op.execute(FOLD)
    op.execute(COUNT)
    op.execute(REBUILD)
    op.execute(TRIGGERS)
    op.execute("SELECT ledger_stats_rebuild()")


def downgrade() -> None:
    """Drop them (they are recomputed from the projections on the next upgrade)."""
    op.execute(DOWNGRADE)
