"""`/validators/{address}`: a validator's role, verdict counts and earnings (validator_stats), its
verdicts page by page (latest first, or in chain order) and the pending work of the pools those
verdicts are in."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.errors import BadInput, NotFound
from proofpool.explorer.ledger import ExplorerLedger, Page
from proofpool.explorer.params import parse_address
from proofpool.explorer.render import cursor_of, query_href, render_page
from proofpool.explorer.tables import PAGE_ROWS, Table

from proofpool.core.ledger_listings import Order

router = APIRouter()

ORDERS = {"latest": Order.DESC, "chain": Order.ASC}
"""The verdict table's orders (`?verdicts_order=`): newest first (the default) or chain order."""


async def verdicts_page(ledger: ExplorerLedger, validator: str, order: str, cursor: str | None) -> Page:
    """One page of its verdicts from `cursor`, newest first (`latest`) or in chain order (`chain`)."""
    return await ledger.page("verdicts", {"validator": validator}, cursor=cursor, limit=PAGE_ROWS, order=ORDERS[order])


@router.get("/validators/{address}", name="validator")
async def validator_page(request: Request, address: str, ledger: Ledger) -> Response:
    validator = parse_address(address)
    order = request.query_params.get("verdicts_order", "latest")
    if order not in ORDERS:
        raise BadInput(f"verdicts_order must be one of {', '.join(ORDERS)}, not {order!r}")
    role, stats, verdicts = await asyncio.gather(
        ledger.find("validators", "address", validator),
        ledger.one("validator_stats", {"validator": validator}),
        verdicts_page(ledger, validator, order, cursor_of(request, "verdicts")),
    )
    if role is None and stats is None and not verdicts.items:
        raise NotFound(f"the ledger has no validator {validator}")
    judged = sorted({row["pool_id"] for row in verdicts.items})

    async def role_table(_: str | None) -> Table:
        return Table(
            "role", "Validator role", columns.VALIDATOR, [role] if role else [], record=True,
            empty="The ledger has no grant of the validator role to this address.",
        )  # fmt: skip

    async def earnings(_: str | None) -> Table:
        return Table(
            "stats", "Verdicts and earnings", columns.VALIDATOR_STATS, [stats] if stats else [], record=True,
            empty="No verdict or earning yet.",
        )  # fmt: skip

    async def verdict_table(_: str | None) -> Table:
        caption = "Latest verdicts, newest first" if order == "latest" else "Verdicts, oldest first"
        return Table(
            "verdicts", caption, columns.VERDICTS, verdicts.items, verdicts.next_cursor, empty="No verdict yet.",
        )  # fmt: skip

    async def pools(_: str | None) -> Table:
        stats_of = await asyncio.gather(*(ledger.one("pool_stats", {"pool_id": pool_id}) for pool_id in judged))
        rows = [row for row in stats_of if row is not None]
        return Table(
            "pools", "Pending work in the pools of these verdicts", columns.JUDGED_POOLS, rows,
            empty="No pool to show.",
        )  # fmt: skip

    context = {
        "title": f"Validator {validator}",
        "slug": f"validator-{validator}",
        "address": validator,
        "order": order,
        "latest_href": query_href(request, verdicts_order=None, verdicts_cursor=None),
        "chain_href": query_href(request, verdicts_order="chain", verdicts_cursor=None),
    }
    sources = {"role": role_table, "stats": earnings, "verdicts": verdict_table, "pools": pools}
    return await render_page(request, "validator.html", context, sources)
