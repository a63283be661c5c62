"""`/search?q=`: an address goes to the provider, node or validator page it is, a pool id to the
pool, a work key to its submission (asked of each pool); one match redirects to it, several are
listed, none is a 404 page saying what was looked for. Transactions and the files inside a bundle
cannot be searched: the ledger API has no filter on them."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from proofpool.explorer import links
from proofpool.explorer.deps import Ledger
from proofpool.explorer.ledger import ExplorerLedger
from proofpool.explorer.params import is_address, is_pool_id, is_work_key, parse_address, parse_work_key
from proofpool.explorer.render import html, root_path

router = APIRouter()

MAX_QUERY_CHARS = 200
Match = tuple[str, str]
"""(what it is, its page)."""

ACCOUNT_LISTS = (("providers", "provider", links.provider), ("nodes", "node", links.node),
                 ("validators", "validator", links.validator))  # fmt: skip


async def account_matches(ledger: ExplorerLedger, address: str) -> list[Match]:
    rows = await asyncio.gather(*(ledger.find(listing, "address", address) for listing, _, _ in ACCOUNT_LISTS))
    return [(what, page(address)) for (_, what, page), row in zip(ACCOUNT_LISTS, rows, strict=True) if row]


async def work_key_matches(ledger: ExplorerLedger, work_key: str) -> list[Match]:
    pools = await ledger.rows("pools", {})
    found = await asyncio.gather(*(ledger.submission(pool["pool_id"], work_key) for pool in pools))
    return [
        (f"submission in pool {pool['pool_id']}", links.submission(pool["pool_id"], work_key))
        for pool, detail in zip(pools, found, strict=True)
        if detail is not None
    ]


async def matches_of(ledger: ExplorerLedger, text: str) -> tuple[list[Match], str]:
    """What `text` names in the ledger, and what was looked for (for the not-found message)."""
    if is_address(text):
        address = parse_address(text)
        return await account_matches(ledger, address), f"no provider, node or validator has the address {address}"
    if is_pool_id(text):
        pool = await ledger.find("pools", "pool_id", int(text))
        return ([("pool", links.pool(int(text)))] if pool else []), f"the ledger has no pool {int(text)}"
    if is_work_key(text):
        key = parse_work_key(text)
        return await work_key_matches(ledger, key), (
            f"no pool has a submission with the work key {key} (a transaction hash, or the sha256 of a file "
            "inside a bundle, cannot be searched yet)"
        )
    return [], (
        f"{text[:MAX_QUERY_CHARS]!r} is not an address (0x and 40 hex digits), a pool id or a work key "
        "(0x and 64 hex digits)"
    )


@router.get("/search", name="search")
async def search(request: Request, ledger: Ledger, q: str = "") -> Response:
    text = q.strip()
    context = {"title": "Search", "slug": "search", "q": text, "matches": [], "message": None}
    if not text:
        return html(request, "search.html", context)
    matches, missing = await matches_of(ledger, text)
    if len(matches) == 1:
        return RedirectResponse(root_path(request) + matches[0][1], status_code=303)
    if not matches:
        return html(request, "search.html", {**context, "title": "Not found", "message": missing}, status=404)
    return html(request, "search.html", {**context, "matches": matches})
