"""`/pools/{pool_id}`: a pool's terms and statistics, its contributor leaderboard, its checkpoints
and a live feed of its submissions and verdicts (`/pools/{pool_id}/feed`, JSON, polled by
`static/explorer.js`)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.errors import NotFound
from proofpool.explorer.feed import POLL_SECONDS, feed_table, pool_events
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.pages.sources import listing_source, record_source
from proofpool.explorer.params import format_position, parse_pool_id, parse_position
from proofpool.explorer.render import render_page, root_path, row_view
from proofpool.explorer.tables import Table

router = APIRouter()

LEADERBOARD_ROWS = 100
"""Contributors the leaderboard shows (the pool's whole contributors list is read to rank it)."""


async def find_pool(ledger: ExplorerLedger, pool_id: int) -> Row:
    pool = await ledger.find("pools", "pool_id", pool_id)
    if pool is None:
        raise NotFound(f"the ledger has no pool {pool_id}")
    return pool


def ranked(contributors: list[Row]) -> list[Row]:
    """The leaderboard's order: most work units accepted first, then by node address."""
    return sorted(contributors, key=lambda row: (-row["work_units_accepted"], row["node"]))


async def leaderboard(ledger: ExplorerLedger, pool_id: int) -> Table:
    rows = ranked(await ledger.rows("contributors", {"pool_id": pool_id}))
    return Table(
        "leaderboard",
        "Contributors, most work units accepted first",
        columns.CONTRIBUTORS,
        rows[:LEADERBOARD_ROWS],
        empty="No node has submitted work to this pool yet.",
        notes=(
            f"{len(rows)} nodes have submitted work"
            + (f"; the first {LEADERBOARD_ROWS} are shown." if len(rows) > LEADERBOARD_ROWS else ".")
            + " Accepted counts accepted and finalized work; rewards are the provider rewards paid for it.",
        ),
    )


@router.get("/pools/{pool_id}", name="pool")
async def pool_page(request: Request, pool_id: str, ledger: Ledger) -> Response:
    pid = parse_pool_id(pool_id)
    pool, stats = await asyncio.gather(find_pool(ledger, pid), ledger.one("pool_stats", {"pool_id": pid}))

    async def ranking(_: str | None) -> Table:
        return await leaderboard(ledger, pid)

    async def feed(_: str | None) -> Table:
        return feed_table(await pool_events(ledger, pid))

    context = {
        "title": f"Pool {pid}",
        "slug": f"pool-{pid}",
        "pool": pool,
        "feed_url": f"{root_path(request)}/pools/{pid}/feed",
        "poll_ms": POLL_SECONDS * 1000,
    }
    sources = {
        "terms": record_source("terms", "Terms", columns.POOL_TERMS, pool),
        "stats": record_source(
            "stats", "Submissions and payments", columns.POOL_STATS, stats or None,
            empty="No submission, slash or payment in this pool yet.",
        ),
        "leaderboard": ranking,
        "checkpoints": listing_source(
            ledger, "checkpoints", {"pool_id": pid}, "checkpoints", "Checkpoints, oldest first", columns.CHECKPOINTS,
            empty="No checkpoint published yet.", anchor=lambda row: f"checkpoint-{row['version']}",
        ),
        "feed": feed,
    }  # fmt: skip
    return await render_page(request, "pool.html", context, sources)


@router.get("/pools/{pool_id}/feed", name="pool_feed")
async def pool_feed(request: Request, pool_id: str, ledger: Ledger, after: str | None = None) -> JSONResponse:
    """The pool's events after the chain position `after` (`<block>-<log>`), newest first, each
    with its table row as the page renders it; `after` in the answer is the newest position."""
    pid = parse_pool_id(pool_id)
    since = parse_position(after) if after else None
    await find_pool(ledger, pid)
    table = feed_table(await pool_events(ledger, pid, since))
    template = request.app.state.templates.get_template("_row.html")
    root = root_path(request)
    rows = []
    for event in table.rows:
        view = row_view(table, event)
        rows.append({"position": view.position, "html": template.render(row=view, root=root), "event": event})
    newest = rows[0]["position"] if rows else (format_position(*since) if since else None)
    return JSONResponse({"pool_id": pid, "after": newest, "rows": rows})
