"""`/pools/{pool_id}`: a pool's terms and statistics, its training curves (the trainer's figures by
checkpoint version, `proofpool.explorer.plots`) with their table, its contributor leaderboard, its
checkpoints and a live feed of its submissions and verdicts (`/pools/{pool_id}/feed`, JSON, polled
by `static/explorer.js`)."""

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
from proofpool.explorer.plots import Chart, pool_charts
from proofpool.explorer.render import render_page, root_path, row_view
from proofpool.explorer.tables import Col, Table

router = APIRouter()

LEADERBOARD_ROWS = 100
"""Contributors the leaderboard shows (the pool's whole contributors list is read to rank it)."""
CHARTED_VERSIONS = 500
"""Checkpoints the training curves show: the pool's latest (all of them, for most pools)."""

FIGURE_NAMES = frozenset(column.name for column in columns.TRAINING[2:-1])


async def find_pool(ledger: ExplorerLedger, pool_id: int) -> Row:
    pool = await ledger.find("pools", "pool_id", pool_id)
    if pool is None:
        raise NotFound(f"the ledger has no pool {pool_id}")
    return pool


def ranked(contributors: list[Row]) -> list[Row]:
    """The leaderboard's order: most work units accepted first, then by node address."""
    return sorted(contributors, key=lambda row: (-row["work_units_accepted"], row["node"]))


def training_columns(rows: list[Row]) -> tuple[Col, ...]:
    """`columns.TRAINING` without the figures no row has (a GRPO pool has no inner loss), and without the
    reason column when every row is verified; every figure when no row has any."""
    held = {name for row in rows for name in FIGURE_NAMES if row.get(name) is not None} or FIGURE_NAMES
    if any(row.get("detail") is not None for row in rows):
        held |= {"detail"}
    return tuple(column for column in columns.TRAINING if column.name in held or column.name in ("version", "status"))


async def training(ledger: ExplorerLedger, pool_id: int) -> tuple[list[Chart], tuple[Col, ...]]:
    """The pool's training curves, from its latest `CHARTED_VERSIONS` rows of checkpoint_metrics,
    and the columns its table of figures shows."""
    rows = await ledger.latest("checkpoint_metrics", {"pool_id": pool_id}, CHARTED_VERSIONS)
    return pool_charts(rows), training_columns(rows)


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
    pool, stats, (charts, training_shown) = await asyncio.gather(
        find_pool(ledger, pid), ledger.one("pool_stats", {"pool_id": pid}), training(ledger, pid)
    )

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
        "charts": charts,
        "charted_versions": CHARTED_VERSIONS,
    }
    sources = {
        "terms": record_source("terms", "Terms", columns.POOL_TERMS, pool),
        "stats": record_source(
            "stats", "Submissions and payments", columns.POOL_STATS, stats or None,
            empty="No submission, slash or payment in this pool yet.",
        ),
        "training": listing_source(
            ledger, "checkpoint_metrics", {"pool_id": pid}, "training", "Training figures by checkpoint version, "
            "oldest first", training_shown, empty="No checkpoint published yet.",
            anchor=lambda row: f"figures-{row['version']}",
            notes=("Each checkpoint carries its trainer's figures (proofpool-metrics.json); they are shown once "
                   "verified against the checkpoint's manifest and the manifest against the chain.",),
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
