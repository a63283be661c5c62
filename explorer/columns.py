"""The columns each kind of table shows, once, for every page that shows it: names are the ledger
API's fields (docs/ledger.md), so a table's CSV header is the API's vocabulary."""

from __future__ import annotations

from proofpool.explorer import links
from proofpool.explorer.tables import Col, Show

POOL = Col("pool_id", "Pool", Show.NUMBER, links.to_pool())
WORK_KEY = Col("work_key", "Work key", Show.HASH, links.to_submission)
BLOCK = Col("block_number", "Block", Show.NUMBER)
TX_OF_SUBMISSION = Col("tx_hash", "Transaction", Show.HASH, links.to_submission)

SUBMISSIONS = (
    POOL,
    WORK_KEY,
    Col("node", "Node", Show.ADDRESS, links.to_node()),
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("status", "Status"),
    Col("work_units", "Work units", Show.COUNT),
    Col("model_version", "Model version", Show.NUMBER),
    Col("files", "Files", Show.FILES),
    Col("submitted_at", "Submitted", Show.TIME),
    BLOCK,
    TX_OF_SUBMISSION,
)
"""A submissions page (`/v1/ledger/submissions`)."""

SUBMISSIONS_WITH_REASON = (*SUBMISSIONS[:5], Col("reason", "Reason"), *SUBMISSIONS[5:])
"""Submissions with the reason code of an invalid verdict (from the submission's verdicts)."""

LAG = Col("lag_blocks", "Lag (blocks)", Show.COUNT)
"""A verdict's lag: blocks from the submission's log to the verdict's."""

VERDICTS = (
    POOL,
    WORK_KEY,
    Col("verdict", "Verdict"),
    Col("reason", "Reason"),
    Col("validator", "Validator", Show.ADDRESS, links.to_validator()),
    LAG,
    BLOCK,
    TX_OF_SUBMISSION,
)

SLASHES = (
    POOL,
    WORK_KEY,
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("validator", "Validator", Show.ADDRESS, links.to_validator()),
    Col("amount", "Slashed", Show.AMOUNT),
    Col("validator_share", "Validator share", Show.AMOUNT),
    Col("treasury_share", "Treasury share", Show.AMOUNT),
    BLOCK,
    TX_OF_SUBMISSION,
)

REWARDS = (
    Col("kind", "Kind"),
    Col("amount", "Amount", Show.AMOUNT),
    POOL,
    WORK_KEY,
    BLOCK,
    TX_OF_SUBMISSION,
)
"""One account's credits and withdrawals (the account is the page's)."""

NODES = (
    Col("address", "Node", Show.ADDRESS, links.to_node("address")),
    Col("compute_units", "Compute units", Show.COUNT),
    Col("attested", "Attested", Show.BOOL),
    Col("active", "Registered", Show.BOOL),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH, links.to_node("address")),
)

MEMBERSHIPS = (
    POOL,
    Col("node", "Node", Show.ADDRESS, links.to_node()),
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("state", "State"),
    Col("blacklisted", "Blacklisted", Show.BOOL),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH, links.to_pool()),
)

CHECKPOINTS = (
    Col("version", "Version", Show.NUMBER),
    Col("manifest_sha256", "Manifest sha256", Show.HASH),
    Col("uri", "Manifest URI"),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH, links.to_checkpoint),
)

CONTRIBUTORS = (
    Col("node", "Node", Show.ADDRESS, links.to_node()),
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("work_units_accepted", "Work units accepted", Show.COUNT),
    Col("submissions", "Submissions", Show.COUNT),
    Col("files", "Files", Show.COUNT),
    Col("accepted", "Accepted", Show.COUNT),
    Col("pending", "Pending", Show.COUNT),
    Col("invalid", "Invalid", Show.COUNT),
    Col("rewards", "Rewards", Show.AMOUNT),
    Col("slashed", "Slashed", Show.AMOUNT),
)
"""A pool's leaderboard (`/v1/ledger/contributors`, one row per node)."""

NODE_CONTRIBUTIONS = (POOL, *CONTRIBUTORS[2:])
"""One node's contributions, per pool."""

POOL_TERMS = (
    POOL,
    Col("status", "Status"),
    Col("model_uri", "Model"),
    Col("spec_sha256", "Spec sha256", Show.HASH),
    Col("creator", "Creator", Show.ADDRESS),
    Col("manager", "Manager", Show.ADDRESS),
    Col("treasury", "Treasury", Show.ADDRESS),
    Col("reward_per_unit", "Reward per work unit", Show.AMOUNT),
    Col("validator_fee", "Validator fee", Show.AMOUNT),
    Col("slash_amount", "Slash amount", Show.AMOUNT),
    Col("dispute_window", "Dispute window (s)", Show.COUNT),
    Col("validator_slash_share_bps", "Validator slash share (bps)", Show.COUNT),
    Col("budget", "Budget left", Show.AMOUNT),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)
"""A pool's row of `/v1/ledger/pools`. Creator, manager and treasury are accounts with no page of
their own (unless they are also a provider, node or validator): shown, not linked."""

POOL_STATS = (
    Col("submissions", "Submissions", Show.COUNT),
    Col("files", "Files", Show.COUNT),
    Col("pending", "Pending", Show.COUNT),
    Col("accepted", "Accepted", Show.COUNT),
    Col("rejected", "Rejected", Show.COUNT),
    Col("invalid", "Invalid", Show.COUNT),
    Col("finalized", "Finalized", Show.COUNT),
    Col("forfeited", "Forfeited", Show.COUNT),
    Col("expired", "Expired", Show.COUNT),
    Col("work_units_accepted", "Work units accepted", Show.COUNT),
    Col("slashed", "Slashed", Show.AMOUNT),
    Col("rewards_paid", "Rewards paid", Show.AMOUNT),
    Col("validator_fees", "Validator fees", Show.AMOUNT),
)
"""A pool's row of `/v1/ledger/pool_stats` (pool_id left out: the page is the pool's)."""


def picked(shown: tuple[Col, ...], *names: str) -> tuple[Col, ...]:
    """The columns of `shown` called `names`, in that order (KeyError for a name it lacks)."""
    by_name = {column.name: column for column in shown}
    return tuple(by_name[name] for name in names)


MARKET_STATS = ("accepted", "finalized", "invalid", "pending", "slashed", "rewards_paid")
"""The pool_stats columns the market shows for each pool."""

MARKET = (
    *picked(POOL_TERMS, "pool_id", "status", "model_uri", "spec_sha256"),
    Col("latest_checkpoint", "Checkpoint", Show.NUMBER, links.to_pool()),
    *picked(POOL_TERMS, "budget"),
    Col("active_members", "Members", Show.COUNT),
    *picked(POOL_STATS, *MARKET_STATS),
)
"""One row per pool: its terms, its pool_stats, its latest checkpoint and its active member count."""

STAKE = (
    Col("address", "Provider", Show.ADDRESS),
    Col("active_stake", "Active stake", Show.AMOUNT),
    Col("unbonding", "Unbonding", Show.AMOUNT),
    Col("unbonding_matures_at", "Unbonding matures", Show.TIME),
    Col("slashed_total", "Slashed in total", Show.AMOUNT),
    Col("compute_units", "Compute units"),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)
"""A provider's row of `/v1/ledger/providers`."""

NODE = (
    Col("address", "Node", Show.ADDRESS),
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("compute_units", "Compute units", Show.COUNT),
    Col("specs_hash", "Specs hash", Show.HASH),
    Col("attested", "Attested", Show.BOOL),
    Col("active", "Registered", Show.BOOL),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)

VALIDATOR = (
    Col("address", "Validator", Show.ADDRESS),
    Col("active", "Holds the role", Show.BOOL),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)

VALIDATOR_STATS = (
    Col("verdicts_accepted", "Verdicts: accepted", Show.COUNT),
    Col("verdicts_invalid", "Verdicts: invalid", Show.COUNT),
    Col("fees", "Fees earned", Show.AMOUNT),
    Col("slash_shares", "Slash shares earned", Show.AMOUNT),
)

JUDGED_POOLS = (
    POOL,
    Col("pending", "Pending submissions", Show.COUNT),
    Col("accepted", "Accepted", Show.COUNT),
    Col("invalid", "Invalid", Show.COUNT),
)
"""The pool_stats of the pools a validator's shown verdicts are in."""

SUBMISSION = (
    POOL,
    Col("work_key", "Work key", Show.HASH),
    Col("node", "Node", Show.ADDRESS, links.to_node()),
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("work_units", "Work units", Show.COUNT),
    Col("model_version", "Model version", Show.NUMBER),
    Col("status", "Status"),
    Col("submitted_at", "Submitted", Show.TIME),
    BLOCK,
    Col("tx_hash", "Submitted in", Show.HASH),
    Col("status_block", "Status changed in block", Show.NUMBER),
    Col("status_tx_hash", "Status changed in", Show.HASH),
)
"""One submission of `/v1/ledger/submissions/{pool_id}/{work_key}` (its transactions are its own)."""

BUNDLE_FILES = (
    Col("work_key", "File sha256", Show.HASH),
    Col("work_units", "Work units", Show.COUNT),
)

SUBMISSION_VERDICTS = (
    Col("verdict", "Verdict"),
    Col("reason", "Reason"),
    Col("validator", "Validator", Show.ADDRESS, links.to_validator()),
    LAG,
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)

SUBMISSION_SLASHES = (
    Col("provider", "Provider", Show.ADDRESS, links.to_provider()),
    Col("validator", "Validator", Show.ADDRESS, links.to_validator()),
    Col("amount", "Slashed", Show.AMOUNT),
    Col("validator_share", "Validator share", Show.AMOUNT),
    Col("treasury_share", "Treasury share", Show.AMOUNT),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)

SUBMISSION_CREDITS = (
    Col("account", "Account", Show.ADDRESS, lambda row: links.account(row["kind"], row["account"])),
    Col("kind", "Kind"),
    Col("amount", "Amount", Show.AMOUNT),
    BLOCK,
    Col("tx_hash", "Transaction", Show.HASH),
)

FEED = (
    BLOCK,
    Col("event", "Event"),
    WORK_KEY,
    Col("account", "Node or validator", Show.ADDRESS, lambda row: links.account(row["event"], row["account"])),
    Col("outcome", "Status or verdict"),
    Col("reason", "Reason"),
    Col("work_units", "Work units", Show.COUNT),
    TX_OF_SUBMISSION,
)
"""The live feed: submissions and verdicts of a pool, newest first."""

TRAINING = (
    Col("version", "Version", Show.NUMBER),
    Col("status", "Figures"),
    Col("mean_reward", "Mean reward", Show.FIGURE),
    Col("loss", "Loss", Show.FIGURE),
    Col("samples", "Samples", Show.COUNT),
    Col("tokens", "Tokens", Show.COUNT),
    Col("grad_norm", "Gradient norm", Show.FIGURE),
    Col("inner_loss", "Inner loss", Show.FIGURE),
    Col("inner_loss_last", "Last inner loss", Show.FIGURE),
    Col("delta_norm", "Delta norm", Show.FIGURE),
    Col("contributors", "Contributors", Show.COUNT),
    Col("detail", "Why not verified"),
)
"""A pool's rows of `/v1/ledger/checkpoint_metrics`; a page shows the figures its pool's trainer reports."""
