"""`/nodes/{address}`: a node's registration and provider, its pool memberships, its contributions
per pool and its submissions."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.errors import NotFound
from proofpool.explorer.pages.sources import listing_source, record_source, submissions_source
from proofpool.explorer.params import parse_address
from proofpool.explorer.render import render_page

router = APIRouter()


@router.get("/nodes/{address}", name="node")
async def node_page(request: Request, address: str, ledger: Ledger) -> Response:
    node = parse_address(address)
    row = await ledger.find("nodes", "address", node)
    if row is None:
        raise NotFound(f"the ledger has no node {node}")

    mine = {"node": node}
    sources = {
        "node": record_source("node", "Registration", columns.NODE, row),
        "memberships": listing_source(
            ledger, "memberships", mine, "memberships", "Pool memberships", columns.MEMBERSHIPS,
            empty="Never joined a pool.",
        ),
        "contributions": listing_source(
            ledger, "contributors", mine, "contributions", "Contributions per pool", columns.NODE_CONTRIBUTIONS,
            empty="No work submitted yet.",
        ),
        "submissions": submissions_source(ledger, mine, "Submissions, oldest first"),
    }  # fmt: skip
    context = {"title": f"Node {node}", "slug": f"node-{node}", "address": node}
    return await render_page(request, "node.html", context, sources)
