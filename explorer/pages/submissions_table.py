"""The submissions table of a provider's and a node's page: a page of `/v1/ledger/submissions` with,
for each invalid one, the reason code of its invalid verdict."""

from __future__ import annotations

import asyncio

from proofpool.explorer import columns
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.render import TableSource
from proofpool.explorer.tables import PAGE_ROWS, Table


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

    async def source(cursor: str | None) -> Table:
        page = await ledger.page("submissions", filters, cursor=cursor, limit=PAGE_ROWS)
        return Table(
            "submissions",
            caption,
            columns.SUBMISSIONS_WITH_REASON,
            await with_reasons(ledger, page.items),
            page.next_cursor,
            empty="No submission yet.",
            notes=("Reason: the validator's reason code on an invalid verdict.",),
        )

    return source
