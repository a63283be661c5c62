"""The table sources the pages are made of (`proofpool.explorer.render.TableSource`): one page of a
ledger list (`listing_source`), one row shown as a record (`record_source`), and the submissions
table of a provider's and a node's page, each invalid one with its reason (`submissions_source`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proofpool.explorer import columns
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.render import TableSource
from proofpool.explorer.tables import PAGE_ROWS, Col, Table


def listing_source(
    ledger: ExplorerLedger,
    listing: str,
    filters: Mapping[str, Any],
    name: str,
    caption: str,
    shown: tuple[Col, ...],
    *,
    enrich: Callable[[list[Row]], Awaitable[list[Row]]] | None = None,
    **table: Any,
) -> TableSource:
    """The table `name` of one page of `/v1/ledger/<listing>` matching `filters`, from the API's
    cursor; `enrich` adds fields to the page's rows; `table`: the rest of `Table` (empty, notes, ...)."""

    async def source(cursor: str | None) -> Table:
        page = await ledger.page(listing, dict(filters), cursor=cursor, limit=PAGE_ROWS)
        rows = page.items if enrich is None else await enrich(page.items)
        return Table(name, caption, shown, rows, page.next_cursor, **table)

    return source


def record_source(name: str, caption: str, shown: tuple[Col, ...], row: Row | None, **table: Any) -> TableSource:
    """The one row `row` (None: none, the table's `empty` says why) as a list of label and value."""

    async def source(_: str | None) -> Table:
        return Table(name, caption, shown, [] if row is None else [row], record=True, **table)

    return source


async def with_reasons(ledger: ExplorerLedger, submissions: list[Row]) -> list[Row]:
    """The submissions, each with `reason`: the reason code of its invalid verdict (asked of the
    submission's own record, for the invalid ones only), else None."""
    invalid = [row for row in submissions if row["status"] == "invalid"]
    details = await asyncio.gather(*(ledger.submission(row["pool_id"], row["work_key"]) for row in invalid))
    reasons = {
        (row["pool_id"], row["work_key"]): next(
            (v["reason"] for v in (detail or {}).get("verdicts", []) if v["verdict"] == "invalid"), None
        )
        for row, detail in zip(invalid, details, strict=True)
    }
    return [{**row, "reason": reasons.get((row["pool_id"], row["work_key"]))} for row in submissions]


def submissions_source(ledger: ExplorerLedger, filters: dict[str, str], caption: str) -> TableSource:
    """A table source of the submissions matching `filters`, with reasons, in chain order."""

    async def reasons(rows: list[Row]) -> list[Row]:
        return await with_reasons(ledger, rows)

    return listing_source(
        ledger,
        "submissions",
        filters,
        "submissions",
        caption,
        columns.SUBMISSIONS_WITH_REASON,
        enrich=reasons,
        empty="No submission yet.",
        notes=("Reason: the validator's reason code on an invalid verdict.",),
    )
