"""`/`: the market, every pool with its terms, its statistics, its latest checkpoint and members."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.render import render_page
from proofpool.explorer.tables import PAGE_ROWS, Table

router = APIRouter()

MARKET_STATS = columns.MARKET_STATS
"""The pool_stats columns the market shows for each pool (`columns.MARKET_STATS`)."""


async def market_row(ledger: ExplorerLedger, pool: Row) -> Row:
    """A pool's row of `/v1/ledger/pools`, with its pool_stats (none: no activity yet), the version
    of its latest checkpoint and the number of its active memberships (rows counted)."""
    pool_id = pool["pool_id"]
    stats, checkpoints, members = await asyncio.gather(
        ledger.one("pool_stats", {"pool_id": pool_id}),
        ledger.latest("checkpoints", {"pool_id": pool_id}, 1),
        ledger.rows("memberships", {"pool_id": pool_id, "state": "active"}),
    )
    return {
        **pool,
        "latest_checkpoint": checkpoints[-1]["version"] if checkpoints else None,
        "active_members": len(members),
        **{name: (stats or {}).get(name) for name in MARKET_STATS},
    }


@router.get("/", name="market")
async def market(request: Request, ledger: Ledger) -> Response:
    async def pools(cursor: str | None) -> Table:
        page = await ledger.page("pools", {}, cursor=cursor, limit=PAGE_ROWS)
        rows = await asyncio.gather(*(market_row(ledger, pool) for pool in page.items))
        return Table(
            "pools",
            "Pools",
            columns.MARKET,
            list(rows),
            page.next_cursor,
            empty="No pool has been created yet.",
            notes=(
                "Accepted counts work in its dispute window, finalized the work paid after it. "
                "A dash: the ledger has no such figure yet (no submission, no checkpoint).",
            ),
        )

    return await render_page(request, "market.html", {"title": "Market", "slug": "market"}, {"pools": pools})
