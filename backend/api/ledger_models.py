"""Query and response models of the public ledger API, one query model per listing, generated from
its declaration (`proofpool.core.ledger_listings`).

Queries forbid unknown parameters, so an auditor's typo (`?pool=3`) is a 422, not a silently
unfiltered list. Addresses are accepted in any case and compared checksummed, as stored; hashes
(work keys, transactions, files) must be 0x and 64 hex digits, in any case.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from eth_utils import is_checksum_address, is_hex_address, to_checksum_address
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from proofpool.core.ledger_listings import (
    DEFAULT_PAGE_ROWS,
    LISTINGS,
    MAX_CURSOR_CHARS,
    MAX_PAGE_ROWS,
    PAGING_PARAMETERS,
    Filter,
    Kind,
    Listing,
    Match,
    Order,
)

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
Bigint = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""A non-negative PostgreSQL BIGINT: a larger value could only fail in the database."""
Timestamp = Annotated[datetime, AfterValidator(_utc)]
Hash32 = Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{64}$", examples=["0x" + "ab" * 32])]
"""32 bytes as 0x-hex in any case: a work key, a file's sha256, a transaction hash."""
WorkKey = Hash32

_FILTER_TYPES: dict[Kind, Any] = {
    Kind.ADDRESS: Address,
    Kind.INT: Bigint,
    Kind.BOOL: bool,
    Kind.TIMESTAMP: Timestamp,
    Kind.HASH: Hash32,
    Kind.FILES: Hash32,  # a file's key (Match.HOLDS)
}
"""The parameter type of a filter on each kind of column (every kind in `ledger_listings.FILTERABLE`)."""


class PageQuery(BaseModel):
    """Paging and format, shared by every list."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    limit: int = Field(DEFAULT_PAGE_ROWS, ge=1, le=MAX_PAGE_ROWS)
    """Rows per page."""
    cursor: str | None = Field(None, max_length=MAX_CURSOR_CHARS)
    """`next_cursor` of the previous page (CSV: its X-Next-Cursor header); omit for the first page."""
    format: Literal["json", "csv"] = "json"
    """json (default) or csv (a header row, then one line per item)."""
    order: Order = Order.ASC
    """asc (default): in the list's order, oldest first; desc: the same order backwards, newest
    first. A cursor continues only the order it was issued in."""

    def filters(self) -> dict[str, Any]:
        """The filter values of this query by name (None: not filtered)."""
        return self.model_dump(exclude=PAGING_PARAMETERS)


def _filter_field(listing: Listing, filter_: Filter) -> tuple[Any, Any]:
    column = listing.filter_column(filter_)
    value: Any = Literal[column.values] if column.kind is Kind.ENUM else _FILTER_TYPES[column.kind]
    return value | None, Field(None, description=filter_.doc)


def _ordered_window(start: str, end: str) -> Any:
    """A model validator refusing a time window that ends before it starts."""

    def check(query: PageQuery) -> PageQuery:
        low, high = getattr(query, start), getattr(query, end)
        if low is not None and high is not None and low >= high:
            raise ValueError(f"{start} must be before {end}")
        return query

    return model_validator(mode="after")(check)


def _query_model(listing: Listing) -> type[PageQuery]:
    """`<Item>Query`: the paging fields and one optional field per filter of `listing`."""
    fields = {filter_.name: _filter_field(listing, filter_) for filter_ in listing.filters}
    validators = {
        f"_{start.name}_before_{end.name}": _ordered_window(start.name, end.name)
        for start in listing.filters
        for end in listing.filters
        if (start.match, end.match) == (Match.AT_OR_AFTER, Match.BEFORE)
        and listing.filter_column(start) == listing.filter_column(end)
    }
    return create_model(f"{listing.type_name}Query", __base__=PageQuery, __validators__=validators, **fields)


QUERIES: dict[str, type[PageQuery]] = {name: _query_model(listing) for name, listing in LISTINGS.items()}
"""The query model of each listing, by name."""


class LedgerPage(BaseModel, Generic[Row]):
    """One page of a list. Follow `next_cursor` until it is null to read everything exactly once."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    items: list[Row]
    """The rows, in ledger order."""
    next_cursor: str | None
    """Pass as `cursor` for the next page; null on the last page."""
