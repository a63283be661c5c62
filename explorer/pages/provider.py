"""`/providers/{address}`: a provider's stake, nodes, submissions (with the reason of an invalid
verdict), slashes and rewards, each table a page of its ledger list with a CSV download."""

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


@router.get("/providers/{address}", name="provider")
async def provider_page(request: Request, address: str, ledger: Ledger) -> Response:
    provider = parse_address(address)
    row = await ledger.find("providers", "address", provider)
    if row is None:
        raise NotFound(f"the ledger has no provider {provider}")

    mine = {"provider": provider}
    sources = {
        "stake": record_source("stake", "Stake", columns.STAKE, row),
        "nodes": listing_source(ledger, "nodes", mine, "nodes", "Nodes", columns.NODES, empty="No node registered."),
        "submissions": submissions_source(ledger, mine, "Submissions of its nodes, oldest first"),
        "slashes": listing_source(
            ledger, "slashes", mine, "slashes", "Slashes", columns.SLASHES, empty="Never slashed."
        ),
        "rewards": listing_source(
            ledger, "rewards", {"account": provider}, "rewards", "Rewards and withdrawals", columns.REWARDS,
            empty="No reward credited yet.",
        ),
    }  # fmt: skip
    context = {"title": f"Provider {provider}", "slug": f"provider-{provider}", "address": provider}
    return await render_page(request, "provider.html", context, sources)
