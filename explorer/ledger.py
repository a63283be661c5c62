"""The explorer's client of the public ledger API (`/v1/ledger/...`, docs/ledger.md), async.

It mirrors the conventions of the sync client (`proofpool.infra.http.ledger_client`): an
unreachable backend, a timeout or an answer that is not JSON is `ServiceUnavailable` naming where
it looked; a 4xx/5xx answer is `LedgerRefused` carrying the API's status and error code. It talks
to a backend at a base URL, or through any httpx transport: `httpx.ASGITransport(app=backend_app)`
serves the ledger in-process when the backend mounts the explorer.

The API pages every list forward in its key order, from a cursor. Two questions the explorer asks
need more than one page:

- `find`: the row of one key (a pool, a provider's address) in a list that may have no filter on
  its key. One request when the list declares such a filter, else a walk in the largest pages
  until the row is met.
- `latest`: the last rows of a list ("latest verdicts", the live feed). The API serves no
  descending order, so the first call walks the list to its end; the client remembers where the
  last two pages began (per list and filters, a bounded table on this instance), so later calls
  read only the end of the list.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from proofpool.core.errors import ServiceUnavailable
from proofpool.core.ledger_listings import LISTINGS, MAX_PAGE_ROWS, Kind
from proofpool.infra.http.ledger_client import LedgerRefused

Row = dict[str, Any]

IN_PROCESS_URL = "http://backend"
"""The base URL requests carry when a transport serves them (an ASGI transport ignores the host)."""
MAX_CONCURRENT_REQUESTS = 8
"""Requests in flight at once: a page asks several lists at once, and the backend's database pool
is small."""
REMEMBERED_TAILS = 512
"""(list, filters) pairs whose last page starts `latest` remembers; the oldest is forgotten first."""


@dataclass(frozen=True)
class Page:
    """One page of a list, as the API served it."""

    items: list[Row]
    next_cursor: str | None
    """Cursor of the next page; None on the last page."""


def _query(filters: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters as the API reads them: None means unfiltered, booleans are true/false."""
    return {
        name: ("true" if value else "false") if isinstance(value, bool) else value
        for name, value in filters.items()
        if value is not None
    }


class ExplorerLedger:
    """Pages, lookups and tails of the ledger API at `base_url` (or through `transport`)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        if base_url is None and transport is None:
            raise ValueError("ExplorerLedger needs the backend's base URL or a transport to it")
        self.base_url = (base_url or IN_PROCESS_URL).rstrip("/")
        self.where = self.base_url if transport is None else f"{self.base_url} (in-process)"
        """Where the ledger is read from, as error pages name it."""
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout)
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_REQUESTS)
        self._tails: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], list[str | None]] = OrderedDict()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, params: Mapping[str, Any]) -> Any:
        """The JSON answer of GET /v1/ledger/<path>; errors as the module docstring says."""
        async with self._slots:
            try:
                reply = await self._http.get(f"/v1/ledger/{path}", params=_query(params))
            except httpx.TransportError as exc:
                raise ServiceUnavailable(
                    f"the ledger API is not reachable at {self.where} ({exc.__class__.__name__}); "
                    "is the backend running?"
                ) from exc
        if reply.status_code >= 400:
            try:
                body = reply.json()
                error, detail = body.get("error", "error"), body.get("detail")
            except (ValueError, AttributeError):
                error, detail = "error", reply.text[:200]
            raise LedgerRefused(reply.status_code, error, detail)
        try:
            return reply.json()
        except ValueError:
            raise ServiceUnavailable(
                f"{self.where} answered /v1/ledger/{path} with something that is not JSON; is it a proofpool backend?"
            ) from None

    async def page(self, listing: str, filters: Mapping[str, Any], *, cursor: str | None = None, limit: int) -> Page:
        """One page of `listing` matching `filters`, after `cursor`."""
        body = await self.get(listing, {**filters, "cursor": cursor, "limit": limit})
        return Page(items=body["items"], next_cursor=body["next_cursor"])

    async def one(self, listing: str, filters: Mapping[str, Any]) -> Row | None:
        """The first row of `listing` matching `filters` (its key's filters: the row), or None."""
        page = await self.page(listing, filters, limit=1)
        return page.items[0] if page.items else None

    async def rows(self, listing: str, filters: Mapping[str, Any]) -> list[Row]:
        """Every row of `listing` matching `filters`, following cursors in the largest pages. For
        lists a page needs whole (a pool's members, a pool's contributors to rank)."""
        rows: list[Row] = []
        cursor: str | None = None
        while True:
            page = await self.page(listing, filters, cursor=cursor, limit=MAX_PAGE_ROWS)
            rows += page.items
            if page.next_cursor is None:
                return rows
            cursor = page.next_cursor

    async def find(self, listing: str, column: str, value: Any) -> Row | None:
        """The row of `listing` whose `column` is `value` (its key), or None. `value` must be in the
        API's form (a checksummed address, an int)."""
        declared = LISTINGS.get(listing)
        if declared is not None and any(f.name == column and f.column in (None, column) for f in declared.filters):
            return await self.one(listing, {column: value})
        # Only an integer key is walked in an order Python shares with the database (text keys
        # sort in the database's collation), so only there may the walk stop once past `value`.
        ordered = declared is not None and declared.key == (column,) and declared.column(column).kind is Kind.INT
        cursor: str | None = None
        while True:
            page = await self.page(listing, {}, cursor=cursor, limit=MAX_PAGE_ROWS)
            for row in page.items:
                if row[column] == value:
                    return row
            if page.next_cursor is None or (ordered and page.items and page.items[-1][column] > value):
                return None
            cursor = page.next_cursor

    async def submission(self, pool_id: int, work_key: str) -> Row | None:
        """One submission with its verdicts, slashes and credits (`/submissions/{pool}/{key}`), or
        None when the pool has no such submission."""
        try:
            return await self.get(f"submissions/{pool_id}/{work_key}", {})
        except LedgerRefused as exc:
            if exc.status == 404 and exc.error == "submission_not_found":
                return None
            raise

    async def latest(self, listing: str, filters: Mapping[str, Any], count: int) -> list[Row]:
        """The last `count` rows of `listing` matching `filters`, in ledger order (oldest first).

        Reads from where the last page began on the previous call (the whole list on the first),
        and from where the page before it began when the last page holds fewer than `count` rows."""
        if not 1 <= count <= MAX_PAGE_ROWS:
            raise ValueError(f"count must be 1..{MAX_PAGE_ROWS}, got {count}")
        key = (listing, tuple(sorted((name, str(value)) for name, value in _query(filters).items())))
        starts = self._tails.get(key, [None])
        rows, walked = await self._walk_to_end(listing, filters, starts[-1])
        if len(rows) < count and len(starts) > 1:
            rows, walked = await self._walk_to_end(listing, filters, starts[0])
        elif len(starts) > 1 and len(walked) == 1:
            walked = [starts[0], *walked]  # still on the same last page: keep the page before it
        self._tails[key] = walked[-2:]
        self._tails.move_to_end(key)
        while len(self._tails) > REMEMBERED_TAILS:
            self._tails.popitem(last=False)
        return list(rows)[-count:]

    async def _walk_to_end(
        self, listing: str, filters: Mapping[str, Any], cursor: str | None
    ) -> tuple[deque[Row], list[str | None]]:
        """The rows from `cursor` to the end of the list (at most two pages' worth are kept) and the
        cursor each page read began at."""
        rows: deque[Row] = deque(maxlen=2 * MAX_PAGE_ROWS)
        starts = [cursor]
        while True:
            page = await self.page(listing, filters, cursor=cursor, limit=MAX_PAGE_ROWS)
            rows.extend(page.items)
            if page.next_cursor is None:
                return rows, starts
            cursor = page.next_cursor
            starts.append(cursor)
