"""A pool's live feed: its latest submissions and verdicts, newest first, in one table.

Both lists are in chain order, so one chain position (`<block>-<log>`) says what a reader has
seen: the feed route answers the events after it, and the page's script asks every few seconds
with the newest position it holds. A reader that falls more than `FEED_ROWS` events behind gets
the newest `FEED_ROWS` (it is a feed, not a log: the tables of the pages are the log).
"""

from __future__ import annotations

import asyncio
from typing import Any

from proofpool.explorer import columns
from proofpool.explorer.ledger import ExplorerLedger
from proofpool.explorer.params import format_position
from proofpool.explorer.tables import Table

Row = dict[str, Any]

FEED_ROWS = 20
"""Events the feed shows and answers at most."""
POLL_SECONDS = 2
"""How often the page's script asks for new events."""


def position(row: Row) -> tuple[int, int]:
    return row["block_number"], row["log_index"]


def _submission_event(row: Row) -> Row:
    return {
        "event": "submission",
        "pool_id": row["pool_id"],
        "work_key": row["work_key"],
        "account": row["node"],
        "outcome": row["status"],
        "reason": None,
        "work_units": row["work_units"],
        "block_number": row["block_number"],
        "log_index": row["log_index"],
        "tx_hash": row["tx_hash"],
    }


def _verdict_event(row: Row) -> Row:
    return {
        "event": "verdict",
        "pool_id": row["pool_id"],
        "work_key": row["work_key"],
        "account": row["validator"],
        "outcome": row["verdict"],
        "reason": row["reason"],
        "work_units": None,
        "block_number": row["block_number"],
        "log_index": row["log_index"],
        "tx_hash": row["tx_hash"],
    }


async def pool_events(ledger: ExplorerLedger, pool_id: int, after: tuple[int, int] | None = None) -> list[Row]:
    """The pool's newest submissions and verdicts after `after` (all when None), newest first."""
    submissions, verdicts = await asyncio.gather(
        ledger.latest("submissions", {"pool_id": pool_id}, FEED_ROWS),
        ledger.latest("verdicts", {"pool_id": pool_id}, FEED_ROWS),
    )
    events = [*map(_submission_event, submissions), *map(_verdict_event, verdicts)]
    events.sort(key=position, reverse=True)
    if after is not None:
        events = [event for event in events if position(event) > after]
    return events[:FEED_ROWS]


def feed_table(events: list[Row]) -> Table:
    return Table(
        "feed",
        "Latest submissions and verdicts, newest first",
        columns.FEED,
        events,
        empty="No submission or verdict yet.",
        position=lambda row: format_position(*position(row)),
        notes=(
            "A submission shows its status now; a verdict, what the validator decided and why. "
            f"New events appear at the top without reloading (every {POLL_SECONDS} s).",
        ),
    )
