"""`/nodes/{address}`: a node's registration and provider, its pool memberships, its contributions
per pool and its submissions."""

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


@router.get("/nodes/{address}", name="node")
async def node_page(request: Request, address: str, ledger: Ledger) -> Response:
    node = parse_address(address)
    row = await ledger.find("nodes", "address", node)
    if row is None:
        raise NotFound(f"the ledger has no node {node}")

    async def registration(_: str | None) -> Table:
        return Table("node", "Registration", columns.NODE, [row], record=True)

    async def memberships(cursor: str | None) -> Table:
        page = await ledger.page("memberships", {"node": node}, cursor=cursor, limit=PAGE_ROWS)
        return Table(
            "memberships", "Pool memberships", columns.MEMBERSHIPS, page.items, page.next_cursor,
            empty="Never joined a pool.",
        )  # fmt: skip

    async def contributions(cursor: str | None) -> Table:
        page = await ledger.page("contributors", {"node": node}, cursor=cursor, limit=PAGE_ROWS)
        return Table(
            "contributions", "Contributions per pool", columns.NODE_CONTRIBUTIONS, page.items, page.next_cursor,
            empty="No work submitted yet.",
        )  # fmt: skip

    sources = {
        "node": registration,
        "memberships": memberships,
        "contributions": contributions,
        "submissions": submissions_source(ledger, {"node": node}, "Submissions, oldest first"),
    }
    context = {"title": f"Node {node}", "slug": f"node-{node}", "address": node}
    return await render_page(request, "node.html", context, sources)
