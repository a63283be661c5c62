"""The explorer's ledger client over a fake API (`httpx.MockTransport`): errors mirror the sync client's
(`ServiceUnavailable`, `LedgerRefused`), `find` asks one request when the list has a filter on the
key and walks otherwise, `latest` reads only the end of a list once it has walked it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from proofpool.explorer.ledger import ExplorerLedger

from proofpool.core.errors import ServiceUnavailable
from proofpool.core.ledger_listings import MAX_PAGE_ROWS
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


def test_find_uses_a_filter_on_the_key_when_the_list_declares_one() -> None:
    pages = Pages("memberships", [{"pool_id": 1, "node": "0xb"}, {"pool_id": 2, "node": "0xc"}])
    found = run(client(pages).find("memberships", "pool_id", 2))
    assert found == {"pool_id": 2, "node": "0xc"} and pages.asked == [{"pool_id": "2", "limit": "1"}]


def test_find_walks_an_integer_key_until_it_is_passed() -> None:
    pools = Pages("pools", [{"pool_id": i} for i in range(1, 2 * MAX_PAGE_ROWS + 500)])
    assert run(client(pools).find("pools", "pool_id", 1500)) == {"pool_id": 1500}
    assert len(pools.asked) == 2
    pools.asked.clear()
    pools.rows = [{"pool_id": i} for i in range(0, 6000, 2)]
    assert run(client(pools).find("pools", "pool_id", 7)) is None
    assert len(pools.asked) == 1  # the first page already passed 7


def test_find_walks_a_text_key_to_the_end() -> None:
    providers = Pages("providers", [{"address": f"0x{i:040x}"} for i in range(MAX_PAGE_ROWS + 10)])
    assert run(client(providers).find("providers", "address", "0x" + "f" * 40)) is None
    assert len(providers.asked) == 2


def test_latest_reads_the_end_of_a_list_and_later_only_from_its_last_pages() -> None:
    verdicts = Pages("verdicts", [{"n": i} for i in range(2 * MAX_PAGE_ROWS + 300)])
    ledger = client(verdicts)

    async def scenario() -> None:
        first = await ledger.latest("verdicts", {}, 20)
        assert [r["n"] for r in first] == list(range(2 * MAX_PAGE_ROWS + 280, 2 * MAX_PAGE_ROWS + 300))
        assert len(verdicts.asked) == 3
        verdicts.asked.clear()
        verdicts.rows += [{"n": i} for i in range(2 * MAX_PAGE_ROWS + 300, 2 * MAX_PAGE_ROWS + 305)]
        again = await ledger.latest("verdicts", {}, 20)
        assert [r["n"] for r in again][-1] == 2 * MAX_PAGE_ROWS + 304 and len(again) == 20
        assert [p.get("cursor") for p in verdicts.asked] == [str(2 * MAX_PAGE_ROWS)]
        verdicts.asked.clear()
        many = await ledger.latest("verdicts", {}, 400)  # more than the last page holds: from the one before
        assert [r["n"] for r in many] == list(range(2 * MAX_PAGE_ROWS - 95, 2 * MAX_PAGE_ROWS + 305))
        assert [p.get("cursor") for p in verdicts.asked] == [
            str(2 * MAX_PAGE_ROWS),
            str(MAX_PAGE_ROWS),
            str(2 * MAX_PAGE_ROWS),
        ]

    run(scenario())


def test_latest_keeps_separate_ends_per_filter() -> None:
    rows = [{"pool_id": 1 + i % 2, "n": i} for i in range(50)]
    ledger = client(Pages("verdicts", rows))

    async def scenario() -> None:
        one = await ledger.latest("verdicts", {"pool_id": 1}, 3)
        two = await ledger.latest("verdicts", {"pool_id": 2}, 3)
        assert [r["n"] for r in one] == [44, 46, 48] and [r["n"] for r in two] == [45, 47, 49]

    run(scenario())


def test_latest_of_an_empty_list_is_empty_and_bad_counts_are_refused() -> None:
    ledger = client(Pages("verdicts", []))
    assert run(ledger.latest("verdicts", {}, 5)) == []
    with pytest.raises(ValueError, match="count"):
        run(ledger.latest("verdicts", {}, 0))
