"""The public ledger's listings, declared once: what each list serves, how it is filtered and ordered.

Three consumers derive everything from this table, so adding a column, a filter or a listing is one
edit here: the backend's SQL (`proofpool.backend.db.ledger`: columns selected and converted, filter
predicates, keyset paging), its HTTP API (`proofpool.backend.api.ledger`: one route per listing, its
query and row models, CSV) and the auditors' `proofpool ledger` commands (`proofpool.cli.ledger`:
options, table columns). The CLI talks HTTP and may not import the backend, which is why the table
lives in the core.

A listing's `name` is at once its route (`/v1/ledger/<name>`), its CLI command, the PostgreSQL table
it reads and the tag of its cursors; a column's `name` is at once the table's column (but for a
`Kind.FILES` column, read from two array columns), the JSON field and the CSV header. Names come only
from here, so the SQL built from them is never user input.

Every list is paged along its unique `key`, in either direction (`Order`: oldest first, or newest
first from the same indexes), and filtered by its `filters`: a table or explorer page asks for one
row by its key (`address`, `pool_id`), for a transaction's rows (`tx_hash`) or for a file's
submission (`file`) in one request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import StrEnum

DEFAULT_PAGE_ROWS = 100
"""Rows per page when the caller names no limit."""
MAX_PAGE_ROWS = 1000
"""Largest page the API serves (and the page the clients read everything in)."""
MAX_CURSOR_CHARS = 512
"""Longest cursor accepted: every cursor the API issues is far shorter."""
PAGING_PARAMETERS = frozenset({"limit", "cursor", "format", "order"})
"""Query parameters of every list, so no filter may take their names."""


class Order(StrEnum):
    """Which way a page walks its listing's key; every list serves both, from the same indexes."""

    ASC = "asc"
    """Key order (chain order: oldest first), the default."""
    DESC = "desc"
    """The same key backwards (newest first)."""


class Kind(StrEnum):
    """What a column holds, which fixes its SQL conversion, its JSON type, how a filter on it is
    validated and how a table for people shows it."""

    ADDRESS = "address"
    """A 20-byte account, checksummed; filters take it in any case."""
    AMOUNT = "amount"
    """Tokens in base units (1 POOL = 10^18): a uint256, exact as a decimal string; shown in POOL."""
    UINT256 = "uint256"
    """Any other uint256 (a sum of counts): a decimal string, shown as it is."""
    INT = "int"
    """A non-negative 64-bit integer (ids, blocks, counts): a JSON number."""
    FLOAT = "float"
    """A finite floating-point number (a trainer's figure, such as a loss): a JSON number."""
    BOOL = "bool"
    TEXT = "text"
    TIMESTAMP = "timestamp"
    """A time, ISO 8601 in UTC."""
    HASH = "hash"
    """Bytes (hashes, work keys, transactions) as 0x-hex; shown shortened. Filters take 32 bytes: 0x and
    64 hex digits, in any case."""
    ENUM = "enum"
    """One of the column's `values`."""
    FILES = "files"
    """The files of a bundled submission, in bundle order: a list of `{"work_key": 0x-hex, "work_units":
    int}`, null for a single-file submission. The one kind not stored under its column's name: it is
    read from the table's `file_keys` and `file_units` arrays. Shown as the file count; filtered by
    `Match.HOLDS` (a file's key, 0x and 64 hex digits)."""


class Match(StrEnum):
    """How a filter compares its value with its column."""

    EQUAL = "equal"
    HOLDS = "holds"
    """The row holds this file: a `Kind.FILES` column's filter matching the row's own `work_key` (a
    single file, or a bundle by its key) or the key of one of its bundle's files."""
    AT_OR_AFTER = "at_or_after"
    """The column is at or after the value: the inclusive start of a time window."""
    BEFORE = "before"
    """The column is before the value: the exclusive end of a time window."""


FILTERABLE: dict[Match, frozenset[Kind]] = {
    Match.EQUAL: frozenset({Kind.ADDRESS, Kind.INT, Kind.BOOL, Kind.ENUM, Kind.HASH}),
    Match.HOLDS: frozenset({Kind.FILES}),
    Match.AT_OR_AFTER: frozenset({Kind.TIMESTAMP}),
    Match.BEFORE: frozenset({Kind.TIMESTAMP}),
}
"""The column kinds each comparison is offered on (what the consumers know how to parse and bind)."""

KEY_KINDS = frozenset({Kind.INT, Kind.ADDRESS, Kind.ENUM, Kind.TEXT})
"""Kinds a sort key may hold: a cursor carries them as JSON numbers or strings, compared as stored."""


@dataclass(frozen=True)
class Column:
    """One field of a listing's rows."""

    name: str
    kind: Kind
    doc: str
    """The field's description in the API schema."""
    nullable: bool = False
    values: tuple[str, ...] = ()
    """The allowed values of an `ENUM` column."""


@dataclass(frozen=True)
class Filter:
    """One query parameter of a listing (and option of its CLI command); absent means unfiltered."""

    name: str
    doc: str
    """Its description in the API schema and its help in the CLI."""
    column: str | None = None
    """The column compared; None: the column of the same name."""
    match: Match = Match.EQUAL
    false_flag: str | None = None
    """A `BOOL` filter's CLI flag for false (`--active/--removed`)."""


@dataclass(frozen=True, eq=False)
class Listing:
    """One public list of the ledger. Compared by identity: each is declared once, below."""

    name: str
    item: str
    """One row's name in snake_case (`pool`, `pool_stats`): names the generated row and query types
    (`PoolRow`, `PoolQuery`; `PoolStatsRow`), see `type_name`."""
    doc: str
    """The route's description and the CLI command's help."""
    columns: tuple[Column, ...]
    """Every field of a row, in wire order (JSON fields, CSV header)."""
    key: tuple[str, ...]
    """Unique sort key: pages walk it in order and a cursor names the last key served."""
    shown: tuple[str, ...]
    """The columns of the CLI's table for people, in display order (`--json`/`--csv` give all)."""
    filters: tuple[Filter, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a declaration a consumer could not serve, at import rather than on a request."""
        names = [column.name for column in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate column")
        for column in self.columns:
            if (column.kind is Kind.ENUM) != bool(column.values):
                raise ValueError(f"{self.name}.{column.name}: values belong to ENUM columns, and they need some")
        for name in (*self.key, *self.shown):
            self.column(name)
        for name in self.key:
            if self.column(name).kind not in KEY_KINDS or self.column(name).nullable:
                raise ValueError(f"{self.name}: key column {name} must be a non-null {sorted(KEY_KINDS)}")
        for filter_ in self.filters:
            if filter_.name in PAGING_PARAMETERS:
                raise ValueError(f"{self.name}: filter {filter_.name} would shadow a paging parameter")
            column = self.filter_column(filter_)
            if column.kind not in FILTERABLE[filter_.match]:
                raise ValueError(f"{self.name}: filter {filter_.name} cannot compare a {column.kind} column")
            if (filter_.false_flag is not None) != (column.kind is Kind.BOOL):
                raise ValueError(f"{self.name}: filter {filter_.name} needs a false_flag iff it is BOOL")
            if filter_.match is Match.HOLDS and "work_key" not in names:
                raise ValueError(f"{self.name}: filter {filter_.name} needs the work_key a single file is")
            # A time window is served as a block range, exact only for a block time in chain order.
            if filter_.match in (Match.AT_OR_AFTER, Match.BEFORE) and self.key[0] != "block_number":
                raise ValueError(f"{self.name}: time bounds need a listing in chain order")

    @property
    def type_name(self) -> str:
        """`item` in CamelCase (`pool_stats` -> `PoolStats`): the stem of the listing's row and query
        type names, which the API schema shows."""
        return "".join(part.title() for part in self.item.split("_"))

    def column(self, name: str) -> Column:
        """The column called `name`; KeyError if there is none."""
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name} has no column {name}")

    def filter_column(self, filter_: Filter) -> Column:
        """The column `filter_` compares."""
        return self.column(filter_.column or filter_.name)


# Every row ends with the log that produced (or last changed) it: these name its columns.
def _block(doc: str = "Block of the log that last changed this row.") -> Column:
    return Column("block_number", Kind.INT, doc)


def _tx(doc: str = "Transaction of the log that last changed this row (0x-hex).") -> Column:
    return Column("tx_hash", Kind.HASH, doc)


def _log_index(doc: str = "Index of the log in its block.") -> Column:
    return Column("log_index", Kind.INT, doc)


CHAIN_ORDER = ("block_number", "log_index")
"""Event listings are ordered by the position of their log on the chain."""

PROVIDERS = Listing(
    name="providers",
    item="provider",
    doc="Registered providers with their stake, unbonding and slashed totals, by address.",
    columns=(
        Column("address", Kind.ADDRESS, "Provider address (checksummed)."),
        Column("active_stake", Kind.AMOUNT, "Stake backing the provider's nodes (token base units, decimal string)."),
        Column("unbonding", Kind.AMOUNT, "Stake waiting out the unbonding period (base units); still slashable."),
        Column("unbonding_matures_at", Kind.TIMESTAMP, "When the unbonding stake becomes withdrawable.", nullable=True),
        Column("slashed_total", Kind.AMOUNT, "Stake slashed so far for invalid work (base units)."),
        Column("compute_units", Kind.UINT256, "Compute units of the provider's registered nodes."),
        Column("registered_block", Kind.INT, "Block of the ProviderRegistered event.", nullable=True),
        _block(),
        _tx(),
    ),
    key=("address",),
    shown=("address", "active_stake", "unbonding", "slashed_total", "compute_units", "block_number"),
    filters=(Filter("address", "Only this provider (its row, if registered)."),),
)

NODES = Listing(
    name="nodes",
    item="node",
    doc="Registered nodes with their provider, compute units and attestation, by address.",
    columns=(
        Column("address", Kind.ADDRESS, "Node address (checksummed); its key signs submissions and requests."),
        Column("provider", Kind.ADDRESS, "Provider that registered the node."),
        Column("compute_units", Kind.INT, "Compute units the provider declared for the node."),
        Column("specs_hash", Kind.HASH, "Hash of the node's hardware specs (0x-hex)."),
        Column("attested", Kind.BOOL, "Whether an attester confirmed the specs."),
        Column("active", Kind.BOOL, "False once the provider removed the node."),
        _block(),
        _tx(),
    ),
    key=("address",),
    shown=("address", "provider", "compute_units", "attested", "active", "block_number"),
    filters=(
        Filter("address", "Only this node (its row, if registered)."),
        Filter("provider", "Only this provider's nodes."),
        Filter("active", "Only nodes still registered (true) or removed (false).", false_flag="removed"),
    ),
)

POOLS = Listing(
    name="pools",
    item="pool",
    doc="Pools with their terms (model, spec hash, rewards, fees, slash amount, dispute window) and budget, by id.",
    columns=(
        Column("pool_id", Kind.INT, "Pool id."),
        Column("creator", Kind.ADDRESS, "Account that created and funds the pool."),
        Column("manager", Kind.ADDRESS, "Key that signs invites and publishes checkpoints."),
        Column("treasury", Kind.ADDRESS, "Receives the treasury share of slashed stake."),
        Column("status", Kind.ENUM, "created, active or closed.", values=("created", "active", "closed")),
        Column("model_uri", Kind.TEXT, "Model and task set the pool trains."),
        Column(
            "spec_sha256",
            Kind.HASH,
            "sha256 of the pool spec it committed to at creation (0x-hex; 32 zero bytes: no spec); a spec "
            "pool's model_uri is spec://<the same hash>.",
        ),
        Column("reward_per_unit", Kind.AMOUNT, "Paid per finalized work unit (base units)."),
        Column("validator_fee", Kind.AMOUNT, "Paid to the attesting validator per finalized submission (base units)."),
        Column("slash_amount", Kind.AMOUNT, "Stake slashed per invalid submission (base units)."),
        Column("dispute_window", Kind.INT, "Seconds between attestation and finalization."),
        Column("validator_slash_share_bps", Kind.INT, "Validator share of a slash, in basis points."),
        Column("budget", Kind.AMOUNT, "Reward budget left (base units)."),
        _block(),
        _tx(),
    ),
    key=("pool_id",),
    shown=(
        "pool_id",
        "status",
        "manager",
        "spec_sha256",
        "reward_per_unit",
        "validator_fee",
        "slash_amount",
        "budget",
        "block_number",
    ),
    filters=(
        Filter("pool_id", "Only this pool (its row, if created)."),
        Filter("status", "Only pools in this status."),
        Filter("creator", "Only pools created by this account."),
        Filter("manager", "Only pools managed by this key."),
    ),
)

MEMBERSHIPS = Listing(
    name="memberships",
    item="membership",
    doc="Which nodes are (or were) in which pools, and in what state, by pool id and node.",
    columns=(
        Column("pool_id", Kind.INT, "Pool."),
        Column("node", Kind.ADDRESS, "Node (checksummed)."),
        Column(
            "provider",
            Kind.ADDRESS,
            "Provider that joined the node; null for an address that was only blacklisted.",
            nullable=True,
        ),
        Column(
            "state",
            Kind.ENUM,
            "active, left, ejected or slashed; null for an address that never joined.",
            nullable=True,
            values=("active", "left", "ejected", "slashed"),
        ),
        Column("blacklisted", Kind.BOOL, "Whether the pool's manager blacklisted the node (it may not join again)."),
        _block(),
        _tx(),
    ),
    key=("pool_id", "node"),
    shown=("pool_id", "node", "provider", "state", "blacklisted", "block_number"),
    filters=(
        Filter("pool_id", "Only this pool's members."),
        Filter("node", "Only this node's memberships."),
        Filter("provider", "Only memberships of this provider's nodes."),
        Filter("state", "Only memberships in this state."),
    ),
)

# A submission keeps the position of its WorkSubmitted (a bundle: WorkBundleSubmitted) log (a status
# change is recorded in `status_block`/`status_tx_hash`), so a walk made while the indexer writes
# meets every row once.
SUBMISSIONS = Listing(
    name="submissions",
    item="submission",
    doc="Submitted work in submission order, with its status and the block and transaction of its last status change.",
    columns=(
        Column("pool_id", Kind.INT, "Pool the work was submitted to."),
        Column(
            "work_key",
            Kind.HASH,
            "sha256 of the rollout file, or a bundle's key (see files) (0x-hex); the submission's id within its pool.",
        ),
        Column("node", Kind.ADDRESS, "Submitting node."),
        Column("provider", Kind.ADDRESS, "The node's provider (paid or slashed for it)."),
        Column("work_units", Kind.INT, "Work units claimed (a bundle: the sum over its files)."),
        Column("model_version", Kind.INT, "Checkpoint version the rollouts were generated with."),
        Column(
            "status",
            Kind.ENUM,
            "pending, accepted, rejected (waiting for its challenge window), invalid, finalized, forfeited or "
            "expired (never judged before its closed pool's wind-up ended).",
            values=("pending", "accepted", "rejected", "invalid", "finalized", "forfeited", "expired"),
        ),
        Column("submitted_at", Kind.TIMESTAMP, "Time of the block that carried the submission."),
        _block("Block of the WorkSubmitted (or WorkBundleSubmitted) log (a submission's position never moves)."),
        _tx("Transaction that submitted the work (0x-hex)."),
        _log_index("Index of the WorkSubmitted (or WorkBundleSubmitted) log in its block."),
        Column(
            "status_block",
            Kind.INT,
            "Block of the log that last changed the status (attest, invalidate, finalize); None while pending.",
            nullable=True,
        ),
        Column("status_tx_hash", Kind.HASH, "Transaction of that log (0x-hex).", nullable=True),
        Column(
            "files",
            Kind.FILES,
            "The rollout files of a bundle (submitWorkBundle), in bundle order: each file's work_key (its sha256, "
            "where its file is stored) and work_units; work_key above is then the bundle key and work_units their "
            "sum. Null for a single-file submission (submitWork), whose file is work_key. A bundle is judged, "
            "paid and slashed as a whole.",
            nullable=True,
        ),
    ),
    key=CHAIN_ORDER,
    shown=(
        "pool_id",
        "work_key",
        "node",
        "status",
        "work_units",
        "files",
        "submitted_at",
        "block_number",
        "tx_hash",
    ),
    filters=(
        Filter("pool_id", "Only this pool's submissions."),
        Filter("provider", "Only submissions of this provider's nodes."),
        Filter("node", "Only this node's submissions."),
        Filter("status", "Only submissions in this status."),
        Filter(
            "since",
            "Submitted at or after this time (ISO 8601 or Unix seconds; UTC if no zone).",
            column="submitted_at",
            match=Match.AT_OR_AFTER,
        ),
        Filter("until", "Submitted before this time (exclusive).", column="submitted_at", match=Match.BEFORE),
        Filter("tx_hash", "Only the work submitted in this transaction (0x and 64 hex digits)."),
        Filter(
            "status_tx_hash",
            "Only submissions whose status this transaction changed last (0x and 64 hex digits): the one place "
            "a forfeit, expiry or rejection is recorded; an attestation, invalidation or finalization also "
            "shows in verdicts and rewards under its tx_hash.",
        ),
        Filter(
            "file",
            "The submission of this file (0x and 64 hex digits): the one whose work_key it is (a single file, "
            "or a bundle by its key), or a bundle holding a file with this key.",
            column="files",
            match=Match.HOLDS,
        ),
    ),
)

VERDICTS = Listing(
    name="verdicts",
    item="verdict",
    doc="Validator verdicts in chain order; invalid ones carry the validator's reason code.",
    columns=(
        Column("pool_id", Kind.INT, "Pool of the judged submission."),
        Column("work_key", Kind.HASH, "The judged submission (0x-hex)."),
        Column(
            "verdict",
            Kind.ENUM,
            "accepted (WorkAttested) or invalid (WorkInvalidated).",
            values=("accepted", "invalid"),
        ),
        Column("validator", Kind.ADDRESS, "Validator that gave the verdict."),
        Column(
            "reason",
            Kind.TEXT,
            "Reason code of an invalid verdict (e.g. sampling_mismatch); null when accepted.",
            nullable=True,
        ),
        _block("Block of the verdict's log."),
        _tx("Transaction of the verdict's log (0x-hex)."),
        _log_index(),
        Column(
            "lag_blocks",
            Kind.INT,
            "Blocks from the submission's log to this verdict's: how far behind the submissions its validator "
            "judged it (0: in the same block).",
            nullable=True,
        ),
    ),
    key=CHAIN_ORDER,
    shown=("pool_id", "work_key", "verdict", "reason", "validator", "lag_blocks", "block_number", "tx_hash"),
    filters=(
        Filter("pool_id", "Only verdicts on this pool's submissions."),
        Filter("validator", "Only this validator's verdicts."),
        Filter("verdict", "Only accepted or only invalid verdicts."),
        Filter("tx_hash", "Only verdicts logged by this transaction (0x and 64 hex digits)."),
    ),
)

SLASHES = Listing(
    name="slashes",
    item="slash",
    doc="Stake slashed for invalid work and how it was split between validator and treasury.",
    columns=(
        Column("pool_id", Kind.INT, "Pool of the invalid submission."),
        Column("work_key", Kind.HASH, "The invalid submission (0x-hex)."),
        Column("provider", Kind.ADDRESS, "Slashed provider."),
        Column("validator", Kind.ADDRESS, "Reporting validator (credited validator_share)."),
        Column("validator_share", Kind.AMOUNT, "Credited to the validator (base units)."),
        Column("treasury", Kind.ADDRESS, "Pool treasury (sent treasury_share)."),
        Column("treasury_share", Kind.AMOUNT, "Sent to the treasury (base units)."),
        Column("amount", Kind.AMOUNT, "Total slashed (base units)."),
        _block("Block of the SlashDistributed log."),
        _tx("Transaction of the log (0x-hex)."),
        _log_index(),
    ),
    key=CHAIN_ORDER,
    shown=("pool_id", "work_key", "provider", "amount", "validator_share", "treasury_share", "block_number"),
    filters=(
        Filter("pool_id", "Only slashes in this pool."),
        Filter("provider", "Only slashes of this provider."),
        Filter("validator", "Only slashes reported by this validator."),
        Filter("tx_hash", "Only slashes logged by this transaction (0x and 64 hex digits)."),
    ),
)

REWARDS = Listing(
    name="rewards",
    item="reward",
    doc="Credits (provider rewards, validator fees, slash shares) and withdrawals in chain order.",
    columns=(
        Column("account", Kind.ADDRESS, "Credited (or withdrawing) account."),
        Column(
            "kind",
            Kind.ENUM,
            "provider_reward, validator_fee, slash_share (credits) or withdrawal (payout).",
            values=("provider_reward", "validator_fee", "slash_share", "withdrawal"),
        ),
        Column("amount", Kind.AMOUNT, "Base units, decimal string."),
        Column("pool_id", Kind.INT, "Pool of the credit; null for a withdrawal.", nullable=True),
        Column("work_key", Kind.HASH, "Submission of the credit (0x-hex); null for a withdrawal.", nullable=True),
        _block("Block of the log."),
        _tx("Transaction of the log (0x-hex)."),
        _log_index(),
    ),
    # One log can credit two accounts (WorkFinalized: provider reward and validator fee), so the
    # position alone is not unique here; (kind, account) completes the natural key.
    key=(*CHAIN_ORDER, "kind", "account"),
    shown=("account", "kind", "amount", "pool_id", "work_key", "block_number", "tx_hash"),
    filters=(
        Filter("account", "Only this account's credits and withdrawals."),
        Filter("pool_id", "Only credits from this pool (withdrawals have no pool)."),
        Filter("kind", "Only this kind of entry."),
        Filter("tx_hash", "Only credits and withdrawals logged by this transaction (0x and 64 hex digits)."),
    ),
)

VALIDATORS = Listing(
    name="validators",
    item="validator",
    doc="Accounts granted (or revoked) the validator role, by address.",
    columns=(
        Column("address", Kind.ADDRESS, "Validator address."),
        Column("active", Kind.BOOL, "Whether it holds VALIDATOR_ROLE now."),
        _block("Block of the grant or revocation."),
        _tx("Transaction of the grant or revocation (0x-hex)."),
    ),
    key=("address",),
    shown=("address", "active", "block_number", "tx_hash"),
    filters=(
        Filter("address", "Only this account (its row, if it was ever granted the role)."),
        Filter("active", "Only validators holding (true) or having lost (false) the role.", false_flag="revoked"),
    ),
)

CHECKPOINTS = Listing(
    name="checkpoints",
    item="checkpoint",
    doc="Published checkpoints (version, manifest sha256, URI) in chain order.",
    columns=(
        Column("pool_id", Kind.INT, "Pool the checkpoint belongs to."),
        Column("version", Kind.INT, "Checkpoint version (strictly increasing per pool)."),
        Column(
            "manifest_sha256",
            Kind.HASH,
            "sha256 of the checkpoint manifest (0x-hex); workers check downloads against it.",
        ),
        Column("uri", Kind.TEXT, "Where the manifest is stored."),
        _block("Block of the CheckpointPublished log."),
        _tx("Transaction of the log (0x-hex)."),
        _log_index(),
    ),
    key=CHAIN_ORDER,
    shown=("pool_id", "version", "manifest_sha256", "uri", "block_number", "tx_hash"),
    filters=(
        Filter("pool_id", "Only this pool's checkpoints."),
        Filter("tx_hash", "Only checkpoints published by this transaction (0x and 64 hex digits)."),
    ),
)

CHECKPOINT_FIGURES: tuple[Column, ...] = (
    Column("mean_reward", Kind.FLOAT, "GRPO: mean reward of the rollouts the step trained on.", nullable=True),
    Column("loss", Kind.FLOAT, "GRPO: the step's loss.", nullable=True),
    Column("samples", Kind.INT, "GRPO: rollouts trained on (after the online filter).", nullable=True),
    Column("tokens", Kind.INT, "GRPO: completion tokens trained on.", nullable=True),
    Column("grad_norm", Kind.FLOAT, "GRPO: global gradient norm before clipping.", nullable=True),
    Column("inner_loss", Kind.FLOAT, "DiLoCo: mean over the round's files of their mean inner loss.", nullable=True),
    Column(
        "inner_loss_last", Kind.FLOAT, "DiLoCo: mean over the round's files of their last inner loss.", nullable=True
    ),
    Column("delta_norm", Kind.FLOAT, "DiLoCo: norm of the averaged pseudo-gradient.", nullable=True),
    Column("contributors", Kind.INT, "DiLoCo: files averaged in the outer step.", nullable=True),
)
"""The figures of the trainer's metrics file (`proofpool-metrics.json`) the ledger serves, each under
the name the file gives it; null when the file has no such figure or was not verified."""

CHECKPOINT_METRICS = Listing(
    name="checkpoint_metrics",
    item="checkpoint_metrics",
    doc="The trainer's figures of each published checkpoint (the step or outer round that made it), read from "
    "its proofpool-metrics.json once the file's sha256 checked against its manifest and the manifest's against "
    "the chain; one row per row of checkpoints, by pool id and version.",
    columns=(
        Column("pool_id", Kind.INT, "Pool the checkpoint belongs to."),
        Column("version", Kind.INT, "Checkpoint version."),
        Column("manifest_sha256", Kind.HASH, "sha256 of the checkpoint manifest the chain anchored (0x-hex)."),
        Column(
            "status",
            Kind.ENUM,
            "pending (not read yet), verified (the figures are the anchored file's), unlisted (the manifest lists "
            "no metrics file), missing (the store lacks the manifest or the file; tried again a few times), "
            "mismatch (a sha256 differs from the manifest's or the chain's) or malformed (not a metrics file of "
            "this checkpoint).",
            values=("pending", "verified", "unlisted", "missing", "mismatch", "malformed"),
        ),
        Column("detail", Kind.TEXT, "Why the figures are not verified; null when verified or pending.", nullable=True),
        *CHECKPOINT_FIGURES,
    ),
    key=("pool_id", "version"),
    shown=("pool_id", "version", "status", "mean_reward", "loss", "inner_loss", "samples", "contributors"),
    filters=(
        Filter("pool_id", "Only this pool's checkpoints."),
        Filter("status", "Only checkpoints whose figures are in this status."),
    ),
)

# --- statistics -------------------------------------------------------------------------------
# Aggregates of the submissions, verdicts, slashes and rewards listings, kept exact by database
# triggers (migration 0012) so a page of them costs what any page costs at any ledger size. A row
# sums many logs, so it names none: check it against the listings it sums.

_ACCEPTED_UNITS = "Work units of accepted and finalized submissions (a bundle: the sum over its files)."


def _count(name: str, doc: str) -> Column:
    return Column(name, Kind.INT, doc)


POOL_STATS = Listing(
    name="pool_stats",
    item="pool_stats",
    doc="Per pool totals: submissions and files, a count per submission status, work units accepted, stake slashed, "
    "rewards and validator fees paid; one row per pool with any submission, slash or credit, by pool id.",
    columns=(
        Column("pool_id", Kind.INT, "Pool id."),
        _count("submissions", "Submissions to the pool (a bundle counts once)."),
        _count("files", "Rollout files submitted: a bundle counts its files, any other submission one."),
        _count("pending", "Submissions not judged yet."),
        _count("accepted", "Submissions attested, in their dispute window."),
        _count("rejected", "Submissions rejected, waiting out the pool's challenge window."),
        _count("invalid", "Submissions invalidated (their provider was slashed)."),
        _count("finalized", "Submissions finalized (paid)."),
        _count("forfeited", "Accepted submissions of a node later slashed, settled without payment."),
        _count("expired", "Submissions never judged before the closed pool's wind-up ended."),
        _count("work_units_accepted", _ACCEPTED_UNITS),
        Column("slashed", Kind.AMOUNT, "Stake slashed for the pool's invalid work (base units)."),
        Column("rewards_paid", Kind.AMOUNT, "Provider rewards credited for the pool's finalized work (base units)."),
        Column("validator_fees", Kind.AMOUNT, "Validator fees credited for the pool's finalized work (base units)."),
    ),
    key=("pool_id",),
    shown=(
        "pool_id",
        "submissions",
        "pending",
        "accepted",
        "invalid",
        "finalized",
        "work_units_accepted",
        "slashed",
        "rewards_paid",
    ),
    filters=(Filter("pool_id", "Only this pool's totals."),),
)

CONTRIBUTORS = Listing(
    name="contributors",
    item="contributor",
    doc="Per pool and node totals (a pool's leaderboard): submissions, files, pending, accepted and invalid work, "
    "work units accepted, rewards and slashes; one row per node with a submission in the pool, by pool id and node.",
    columns=(
        Column("pool_id", Kind.INT, "Pool."),
        Column("node", Kind.ADDRESS, "Submitting node (checksummed)."),
        Column("provider", Kind.ADDRESS, "The node's provider, as of its latest submission to the pool."),
        _count("submissions", "The node's submissions to the pool (a bundle counts once)."),
        _count("files", "Its rollout files: a bundle counts its files, any other submission one."),
        _count("pending", "Its submissions not judged yet."),
        _count("accepted", "Its submissions attested or finalized."),
        _count("invalid", "Its submissions invalidated."),
        _count("work_units_accepted", _ACCEPTED_UNITS),
        Column("rewards", Kind.AMOUNT, "Provider rewards credited for its submissions (base units)."),
        Column("slashed", Kind.AMOUNT, "Stake slashed for its invalid submissions (base units)."),
    ),
    key=("pool_id", "node"),
    shown=(
        "pool_id",
        "node",
        "provider",
        "submissions",
        "accepted",
        "invalid",
        "work_units_accepted",
        "rewards",
        "slashed",
    ),
    filters=(
        Filter("pool_id", "Only this pool's contributors."),
        Filter("node", "Only this node's rows (one per pool)."),
        Filter("provider", "Only rows of this provider's nodes."),
    ),
)

VALIDATOR_STATS = Listing(
    name="validator_stats",
    item="validator_stats",
    doc="Per validator totals: verdicts given, fees and slash shares earned; one row per account with a verdict "
    "or such a credit, by address.",
    columns=(
        Column("validator", Kind.ADDRESS, "Validator address (checksummed)."),
        _count("verdicts_accepted", "Submissions it attested."),
        _count("verdicts_invalid", "Submissions it invalidated."),
        Column("fees", Kind.AMOUNT, "Validator fees credited to it for finalized work (base units)."),
        Column(
            "slash_shares",
            Kind.AMOUNT,
            "Its slash_share credits: its share of the slashes it reported, and what it was awarded for proving "
            "another validator's verdict wrong (base units).",
        ),
    ),
    key=("validator",),
    shown=("validator", "verdicts_accepted", "verdicts_invalid", "fees", "slash_shares"),
    filters=(Filter("validator", "Only this validator's totals."),),
)

STATISTICS: tuple[Listing, ...] = (POOL_STATS, CONTRIBUTORS, VALIDATOR_STATS)
"""The listings computed from the others (by the database's triggers) rather than from events."""

# --- the market -------------------------------------------------------------------------------
# One row per pool with everything a market page shows of it, read by one query (the view of
# migration 0013) instead of three requests per pool: the pool's row, its pool_stats row, the
# version of its latest checkpoint and the number of its active memberships.

MARKET = Listing(
    name="market",
    item="market_pool",
    doc="Every pool with its terms, its totals (those of pool_stats, null before its first submission, slash or "
    "credit), the version of its latest checkpoint and its active members, by pool id: a market page in one request.",
    columns=(
        *POOLS.columns,
        *(replace(column, nullable=True) for column in POOL_STATS.columns if column.name != "pool_id"),
        Column("latest_checkpoint", Kind.INT, "Version of the pool's latest checkpoint; null before its first.",
               nullable=True),
        _count("active_members", "Nodes whose membership of the pool is active."),
    ),
    key=("pool_id",),
    shown=("pool_id", "status", "model_uri", "latest_checkpoint", "active_members", "submissions", "accepted",
           "invalid", "pending", "budget"),
    filters=(
        Filter("pool_id", "Only this pool."),
        Filter("status", "Only pools in this status."),
    ),
)  # fmt: skip

LISTINGS: dict[str, Listing] = {
    listing.name: listing
    for listing in (
        PROVIDERS, NODES, POOLS, MEMBERSHIPS, SUBMISSIONS, VERDICTS, SLASHES, REWARDS, VALIDATORS, CHECKPOINTS,
        CHECKPOINT_METRICS, POOL_STATS, CONTRIBUTORS, VALIDATOR_STATS, MARKET,
    )
}  # fmt: skip
"""Every listing by name, in the order the API and the CLI present them."""


def csv_cell(value: object) -> str:
    """One JSON value of a listing's row as a CSV cell (null empty, booleans true/false, a list or
    object such as a bundle's files as compact JSON): the ledger API's CSV and the explorer's
    tables write every cell this way, so a download from either reads the same."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
