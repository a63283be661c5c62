"""Where each kind of id links to, as paths relative to the explorer's root (templates prefix the
root path the app is served under).

There is no transaction page: a transaction links to what it recorded (the submission or verdict
it carries, the pool of a checkpoint, the provider or node it registered).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

Row = dict[str, Any]
Href = Callable[[Row], str | None]
"""A cell's link, computed from its row (None: no link)."""


def pool(pool_id: int) -> str:
    return f"/pools/{pool_id}"


def provider(address: str) -> str:
    return f"/providers/{address}"


def node(address: str) -> str:
    return f"/nodes/{address}"


def validator(address: str) -> str:
    return f"/validators/{address}"


def submission(pool_id: int, work_key: str) -> str:
    return f"/submissions/{pool_id}/{work_key}"


def search(text: str) -> str:
    return f"/search?q={quote(text)}"


def to_pool(column: str = "pool_id") -> Href:
    return lambda row: None if row.get(column) is None else pool(row[column])


def to_provider(column: str = "provider") -> Href:
    return lambda row: None if row.get(column) is None else provider(row[column])


def to_node(column: str = "node") -> Href:
    return lambda row: None if row.get(column) is None else node(row[column])


def to_validator(column: str = "validator") -> Href:
    return lambda row: None if row.get(column) is None else validator(row[column])


def to_submission(row: Row) -> str | None:
    """The submission a row is about (its pool_id and work_key), for its work key and its tx."""
    if row.get("pool_id") is None or row.get("work_key") is None:
        return None
    return submission(row["pool_id"], row["work_key"])


def to_checkpoint(row: Row) -> str:
    """A checkpoint's row in its pool's checkpoint table."""
    return f"{pool(row['pool_id'])}#checkpoint-{row['version']}"


ACCOUNT_PAGES: dict[str, Callable[[str], str]] = {
    "submission": node,
    "verdict": validator,
    "provider_reward": provider,
    "validator_fee": validator,
    "slash_share": validator,
}
"""The page of an account by what its row records: a feed event, or a credit's kind."""


def account(what: str, address: str) -> str | None:
    """The page of the account a row names by `what` (None: a withdrawal, whoever made it)."""
    page = ACCOUNT_PAGES.get(what)
    return None if page is None else page(address)
