"""The public contribution ledger, read side: keyset pages over the chain projections.

The listings are declared in `proofpool.core.ledger_listings`; this module derives from each its
SELECT, its filter predicates and its row type, once, at import. Identifiers in the SQL come only
from that table, values only as parameters.

Every list is ordered by a unique, indexed key and continued from an opaque cursor naming the
last row served (`WHERE key > cursor ORDER BY key LIMIT n`), never by OFFSET, so page 10,000 of
a million submissions costs what page 1 costs. Newest first (`Order.DESC`) walks the same key
backwards (`WHERE key < cursor ORDER BY key DESC`): PostgreSQL reads the same indexes backwards.
A cursor carries its direction, so it resumes only the walk it came from.

This module is the only place where database types become API types: BYTEA -> 0x-hex,
NUMERIC(78,0) -> decimal string and a bundle's file arrays -> a JSON list happen in SQL here; a
hash a filter or a lookup names (a work key, a transaction, a file) goes hex -> bytes here.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, make_dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Generic, Literal, TypeVar

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import class_row
from psycopg.types.datetime import TimestamptzLoader
from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from proofpool.core.ledger_listings import (
    LISTINGS,
    MAX_CURSOR_CHARS,
    REWARDS,
    SLASHES,
    SUBMISSIONS,
    VERDICTS,
    Column,
    Filter,
    Kind,
    Listing,
    Match,
    Order,
)

_INT64_MAX = 2**63 - 1

Row = TypeVar("Row")


@dataclass(frozen=True)
class Page(Generic[Row]):
    """One page of a list, and the cursor of the next (None: this was the last page)."""

    items: list[Row]
    next_cursor: str | None


class InvalidCursor(ValueError):
    """A cursor this listing did not issue (malformed, tampered, or from another listing)."""


@dataclass(frozen=True)
class _Sql:
    """How PostgreSQL serves one listing."""

    select: str
    """SELECT ... FROM ... without WHERE/ORDER BY; column aliases equal the row's fields."""
    predicates: Mapping[str, str]
    """Filter name -> SQL predicate using the parameter of the same name."""
    row: type
    """The row type (psycopg builds it by field name, pydantic serializes and documents it)."""


class BundleFile(TypedDict):
    """One rollout file of a bundled submission."""

    work_key: Annotated[str, Field(description="sha256 of the rollout file (0x-hex): where the file is stored.")]
    work_units: Annotated[int, Field(description="Work units of this file.")]


_PYTHON_TYPES: dict[Kind, Any] = {
    Kind.ADDRESS: str,
    Kind.AMOUNT: str,
    Kind.UINT256: str,
    Kind.INT: int,
    Kind.FLOAT: float,
    Kind.BOOL: bool,
    Kind.TEXT: str,
    Kind.TIMESTAMP: datetime,
    Kind.HASH: str,
    Kind.FILES: list[BundleFile],
}


def _field_type(column: Column) -> Any:
    """The Python type of a column's values as this module returns them, with its API description."""
    base: Any = Literal[column.values] if column.kind is Kind.ENUM else _PYTHON_TYPES[column.kind]
    return Annotated[base | None if column.nullable else base, Field(description=column.doc)]


# A bundle's files as JSON in bundle order: the keys hex-encoded in order, then zipped with their
# units by one unnest, whose rows json_agg takes as one function scan returns them (in array order).
# NULL arrays (a single-file submission) unnest to no rows, and json_agg of no rows is NULL.
_FILES_SQL = """(SELECT json_agg(bundle_file) FROM unnest(
            ARRAY(SELECT '0x' || encode(f.key, 'hex') FROM unnest(file_keys) WITH ORDINALITY AS f(key, position)
                  ORDER BY f.position), file_units) AS bundle_file(work_key, work_units))"""


def _selected(column: Column) -> str:
    """The column's select expression, converted to its API form and aliased to its name."""
    if column.kind is Kind.FILES:
        return f"{_FILES_SQL} AS {column.name}"
    if column.kind is Kind.HASH:
        return f"'0x' || encode({column.name}, 'hex') AS {column.name}"  # NULL stays NULL
    if column.kind in (Kind.AMOUNT, Kind.UINT256):
        return f"{column.name}::text AS {column.name}"  # NUMERIC(78,0) is exact only as text
    return column.name


def _predicate(listing: Listing, filter_: Filter) -> str:
    """The filter's WHERE predicate; its value is the query parameter of the filter's name."""
    column, value = listing.filter_column(filter_).name, f"%({filter_.name})s"
    if filter_.match is Match.EQUAL:
        return f"{column} = {value}"
    if filter_.match is Match.HOLDS:
        # Two indexed lookups the planner ORs (migration 0013): the work key in any pool, and the
        # GIN index of the bundles' file keys. `@>` rather than `= ANY`: only it uses the GIN index.
        return f"(work_key = {value} OR file_keys @> ARRAY[{value}::bytea])"
    # Block time never decreases along the chain, so a time window is exactly a block range: its
    # ends come from the covering time index in O(log n) and the page walks a position index
    # (a plain time predicate would lure the planner into sorting the whole window).
    if filter_.match is Match.AT_OR_AFTER:
        return f"""block_number >= COALESCE((SELECT f.block_number FROM {listing.name} f
            WHERE f.{column} >= {value} ORDER BY f.{column}, f.block_number LIMIT 1), {_INT64_MAX})"""
    return f"""block_number <= COALESCE((SELECT l.block_number FROM {listing.name} l
            WHERE l.{column} < {value} ORDER BY l.{column} DESC, l.block_number DESC LIMIT 1), -1)"""


def _sql(listing: Listing) -> _Sql:
    """Everything PostgreSQL needs of `listing`, built once at import: a bad declaration fails there."""
    row = make_dataclass(
        f"{listing.type_name}Row",
        [(column.name, _field_type(column)) for column in listing.columns],
        frozen=True,
        slots=True,
        namespace={"__module__": __name__},
    )
    return _Sql(
        select=f"SELECT {', '.join(_selected(c) for c in listing.columns)} FROM {listing.name}",
        predicates={filter_.name: _predicate(listing, filter_) for filter_ in listing.filters},
        row=row,
    )


_SQL: dict[Listing, _Sql] = {listing: _sql(listing) for listing in LISTINGS.values()}


def row_type(listing: Listing) -> type:
    """The type of `listing`'s rows: a frozen dataclass named `<Item>Row` with one field per column."""
    return _SQL[listing].row


SubmissionRow = row_type(SUBMISSIONS)
VerdictRow = row_type(VERDICTS)
SlashRow = row_type(SLASHES)
RewardRow = row_type(REWARDS)


@with_config(ConfigDict(use_attribute_docstrings=True))
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


class _UtcTimestamptzLoader(TimestamptzLoader):
    """Times in UTC whatever the server's TimeZone, so the same row always prints the same."""

    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


def _rows(conn: AsyncConnection, row: type[Row]) -> AsyncCursor[Row]:
    """A cursor making `row` rows with UTC times."""
    cur = conn.cursor(row_factory=class_row(row))
    cur.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
    return cur


def encode_cursor(listing: Listing, key: tuple[int | str, ...], order: Order = Order.ASC) -> str:
    """An opaque cursor for `listing` that resumes after the row whose sort key is `key`, walking
    in `order`: `[name, order, *key]` as base64url JSON."""
    raw = json.dumps([listing.name, order.value, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(listing: Listing, cursor: str, order: Order = Order.ASC) -> tuple[int | str, ...]:
    """The sort key a cursor of `listing` in `order` carries; `InvalidCursor` for anything else,
    a cursor of the other direction included (it would resume a walk it does not belong to)."""
    if not cursor or len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursor(f"cursor must be 1..{MAX_CURSOR_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not one this API issued") from exc
    if not isinstance(data, list) or len(data) != len(listing.key) + 2 or data[0] != listing.name:
        raise InvalidCursor(f"cursor is not a {listing.name} cursor")
    if data[1] != order.value:
        if data[1] in {other.value for other in Order}:
            raise InvalidCursor(f"cursor continues a walk with order={data[1]}, not order={order.value}")
        raise InvalidCursor("cursor is not one this API issued")
    key = tuple(data[2:])
    for value, name in zip(key, listing.key, strict=True):
        if listing.column(name).kind is Kind.INT:
            if not (type(value) is int and 0 <= value <= _INT64_MAX):
                raise InvalidCursor("cursor holds an out-of-range position")
        elif not (isinstance(value, str) and len(value) <= 128 and "\x00" not in value):
            raise InvalidCursor("cursor holds a malformed key")
    return key


@cache
def page_sql(listing: Listing, filter_names: frozenset[str], resume: bool, order: Order = Order.ASC) -> str:
    """The page query for one combination of filters, composed only from the listing's declaration:
    `WHERE filters AND key > cursor ORDER BY key LIMIT n`, which walks an index in key order; newest
    first, `key < cursor ORDER BY key DESC` walks it backwards (every key column descending, so one
    index serves both directions)."""
    predicates = [_SQL[listing].predicates[name] for name in sorted(filter_names)]
    key = ", ".join(listing.key)
    descending = order is Order.DESC
    if resume:
        marks = ", ".join(f"%(after_{i})s" for i in range(len(listing.key)))
        predicates.append(f"({key}) {'<' if descending else '>'} ({marks})")
    where = f" WHERE {' AND '.join(predicates)}" if predicates else ""
    ordered = ", ".join(f"{name} DESC" for name in listing.key) if descending else key
    return f"{_SQL[listing].select}{where} ORDER BY {ordered} LIMIT %(limit)s"


def _hash_bytes(hex_value: str) -> bytes:
    """0x-hex (checked by the caller: `ledger_models`) as the BYTEA PostgreSQL stores."""
    return bytes.fromhex(hex_value.removeprefix("0x"))


def _bound(listing: Listing, filters: Mapping[str, Any]) -> dict[str, Any]:
    """The filter values as PostgreSQL compares them: a hash (or a file's key) hex -> bytes."""
    by_name = {filter_.name: filter_ for filter_ in listing.filters}
    unknown = set(filters) - set(by_name)
    if unknown:
        raise ValueError(f"{listing.name} has no filter {sorted(unknown)}")
    return {
        name: _hash_bytes(value) if listing.filter_column(by_name[name]).kind in (Kind.HASH, Kind.FILES) else value
        for name, value in filters.items()
    }


async def fetch_page(
    conn: AsyncConnection,
    listing: Listing,
    *,
    filters: Mapping[str, Any],
    cursor: str | None,
    limit: int,
    order: Order = Order.ASC,
) -> Page[Any]:
    """One page of `listing`: rows matching every non-None filter, after `cursor`, in key order
    (`Order.DESC`: backwards). Hash filters are 0x-hex, checked by the caller."""
    given = _bound(listing, {name: value for name, value in filters.items() if value is not None})
    params: dict[str, Any] = {**given, "limit": limit + 1}
    if cursor is not None:
        params.update({f"after_{i}": value for i, value in enumerate(decode_cursor(listing, cursor, order))})
    query = page_sql(listing, frozenset(given), cursor is not None, order)
    async with _rows(conn, row_type(listing)) as cur:
        await cur.execute(query, params)
        rows = await cur.fetchall()
    if len(rows) <= limit:
        return Page(items=rows, next_cursor=None)
    rows = rows[:limit]
    last = tuple(getattr(rows[-1], column) for column in listing.key)
    return Page(items=rows, next_cursor=encode_cursor(listing, last, order))


async def _of_work(conn: AsyncConnection, listing: Listing, params: Mapping[str, Any]) -> list[Any]:
    """The rows of `listing` about one submission, in key order."""
    query = f"{_SQL[listing].select} WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s"
    async with _rows(conn, row_type(listing)) as cur:
        return await (await cur.execute(f"{query} ORDER BY {', '.join(listing.key)}", params)).fetchall()


async def fetch_submission(conn: AsyncConnection, pool_id: int, work_key: str) -> SubmissionDetail | None:
    """One submission with its verdicts, slash and credits; None when the chain never saw it.

    `work_key` is 0x-hex (64 digits); the caller has checked its form.
    """
    params = {"pool_id": pool_id, "work_key": _hash_bytes(work_key)}
    found = await _of_work(conn, SUBMISSIONS, params)
    if not found:
        return None
    return SubmissionDetail(
        submission=found[0],
        verdicts=await _of_work(conn, VERDICTS, params),
        slashes=await _of_work(conn, SLASHES, params),
        rewards=await _of_work(conn, REWARDS, params),
    )
