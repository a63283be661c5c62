"""The explorer's ledger client over a fake API (`httpx.MockTransport`): errors mirror the sync client's
(`ServiceUnavailable`, `LedgerRefused`), `find` is one request through a list's filter on its key,
`latest` one newest-first page."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from proofpool.explorer.ledger import ExplorerLedger

from proofpool.core.errors import ServiceUnavailable
from proofpool.core.ledger_listings import MAX_PAGE_ROWS, Order
from proofpool.infra.http.ledger_client import LedgerRefused


class Pages:
    """One list served in pages of at most `limit` rows, recording each request's parameters."""

    def __init__(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.name, self.rows = name, rows
        self.asked: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.asked.append(params)
        assert request.url.path == f"/v1/ledger/{self.name}"
        rows = [
            r for r in self.rows if all(str(r.get(k)) == v for k, v in params.items() if k not in ("limit", "cursor"))
        ]
        start = int(params.get("cursor", "0"))
        end = start + int(params["limit"])
        return httpx.Response(
            200, json={"items": rows[start:end], "next_cursor": str(end) if end < len(rows) else None}
        )


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def client(handler: Any) -> ExplorerLedger:
    return ExplorerLedger(transport=httpx.MockTransport(handler))


def test_it_needs_a_base_url_or_a_transport() -> None:
    with pytest.raises(ValueError, match="base URL or a transport"):
        ExplorerLedger()


def test_filters_go_as_the_api_reads_them() -> None:
    pages = Pages("nodes", [{"address": "0xa", "active": True}])

    async def ask() -> None:
        await client(pages).page("nodes", {"active": True, "provider": None}, limit=5)

    run(ask())
    assert pages.asked == [{"active": "true", "limit": "5"}]


def test_an_unreachable_backend_is_service_unavailable_naming_it() -> None:
    async def ask() -> None:
        await ExplorerLedger("http://127.0.0.1:9", timeout=2).page("pools", {}, limit=1)

    with pytest.raises(ServiceUnavailable, match=r"http://127\.0\.0\.1:9 \(ConnectError\)"):
        run(ask())


def test_an_answer_that_is_not_json_is_service_unavailable() -> None:
    async def ask() -> None:
        await client(lambda _: httpx.Response(200, text="<html>")).page("pools", {}, limit=1)

    with pytest.raises(ServiceUnavailable, match="not JSON"):
        run(ask())


@pytest.mark.parametrize(
    "reply, status, error",
    [
        (httpx.Response(422, json={"error": "invalid_cursor", "detail": "no"}), 422, "invalid_cursor"),
        (httpx.Response(500, text="Internal Server Error"), 500, "error"),
    ],
)
def test_a_refusal_carries_the_api_status_and_code(reply: httpx.Response, status: int, error: str) -> None:
    async def ask() -> None:
        await client(lambda _: reply).page("pools", {}, limit=1)

    with pytest.raises(LedgerRefused) as refused:
        run(ask())
    assert (refused.value.status, refused.value.error) == (status, error)


def test_an_unknown_submission_is_none_and_other_404s_are_refusals() -> None:
    async def ask(reply: httpx.Response) -> Any:
        return await client(lambda _: reply).submission(1, "0x" + "ab" * 32)

    assert run(ask(httpx.Response(404, json={"error": "submission_not_found", "detail": "no"}))) is None
    with pytest.raises(LedgerRefused):
        run(ask(httpx.Response(404, json={"error": "not_found", "detail": "Not Found"})))


def test_find_is_one_request_through_the_key_filter() -> None:
    pools = Pages("pools", [{"pool_id": i} for i in range(1, 2 * MAX_PAGE_ROWS + 500)])
    assert run(client(pools).find("pools", "pool_id", 1500)) == {"pool_id": 1500}
    assert run(client(pools).find("pools", "pool_id", 999_999)) is None
    assert pools.asked == [{"pool_id": "1500", "limit": "1"}, {"pool_id": "999999", "limit": "1"}]
    providers = Pages("providers", [{"address": f"0x{i:040x}"} for i in range(MAX_PAGE_ROWS + 10)])
    assert run(client(providers).find("providers", "address", f"0x{7:040x}")) == {"address": f"0x{7:040x}"}
    assert len(providers.asked) == 1


@pytest.mark.parametrize(
    "listing, column",
    [
        ("memberships", "pool_id"),  # a filter on part of the key: many rows
        ("submissions", "work_key"),  # the key is (pool_id, work_key) and work_key has no filter
        ("nodes", "provider"),  # a filter, but not on the key
    ],
)
def test_find_refuses_a_column_that_is_not_a_filtered_key(listing: str, column: str) -> None:
    with pytest.raises(ValueError, match="no filter on its key"):
        run(client(Pages(listing, [])).find(listing, column, 1))


class Backwards(Pages):
    """A list served newest first when asked `order=desc`."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        if params.get("order") != "desc":
            return super().__call__(request)
        self.asked.append(params)
        rows = self.rows[::-1]
        start = int(params.get("cursor", "0"))
        end = start + int(params["limit"])
        return httpx.Response(
            200, json={"items": rows[start:end], "next_cursor": str(end) if end < len(rows) else None}
        )


def test_latest_is_one_newest_first_page_whatever_the_length() -> None:
    verdicts = Backwards("verdicts", [{"n": i} for i in range(5 * MAX_PAGE_ROWS + 300)])
    latest = run(client(verdicts).latest("verdicts", {"pool_id": None}, 20))
    assert [r["n"] for r in latest] == list(range(5 * MAX_PAGE_ROWS + 299, 5 * MAX_PAGE_ROWS + 279, -1))
    assert verdicts.asked == [{"order": "desc", "limit": "20"}]


def test_pages_ask_desc_only_when_asked() -> None:
    rows = Backwards("verdicts", [{"n": i} for i in range(10)])

    async def scenario() -> None:
        ledger = client(rows)
        assert [r["n"] for r in (await ledger.page("verdicts", {}, limit=3)).items] == [0, 1, 2]
        newest = await ledger.page("verdicts", {}, limit=3, order=Order.DESC)
        older = await ledger.page("verdicts", {}, cursor=newest.next_cursor, limit=3, order=Order.DESC)
        assert [r["n"] for r in newest.items + older.items] == [9, 8, 7, 6, 5, 4]

    run(scenario())
    assert rows.asked == [
        {"limit": "3"},
        {"order": "desc", "limit": "3"},
        {"order": "desc", "cursor": "3", "limit": "3"},
    ]


def test_latest_of_an_empty_list_is_empty_and_bad_counts_are_refused() -> None:
    ledger = client(Backwards("verdicts", []))
    assert run(ledger.latest("verdicts", {}, 5)) == []
    for count in (0, MAX_PAGE_ROWS + 1):
        with pytest.raises(ValueError, match="count"):
            run(ledger.latest("verdicts", {}, count))
