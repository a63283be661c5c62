"""The public contribution ledger, read side: keyset pages over the chain projections.

Every list is ordered by a unique, indexed key and continued from an opaque cursor naming the
last row served (`WHERE key > cursor ORDER BY key LIMIT n`), never by OFFSET, so page 10,000 of
a million submissions costs what page 1 costs. Event tables (submissions, verdicts, slashes,
rewards, checkpoints) are ordered by chain position `(block_number, log_index)`; entity tables
(providers, nodes, validators, pools, memberships) by their primary key, which never changes.

Submissions keep the position of their WorkSubmitted log (a status change is recorded in
`status_block`/`status_tx_hash`), so a walk made while the indexer writes meets every row once.

This module is the only place where database types become API types: BYTEA -> 0x-hex and
NUMERIC(78,0) -> decimal string happen in SQL here; the work key of a lookup goes hex -> bytes here.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cache
from typing import Any, Generic, Literal, TypeVar

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import class_row
from psycopg.types.datetime import TimestamptzLoader
from pydantic import ConfigDict, with_config

SubmissionStatus = Literal["pending", "accepted", "rejected", "invalid", "finalized", "forfeited", "expired"]
PoolStatus = Literal["created", "active", "closed"]
VerdictKind = Literal["accepted", "invalid"]
RewardKind = Literal["provider_reward", "validator_fee", "slash_share", "withdrawal"]
MemberState = Literal["active", "left", "ejected", "slashed"]

MAX_CURSOR_CHARS = 512
_INT64_MAX = 2**63 - 1

# Rows: field names equal the SQL column aliases below (class_row builds them by name). The
# docstrings become the OpenAPI field descriptions.
_DOCS = ConfigDict(use_attribute_docstrings=True)


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class ProviderRow:
    address: str
    """Provider address (checksummed)."""
    active_stake: str
    """Stake backing the provider's nodes (token base units, decimal string)."""
    unbonding: str
    """Stake waiting out the unbonding period (base units); still slashable."""
    unbonding_matures_at: datetime | None
    """When the unbonding stake becomes withdrawable."""
    slashed_total: str
    """Stake slashed so far for invalid work (base units)."""
    compute_units: str
    """Compute units of the provider's registered nodes."""
    registered_block: int | None
    """Block of the ProviderRegistered event."""
    block_number: int
    """Block of the log that last changed this row."""
    tx_hash: str
    """Transaction of the log that last changed this row (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class NodeRow:
    address: str
    """Node address (checksummed); its key signs submissions and requests."""
    provider: str
    """Provider that registered the node."""
    compute_units: int
    """Compute units the provider declared for the node."""
    specs_hash: str
    """Hash of the node's hardware specs (0x-hex)."""
    attested: bool
    """Whether an attester confirmed the specs."""
    active: bool
    """False once the provider removed the node."""
    block_number: int
    """Block of the log that last changed this row."""
    tx_hash: str
    """Transaction of the log that last changed this row (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class PoolRow:
    pool_id: int
    """Pool id."""
    creator: str
    """Account that created and funds the pool."""
    manager: str
    """Key that signs invites and publishes checkpoints."""
    treasury: str
    """Receives the treasury share of slashed stake."""
    status: PoolStatus
    """created, active or closed."""
    model_uri: str
    """Model and task set the pool trains."""
    reward_per_unit: str
    """Paid per finalized work unit (base units)."""
    validator_fee: str
    """Paid to the attesting validator per finalized submission (base units)."""
    slash_amount: str
    """Stake slashed per invalid submission (base units)."""
    dispute_window: int
    """Seconds between attestation and finalization."""
    validator_slash_share_bps: int
    """Validator share of a slash, in basis points."""
    budget: str
    """Reward budget left (base units)."""
    block_number: int
    """Block of the log that last changed this row."""
    tx_hash: str
    """Transaction of the log that last changed this row (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class MembershipRow:
    pool_id: int
    """Pool."""
    node: str
    """Node (checksummed)."""
    provider: str | None
    """Provider that joined the node; null for an address that was only blacklisted."""
    state: MemberState | None
    """active, left, ejected or slashed; null for an address that never joined."""
    blacklisted: bool
    """Whether the pool's manager blacklisted the node (it may not join again)."""
    block_number: int
    """Block of the log that last changed this row."""
    tx_hash: str
    """Transaction of the log that last changed this row (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class SubmissionRow:
    pool_id: int
    """Pool the work was submitted to."""
    work_key: str
    """sha256 of the rollout file (0x-hex); the submission's id within its pool."""
    node: str
    """Submitting node."""
    provider: str
    """The node's provider (paid or slashed for it)."""
    work_units: int
    """Work units claimed."""
    model_version: int
    """Checkpoint version the rollouts were generated with."""
    status: SubmissionStatus
    """pending, accepted, rejected (waiting for its challenge window), invalid, finalized, forfeited or
    expired (never judged before its closed pool's wind-up ended)."""
    submitted_at: datetime
    """Time of the block that carried the submission."""
    block_number: int
    """Block of the WorkSubmitted log (a submission's position never moves)."""
    tx_hash: str
    """Transaction that submitted the work (0x-hex)."""
    log_index: int
    """Index of the WorkSubmitted log in its block."""
    status_block: int | None
    """Block of the log that last changed the status (attest, invalidate, finalize); None while pending."""
    status_tx_hash: str | None
    """Transaction of that log (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class VerdictRow:
    pool_id: int
    """Pool of the judged submission."""
    work_key: str
    """The judged submission (0x-hex)."""
    verdict: VerdictKind
    """accepted (WorkAttested) or invalid (WorkInvalidated)."""
    validator: str
    """Validator that gave the verdict."""
    reason: str | None
    """Reason code of an invalid verdict (e.g. sampling_mismatch); null when accepted."""
    block_number: int
    """Block of the verdict's log."""
    tx_hash: str
    """Transaction of the verdict's log (0x-hex)."""
    log_index: int
    """Index of the log in its block."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class SlashRow:
    pool_id: int
    """Pool of the invalid submission."""
    work_key: str
    """The invalid submission (0x-hex)."""
    provider: str
    """Slashed provider."""
    validator: str
    """Reporting validator (credited validator_share)."""
    validator_share: str
    """Credited to the validator (base units)."""
    treasury: str
    """Pool treasury (sent treasury_share)."""
    treasury_share: str
    """Sent to the treasury (base units)."""
    amount: str
    """Total slashed (base units)."""
    block_number: int
    """Block of the SlashDistributed log."""
    tx_hash: str
    """Transaction of the log (0x-hex)."""
    log_index: int
    """Index of the log in its block."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class RewardRow:
    account: str
    """Credited (or withdrawing) account."""
    kind: RewardKind
    """provider_reward, validator_fee, slash_share (credits) or withdrawal (payout)."""
    amount: str
    """Base units, decimal string."""
    pool_id: int | None
    """Pool of the credit; null for a withdrawal."""
    work_key: str | None
    """Submission of the credit (0x-hex); null for a withdrawal."""
    block_number: int
    """Block of the log."""
    tx_hash: str
    """Transaction of the log (0x-hex)."""
    log_index: int
    """Index of the log in its block."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class ValidatorRow:
    address: str
    """Validator address."""
    active: bool
    """Whether it holds VALIDATOR_ROLE now."""
    block_number: int
    """Block of the grant or revocation."""
    tx_hash: str
    """Transaction of the grant or revocation (0x-hex)."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class CheckpointRow:
    pool_id: int
    """Pool the checkpoint belongs to."""
    version: int
    """Checkpoint version (strictly increasing per pool)."""
    manifest_sha256: str
    """sha256 of the checkpoint manifest (0x-hex); workers check downloads against it."""
    uri: str
    """Where the manifest is stored."""
    block_number: int
    """Block of the CheckpointPublished log."""
    tx_hash: str
    """Transaction of the log (0x-hex)."""
    log_index: int
    """Index of the log in its block."""


@with_config(_DOCS)
@dataclass(frozen=True, slots=True)
class SubmissionDetail:
    submission: SubmissionRow
    """The submission as it stands."""
    verdicts: list[VerdictRow]
    """Every verdict given on it, oldest first."""
    slashes: list[SlashRow]
    """The slash it caused, if it was invalid."""
    rewards: list[RewardRow]
    """Credits paid for it (provider reward, validator fee, slash share)."""


Row = TypeVar("Row")


@dataclass(frozen=True)
class Page(Generic[Row]):
    """One page of a list, and the cursor of the next (None: this was the last page)."""

    items: list[Row]
    next_cursor: str | None


class InvalidCursor(ValueError):
    """A cursor this listing did not issue (malformed, tampered, or from another listing)."""


@dataclass(frozen=True, eq=False)
class Listing(Generic[Row]):
    """How one resource is listed: its query, its unique sort key, and the filters it accepts."""

    name: str
    """Resource name; also the cursor's tag, so one list's cursor is refused by another."""
    select: str
    """SELECT ... FROM ... without WHERE/ORDER BY; column aliases equal the row's fields."""
    key: tuple[str, ...]
    """Unique sort key: columns of the table, also fields of the row."""
    key_types: tuple[type, ...]
    """Python type of each key column (int or str), checked when a cursor is decoded."""
    filters: Mapping[str, str]
    """Filter name -> SQL predicate using the parameter of the same name."""
    row: type[Row]


def _hex(column: str, alias: str | None = None) -> str:
    return f"'0x' || encode({column}, 'hex') AS {alias or column}"


def _dec(column: str) -> str:
    return f"{column}::text AS {column}"


PROVIDERS: Listing[ProviderRow] = Listing(
    name="providers",
    select=f"""SELECT address, {_dec("active_stake")}, {_dec("unbonding")}, unbonding_matures_at,
        {_dec("slashed_total")}, {_dec("compute_units")}, registered_block, block_number, {_hex("tx_hash")}
        FROM providers""",
    key=("address",),
    key_types=(str,),
    filters={},
    row=ProviderRow,
)

NODES: Listing[NodeRow] = Listing(
    name="nodes",
    select=f"""SELECT address, provider, compute_units, {_hex("specs_hash")}, attested, active,
        block_number, {_hex("tx_hash")} FROM nodes""",
    key=("address",),
    key_types=(str,),
    filters={"provider": "provider = %(provider)s", "active": "active = %(active)s"},
    row=NodeRow,
)

POOLS: Listing[PoolRow] = Listing(
    name="pools",
    select=f"""SELECT pool_id, creator, manager, treasury, status, model_uri, {_dec("reward_per_unit")},
        {_dec("validator_fee")}, {_dec("slash_amount")}, dispute_window, validator_slash_share_bps,
        {_dec("budget")}, block_number, {_hex("tx_hash")} FROM pools""",
    key=("pool_id",),
    key_types=(int,),
    filters={
        "status": "status = %(status)s",
        "creator": "creator = %(creator)s",
        "manager": "manager = %(manager)s",
    },
    row=PoolRow,
)

MEMBERSHIPS: Listing[MembershipRow] = Listing(
    name="memberships",
    select=f"""SELECT pool_id, node, provider, state, blacklisted, block_number, {_hex("tx_hash")}
        FROM memberships""",
    key=("pool_id", "node"),
    key_types=(int, str),
    filters={
        "pool_id": "pool_id = %(pool_id)s",
        "node": "node = %(node)s",
        "provider": "provider = %(provider)s",
        "state": "state = %(state)s",
    },
    row=MembershipRow,
)

SUBMISSION_COLUMNS = f"""pool_id, {_hex("work_key")}, node, provider, work_units, model_version, status,
    submitted_at, block_number, {_hex("tx_hash")}, log_index, status_block, {_hex("status_tx_hash")}"""

SUBMISSIONS: Listing[SubmissionRow] = Listing(
    name="submissions",
    select=f"SELECT {SUBMISSION_COLUMNS} FROM submissions",
    key=("block_number", "log_index"),
    key_types=(int, int),
    filters={
        "pool_id": "pool_id = %(pool_id)s",
        "provider": "provider = %(provider)s",
        "node": "node = %(node)s",
        "status": "status = %(status)s",
        # Block time never decreases along the chain, so a time window is exactly a block range: its
        # ends come from the covering time index in O(log n) and the page walks a position index
        # (a plain `submitted_at` predicate would lure the planner into sorting the whole window).
        "since": """block_number >= COALESCE((SELECT f.block_number FROM submissions f
            WHERE f.submitted_at >= %(since)s ORDER BY f.submitted_at, f.block_number LIMIT 1), 9223372036854775807)""",
        "until": """block_number <= COALESCE((SELECT l.block_number FROM submissions l
            WHERE l.submitted_at < %(until)s ORDER BY l.submitted_at DESC, l.block_number DESC LIMIT 1), -1)""",
    },
    row=SubmissionRow,
)

VERDICT_COLUMNS = f"""pool_id, {_hex("work_key")}, verdict, validator, reason, block_number,
    {_hex("tx_hash")}, log_index"""

VERDICTS: Listing[VerdictRow] = Listing(
    name="verdicts",
    select=f"SELECT {VERDICT_COLUMNS} FROM verdicts",
    key=("block_number", "log_index"),
    key_types=(int, int),
    filters={
        "pool_id": "pool_id = %(pool_id)s",
        "validator": "validator = %(validator)s",
        "verdict": "verdict = %(verdict)s",
    },
    row=VerdictRow,
)

SLASH_COLUMNS = f"""pool_id, {_hex("work_key")}, provider, validator, {_dec("validator_share")}, treasury,
    {_dec("treasury_share")}, {_dec("amount")}, block_number, {_hex("tx_hash")}, log_index"""

SLASHES: Listing[SlashRow] = Listing(
    name="slashes",
    select=f"SELECT {SLASH_COLUMNS} FROM slashes",
    key=("block_number", "log_index"),
    key_types=(int, int),
    filters={
        "pool_id": "pool_id = %(pool_id)s",
        "provider": "provider = %(provider)s",
        "validator": "validator = %(validator)s",
    },
    row=SlashRow,
)

REWARD_COLUMNS = f"""account, kind, {_dec("amount")}, pool_id,
    CASE WHEN work_key IS NULL THEN NULL ELSE '0x' || encode(work_key, 'hex') END AS work_key,
    block_number, {_hex("tx_hash")}, log_index"""

# One log can credit two accounts (WorkFinalized: provider reward and validator fee), so the
# position alone is not unique here; (kind, account) completes the natural key.
REWARDS: Listing[RewardRow] = Listing(
    name="rewards",
    select=f"SELECT {REWARD_COLUMNS} FROM rewards",
    key=("block_number", "log_index", "kind", "account"),
    key_types=(int, int, str, str),
    filters={
        "account": "account = %(account)s",
        "pool_id": "pool_id = %(pool_id)s",
        "kind": "kind = %(kind)s",
    },
    row=RewardRow,
)

VALIDATORS: Listing[ValidatorRow] = Listing(
    name="validators",
    select=f"SELECT address, active, block_number, {_hex('tx_hash')} FROM validators",
    key=("address",),
    key_types=(str,),
    filters={"active": "active = %(active)s"},
    row=ValidatorRow,
)

CHECKPOINTS: Listing[CheckpointRow] = Listing(
    name="checkpoints",
    select=f"""SELECT pool_id, version, {_hex("manifest_sha256")}, uri, block_number, {_hex("tx_hash")},
        log_index FROM checkpoints""",
    key=("block_number", "log_index"),
    key_types=(int, int),
    filters={"pool_id": "pool_id = %(pool_id)s"},
    row=CheckpointRow,
)

SELECT_SUBMISSION = f"""SELECT {SUBMISSION_COLUMNS} FROM submissions
    WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s"""
SELECT_SUBMISSION_VERDICTS = f"""SELECT {VERDICT_COLUMNS} FROM verdicts
    WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s ORDER BY block_number, log_index"""
SELECT_SUBMISSION_SLASHES = f"""SELECT {SLASH_COLUMNS} FROM slashes
    WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s ORDER BY block_number, log_index"""
SELECT_SUBMISSION_REWARDS = f"""SELECT {REWARD_COLUMNS} FROM rewards
    WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s ORDER BY block_number, log_index, kind, account"""


class _UtcTimestamptzLoader(TimestamptzLoader):
    """Times in UTC whatever the server's TimeZone, so the same row always prints the same."""

    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


def _rows(conn: AsyncConnection, row_type: type[Row]) -> AsyncCursor[Row]:
    """A cursor making `row_type` rows with UTC times."""
    cur = conn.cursor(row_factory=class_row(row_type))
    cur.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
    return cur


def encode_cursor(listing: Listing[Any], key: tuple[int | str, ...]) -> str:
    """An opaque cursor for `listing` that resumes after the row whose sort key is `key`."""
    raw = json.dumps([listing.name, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(listing: Listing[Any], cursor: str) -> tuple[int | str, ...]:
    """The sort key a cursor of `listing` carries; `InvalidCursor` for anything else."""
    if not cursor or len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursor(f"cursor must be 1..{MAX_CURSOR_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not one this API issued") from exc
    if not isinstance(data, list) or len(data) != len(listing.key) + 1 or data[0] != listing.name:
        raise InvalidCursor(f"cursor is not a {listing.name} cursor")
    key = tuple(data[1:])
    for value, kind in zip(key, listing.key_types, strict=True):
        if kind is int and not (type(value) is int and 0 <= value <= _INT64_MAX):
            raise InvalidCursor("cursor holds an out-of-range position")
        if kind is str and not (isinstance(value, str) and len(value) <= 128 and "\x00" not in value):
            raise InvalidCursor("cursor holds a malformed key")
    return key


@cache
def page_sql(listing: Listing[Any], filter_names: frozenset[str], resume: bool) -> str:
    """The page query for one combination of filters, composed only from the listing's constants:
    `WHERE filters AND key > cursor ORDER BY key LIMIT n`, which walks an index in key order."""
    predicates = [listing.filters[name] for name in sorted(filter_names)]
    key = ", ".join(listing.key)
    if resume:
        marks = ", ".join(f"%(after_{i})s" for i in range(len(listing.key)))
        predicates.append(f"({key}) > ({marks})")
    where = f" WHERE {' AND '.join(predicates)}" if predicates else ""
    return f"{listing.select}{where} ORDER BY {key} LIMIT %(limit)s"


async def fetch_page(
    conn: AsyncConnection,
    listing: Listing[Row],
    *,
    filters: Mapping[str, Any],
    cursor: str | None,
    limit: int,
) -> Page[Row]:
    """One page of `listing`: rows matching every non-None filter, after `cursor`, in key order."""
    given = {name: value for name, value in filters.items() if value is not None}
    unknown = set(given) - set(listing.filters)
    if unknown:
        raise ValueError(f"{listing.name} has no filter {sorted(unknown)}")
    params: dict[str, Any] = {**given, "limit": limit + 1}
    if cursor is not None:
        params.update({f"after_{i}": value for i, value in enumerate(decode_cursor(listing, cursor))})
    query = page_sql(listing, frozenset(given), cursor is not None)
    async with _rows(conn, listing.row) as cur:
        await cur.execute(query, params)
        rows = await cur.fetchall()
    if len(rows) <= limit:
        return Page(items=rows, next_cursor=None)
    rows = rows[:limit]
    last = rows[-1]
    return Page(items=rows, next_cursor=encode_cursor(listing, tuple(getattr(last, col) for col in listing.key)))


async def fetch_submission(conn: AsyncConnection, pool_id: int, work_key: str) -> SubmissionDetail | None:
    """One submission with its verdicts, slash and credits; None when the chain never saw it.

    `work_key` is 0x-hex (64 digits); the caller has checked its form.
    """
    params = {"pool_id": pool_id, "work_key": bytes.fromhex(work_key.removeprefix("0x"))}
    async with _rows(conn, SubmissionRow) as cur:
        submission = await (await cur.execute(SELECT_SUBMISSION, params)).fetchone()
    if submission is None:
        return None
    async with _rows(conn, VerdictRow) as cur:
        verdicts = await (await cur.execute(SELECT_SUBMISSION_VERDICTS, params)).fetchall()
    async with _rows(conn, SlashRow) as cur:
        slashes = await (await cur.execute(SELECT_SUBMISSION_SLASHES, params)).fetchall()
    async with _rows(conn, RewardRow) as cur:
        rewards = await (await cur.execute(SELECT_SUBMISSION_REWARDS, params)).fetchall()
    return SubmissionDetail(submission=submission, verdicts=verdicts, slashes=slashes, rewards=rewards)


def row_fields(row_type: type) -> list[str]:
    """Field names of a row type in declaration order (the CSV header)."""
    return [f.name for f in fields(row_type)]
