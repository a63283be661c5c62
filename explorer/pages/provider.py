"""`/providers/{address}`: a provider's stake, nodes, submissions (with the reason of an invalid
verdict), slashes and rewards, each table a page of its ledger list with a CSV download."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.errors import NotFound
from proofpool.explorer.pages.submissions_table import submissions_source
from proofpool.explorer.params import parse_address
from proofpool.explorer.render import render_page
from proofpool.explorer.tables import PAGE_ROWS, Table

router = APIRouter()


@router.get("/providers/{address}", name="provider")
async def provider_page(request: Request, address: str, ledger: Ledger) -> Response:
    provider = parse_address(address)
    row = await ledger.find("providers", "address", provider)
    if row is None:
        raise NotFound(f"the ledger has no provider {provider}")

    async def stake(_: str | None) -> Table:
        return Table("stake", "Stake", columns.STAKE, [row], record=True)

    async def nodes(cursor: str | None) -> Table:
        page = await ledger.page("nodes", {"provider": provider}, cursor=cursor, limit=PAGE_ROWS)
        return Table("nodes", "Nodes", columns.NODES, page.items, page.next_cursor, empty="No node registered.")

    async def slashes(cursor: str | None) -> Table:
        page = await ledger.page("slashes", {"provider": provider}, cursor=cursor, limit=PAGE_ROWS)
        return Table("slashes", "Slashes", columns.SLASHES, page.items, page.next_cursor, empty="Never slashed.")

    async def rewards(cursor: str | None) -> Table:
        page = await ledger.page("rewards", {"account": provider}, cursor=cursor, limit=PAGE_ROWS)
        return Table(
            "rewards",
            "Rewards and withdrawals",
            columns.REWARDS,
            page.items,
            page.next_cursor,
            empty="No reward credited yet.",
        )

    sources = {
        "stake": stake,
        "nodes": nodes,
        "submissions": submissions_source(ledger, {"provider": provider}, "Submissions of its nodes, oldest first"),
        "slashes": slashes,
        "rewards": rewards,
    }
    context = {"title": f"Provider {provider}", "slug": f"provider-{provider}", "address": provider}
    return await render_page(request, "provider.html", context, sources)
