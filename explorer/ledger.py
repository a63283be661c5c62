"""The explorer's client of the public ledger API (`/v1/ledger/...`, docs/ledger.md), async.

It mirrors the conventions of the sync client (`proofpool.infra.http.ledger_client`): an
unreachable backend, a timeout or an answer that is not JSON is `ServiceUnavailable` naming where
it looked; a 4xx/5xx answer is `LedgerRefused` carrying the API's status and error code. It talks
to a backend at a base URL, or through any httpx transport: `httpx.ASGITransport(app=backend_app)`
serves the ledger in-process when the backend mounts the explorer.

Every question a page asks is one request: a page of a list in either direction (`page`, with a
cursor), one row by its key (`find`: the key filters of `proofpool.core.ledger_listings`), the
newest rows of a list (`latest`: one newest-first page), one submission with its story
(`submission`). Only `rows`, for the short lists a page needs whole (a pool's members or
contributors), follows cursors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from proofpool.core.errors import ServiceUnavailable
from proofpool.core.ledger_listings import LISTINGS, MAX_PAGE_ROWS, Match, Order
from proofpool.infra.http.ledger_client import LedgerRefused

Row = dict[str, Any]

IN_PROCESS_URL = "http://backend"
"""The base URL requests carry when a transport serves them (an ASGI transport ignores the host)."""
MAX_CONCURRENT_REQUESTS = 8
"""Requests in flight at once: a page asks several lists at once, and the backend's database pool
is small."""


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
    """Pages, lookups and newest rows of the ledger API at `base_url` (or through `transport`)."""

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

    async def page(
        self,
        listing: str,
        filters: Mapping[str, Any],
        *,
        cursor: str | None = None,
        limit: int,
        order: Order = Order.ASC,
    ) -> Page:
        """One page of `listing` matching `filters`, after `cursor`, in `order` (newest first: DESC;
        a cursor continues only the order it came from)."""
        direction = order.value if order is Order.DESC else None  # None: the API's default
        body = await self.get(listing, {**filters, "cursor": cursor, "limit": limit, "order": direction})
        return Page(items=body["items"], next_cursor=body["next_cursor"])

    async def one(self, listing: str, filters: Mapping[str, Any]) -> Row | None:
        """The first row of `listing` matching `filters` (its key's filters: the row), or None."""
        page = await self.page(listing, filters, limit=1)
        return page.items[0] if page.items else None

    async def rows(self, listing: str, filters: Mapping[str, Any]) -> list[Row]:
        """Every row of `listing` matching `filters`, following cursors in the largest pages. For
        lists a page needs whole (a pool's contributors, to rank them)."""
        rows: list[Row] = []
        cursor: str | None = None
        while True:
            page = await self.page(listing, filters, cursor=cursor, limit=MAX_PAGE_ROWS)
            rows += page.items
            if page.next_cursor is None:
                return rows
            cursor = page.next_cursor

    async def find(self, listing: str, column: str, value: Any) -> Row | None:
        """The row of `listing` whose key `column` is `value`, or None: one request through the
        list's filter on its key. `value` in the API's form (an address in any case, an int).

        ValueError when `column` is not the list's whole key with an equality filter on it (a
        question that could match many rows is `page`'s)."""
        declared = LISTINGS[listing]
        keyed = declared.key == (column,) and any(
            f.name == column and f.column in (None, column) and f.match is Match.EQUAL for f in declared.filters
        )
        if not keyed:
            raise ValueError(f"{listing} has no filter on its key {column}")
        return await self.one(listing, {column: value})

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
        """The newest `count` rows of `listing` matching `filters`, newest first: one page walked
        backwards (`order=desc`), whatever the list's length."""
        if not 1 <= count <= MAX_PAGE_ROWS:
            raise ValueError(f"count must be 1..{MAX_PAGE_ROWS}, got {count}")
        return (await self.page(listing, filters, limit=count, order=Order.DESC)).items
