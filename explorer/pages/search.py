"""`/search?q=`: what a string names in the ledger, each kind asked in one request per list.

- An address: the provider, node or validator page it is (`providers?address=`, `nodes?address=`,
  `validators?address=`).
- A pool id: the pool (`pools?pool_id=`).
- 0x and 64 hex digits: a work key (the submission, in whichever pool holds it), a file inside a
  bundle (the bundle's submission), both through `submissions?file=`; or a transaction, through
  the rows it logged: `tx_hash=` on submissions, verdicts, slashes, rewards and checkpoints, and
  `status_tx_hash=` on submissions (a forfeit or an expiry is recorded nowhere else). Each leads
  to the submission the row is about, a checkpoint to its row on its pool's page, a withdrawal to
  its account's page.

What is found is said: a search that names one thing itself (an account, a pool, a submission by
its work key) redirects to its page (303); a file or a transaction, or several matches, are listed
with what each is ("transaction: verdict accepted by … on submission … in pool 3"), one line per
page they lead to. Nothing found is a 404 page saying what was looked for.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from proofpool.explorer import links
from proofpool.explorer.deps import Ledger
from proofpool.explorer.format import short_hex
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.params import is_address, is_pool_id, is_work_key, parse_address, parse_work_key
from proofpool.explorer.render import html, root_path

router = APIRouter()

MAX_QUERY_CHARS = 200
TX_ROWS = 20
"""Rows of each list a transaction search reads (a transaction logs a handful: a bundle of
submissions, a finalization's two credits)."""


@dataclass(frozen=True)
class Match:
    """One page a search leads to, and what the searched string is there."""

    what: str
    href: str
    itself: bool = False
    """The string is this page's own id (an account, a pool, a work key), not a row it logged."""


ACCOUNT_LISTS = (("providers", "provider", links.provider), ("nodes", "node", links.node),
                 ("validators", "validator", links.validator))  # fmt: skip


async def account_matches(ledger: ExplorerLedger, address: str) -> list[Match]:
    rows = await asyncio.gather(*(ledger.find(listing, "address", address) for listing, _, _ in ACCOUNT_LISTS))
    return [
        Match(what, page(address), itself=True) for (_, what, page), row in zip(ACCOUNT_LISTS, rows, strict=True) if row
    ]


def _work(row: Row, noun: str = "submission") -> str:
    """A row's submission for people: `submission 0x5c94…2a21 in pool 3`."""
    return f"{noun} {short_hex(row['work_key'])} in pool {row['pool_id']}"


def _to_work(row: Row) -> str:
    """The page of the submission a row (with a pool_id and a work_key) is about."""
    return links.submission(row["pool_id"], row["work_key"])


async def file_matches(ledger: ExplorerLedger, key: str) -> list[Match]:
    """Submissions whose work key `key` is (in any pool), and bundles holding a file with key `key`."""
    page = await ledger.page("submissions", {"file": key}, limit=TX_ROWS)
    return [
        Match(f"submission in pool {row['pool_id']}", links.submission(row["pool_id"], key), itself=True)
        if row["work_key"] == key
        else Match(f"a file of the {_work(row, 'bundle')}", _to_work(row))
        for row in page.items
    ]


async def _withdrawal_page(ledger: ExplorerLedger, account: str) -> str:
    """A withdrawal's account page: its provider page if it is a provider, else its validator page
    (validators withdraw fees)."""
    return links.provider(account) if await ledger.find("providers", "address", account) else links.validator(account)


async def transaction_matches(ledger: ExplorerLedger, tx: str) -> list[Match]:
    """What the transaction `tx` logged, each row leading to the page of what it is about."""
    asked = {
        "submitted": ("submissions", {"tx_hash": tx}),
        "status": ("submissions", {"status_tx_hash": tx}),
        "verdicts": ("verdicts", {"tx_hash": tx}),
        "slashes": ("slashes", {"tx_hash": tx}),
        "rewards": ("rewards", {"tx_hash": tx}),
        "checkpoints": ("checkpoints", {"tx_hash": tx}),
    }
    pages = await asyncio.gather(*(ledger.page(name, filters, limit=TX_ROWS) for name, filters in asked.values()))
    found = dict(zip(asked, (page.items for page in pages), strict=True))
    matches = [Match(f"work submitted: {_work(row)}", _to_work(row)) for row in found["submitted"]]
    matches += [Match(f"status set to {row['status']}: {_work(row)}", _to_work(row)) for row in found["status"]]
    matches += [
        Match(f"verdict {row['verdict']} by {short_hex(row['validator'])} on {_work(row)}", _to_work(row))
        for row in found["verdicts"]
    ]
    matches += [
        Match(f"slash of {short_hex(row['provider'])} for {_work(row)}", _to_work(row)) for row in found["slashes"]
    ]
    for row in found["rewards"]:
        if row["kind"] == "withdrawal":
            href = await _withdrawal_page(ledger, row["account"])
            matches.append(Match(f"withdrawal by {short_hex(row['account'])}", href))
        else:
            what = f"{row['kind'].replace('_', ' ')} to {short_hex(row['account'])} for {_work(row)}"
            matches.append(Match(what, _to_work(row)))
    matches += [
        Match(f"checkpoint {row['version']} of pool {row['pool_id']} published", links.to_checkpoint(row))
        for row in found["checkpoints"]
    ]
    return [Match(f"transaction: {match.what}", match.href) for match in merged(matches)]


def merged(matches: list[Match]) -> list[Match]:
    """One match per page, in the order found, saying everything the string is there."""
    by_href: dict[str, Match] = {}
    for match in matches:
        seen = by_href.get(match.href)
        by_href[match.href] = (
            match if seen is None else Match(f"{seen.what}; {match.what}", match.href, seen.itself or match.itself)
        )
    return list(by_href.values())


async def matches_of(ledger: ExplorerLedger, text: str) -> tuple[list[Match], str]:
    """What `text` names in the ledger, and what was looked for (for the not-found message)."""
    if is_address(text):
        address = parse_address(text)
        return await account_matches(ledger, address), f"no provider, node or validator has the address {address}"
    if is_pool_id(text):
        pool = await ledger.find("pools", "pool_id", int(text))
        return ([Match("pool", links.pool(int(text)), itself=True)] if pool else []), (
            f"the ledger has no pool {int(text)}"
        )
    if is_work_key(text):
        key = parse_work_key(text)
        files, transactions = await asyncio.gather(file_matches(ledger, key), transaction_matches(ledger, key))
        return merged([*files, *transactions]), (
            f"{key} is neither the work key of a submission, nor a file of a bundle, nor a transaction of the ledger"
        )
    return [], (
        f"{text[:MAX_QUERY_CHARS]!r} is not an address (0x and 40 hex digits), a pool id, or a work key, file "
        "or transaction hash (0x and 64 hex digits)"
    )


@router.get("/search", name="search")
async def search(request: Request, ledger: Ledger, q: str = "") -> Response:
    text = q.strip()
    context = {"title": "Search", "slug": "search", "q": text, "matches": [], "message": None}
    if not text:
        return html(request, "search.html", context)
    matches, missing = await matches_of(ledger, text)
    if len(matches) == 1 and matches[0].itself:
        return RedirectResponse(root_path(request) + matches[0].href, status_code=303)
    if not matches:
        return html(request, "search.html", {**context, "title": "Not found", "message": missing}, status=404)
    return html(request, "search.html", {**context, "matches": [(m.what, m.href) for m in matches]})
