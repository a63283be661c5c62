"""`/`: the market, every pool with its terms, its statistics, its latest checkpoint and members:
one page of `/v1/ledger/market`, whose rows hold all of it (one request per page, whatever the
number of pools)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.pages.sources import listing_source
from proofpool.explorer.render import render_page

router = APIRouter()

MARKET_STATS = columns.MARKET_STATS
"""The pool_stats columns the market shows for each pool (`columns.MARKET_STATS`)."""


@router.get("/", name="market")
async def market(request: Request, ledger: Ledger) -> Response:
    pools = listing_source(
        ledger, "market", {}, "pools", "Pools", columns.MARKET,
        empty="No pool has been created yet.",
        notes=(
            "Accepted counts work in its dispute window, finalized the work paid after it. "
            "A dash: the ledger has no such figure yet (no submission, no checkpoint).",
        ),
    )  # fmt: skip
    return await render_page(request, "market.html", {"title": "Market", "slug": "market"}, {"pools": pools})
