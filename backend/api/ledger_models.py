"""Query and response models of the public ledger API.

Queries forbid unknown parameters, so an auditor's typo (`?pool=3`) is a 422, not a silently
unfiltered list. Addresses are accepted in any case and compared checksummed, as stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from eth_utils import is_checksum_address, is_hex_address, to_checksum_address
from proofpool.backend.db.ledger import (
    MAX_CURSOR_CHARS,
    MemberState,
    PoolStatus,
    RewardKind,
    SubmissionStatus,
    VerdictKind,
)
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Row = TypeVar("Row")


def _checksummed(value: str) -> str:
    """The checksummed form; a mixed-case address must already be checksummed (it may be a typo)."""
    digits = value[2:]
    single_case = digits in (digits.lower(), digits.upper())
    if not (value.startswith("0x") and is_hex_address(value) and (single_case or is_checksum_address(value))):
        raise ValueError("not an address (0x and 40 hex digits, valid checksum if mixed case)")
    return to_checksum_address(value)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


Address = Annotated[str, Field(max_length=42), AfterValidator(_checksummed)]
PoolId = Annotated[int, Field(ge=0, le=2**63 - 1)]
Timestamp = Annotated[datetime, AfterValidator(_utc)]
WorkKey = Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{64}$", examples=["0x" + "ab" * 32])]


class PageQuery(BaseModel):
    """Paging and format, shared by every list."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    limit: int = Field(100, ge=1, le=1000)
    """Rows per page."""
    cursor: str | None = Field(None, max_length=MAX_CURSOR_CHARS)
    """`next_cursor` of the previous page (CSV: its X-Next-Cursor header); omit for the first page."""
    format: Literal["json", "csv"] = "json"
    """json (default) or csv (a header row, then one line per item)."""

    def filters(self) -> dict[str, Any]:
        """The filter values of this query by name (None: not filtered)."""
        return self.model_dump(exclude={"limit", "cursor", "format"})


class NodeQuery(PageQuery):
    provider: Address | None = None
    """Only this provider's nodes."""
    active: bool | None = None
    """Only nodes still registered (true) or removed (false)."""


class PoolQuery(PageQuery):
    status: PoolStatus | None = None
    """Only pools in this status."""
    creator: Address | None = None
    """Only pools created by this account."""
    manager: Address | None = None
    """Only pools managed by this key."""


class MembershipQuery(PageQuery):
    pool_id: PoolId | None = None
    """Only this pool's members."""
    node: Address | None = None
    """Only this node's memberships."""
    provider: Address | None = None
    """Only memberships of this provider's nodes."""
    state: MemberState | None = None
    """Only memberships in this state."""


class SubmissionQuery(PageQuery):
    pool_id: PoolId | None = None
    """Only this pool's submissions."""
    provider: Address | None = None
    """Only submissions of this provider's nodes."""
    node: Address | None = None
    """Only this node's submissions."""
    status: SubmissionStatus | None = None
    """Only submissions in this status."""
    since: Timestamp | None = None
    """Submitted at or after this time (ISO 8601 or Unix seconds; UTC if no zone)."""
    until: Timestamp | None = None
    """Submitted before this time (exclusive)."""

    @model_validator(mode="after")
    def _ordered_range(self) -> SubmissionQuery:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError("since must be before until")
        return self


class VerdictQuery(PageQuery):
    pool_id: PoolId | None = None
    """Only verdicts on this pool's submissions."""
    validator: Address | None = None
    """Only this validator's verdicts."""
    verdict: VerdictKind | None = None
    """Only accepted or only invalid verdicts."""


class SlashQuery(PageQuery):
    pool_id: PoolId | None = None
    """Only slashes in this pool."""
    provider: Address | None = None
    """Only slashes of this provider."""
    validator: Address | None = None
    """Only slashes reported by this validator."""


class RewardQuery(PageQuery):
    account: Address | None = None
    """Only this account's credits and withdrawals."""
    pool_id: PoolId | None = None
    """Only credits from this pool (withdrawals have no pool)."""
    kind: RewardKind | None = None
    """Only this kind of entry."""


class ValidatorQuery(PageQuery):
    active: bool | None = None
    """Only validators holding (true) or having lost (false) the role."""


class CheckpointQuery(PageQuery):
    pool_id: PoolId | None = None
    """Only this pool's checkpoints."""


class LedgerPage(BaseModel, Generic[Row]):
    """One page of a list. Follow `next_cursor` until it is null to read everything exactly once."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    items: list[Row]
    """The rows, in ledger order."""
    next_cursor: str | None
    """Pass as `cursor` for the next page; null on the last page."""
