"""How the explorer writes the ledger's values for people, and as raw text for machines.

People read amounts in POOL (exact, from base units), counts with thousands separators, hashes
and addresses shortened (the full value in the element's title), times in UTC. Machines read
`raw`: the JSON value as the ledger API's CSV writes it, which every table cell carries in its
`data-value` and every CSV download holds.
"""

from __future__ import annotations

from datetime import UTC, datetime

from proofpool.infra.chain.units import format_pool

SHORT_HEAD = 8
"""Characters kept at the start of a shortened hash or address (with the 0x)."""
SHORT_TAIL = 4


def tokens(units: str | int) -> str:
    """Base units (a decimal string) as POOL, exact for any uint256."""
    return f"{format_pool(int(units))} POOL"


def count(value: int) -> str:
    return f"{value:,}"


def short_hex(value: str) -> str:
    """`0x12345678…abcd`: enough to tell values apart on a page, short enough for a phone."""
    if len(value) <= SHORT_HEAD + SHORT_TAIL + 1:
        return value
    return f"{value[:SHORT_HEAD]}…{value[-SHORT_TAIL:]}"


def utc_time(value: str) -> str:
    """An ISO 8601 time as `YYYY-MM-DD HH:MM:SS UTC`."""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
