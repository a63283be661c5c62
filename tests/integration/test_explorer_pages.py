"""The explorer over the real backend and PostgreSQL, holding the seeded ledger data set
(`tests/fixtures/ledger.py`): the explorer is mounted in the backend's app under /explorer and reads
the ledger in-process through `httpx.ASGITransport`, as `backend serve` mounts it.

Every figure a page shows is compared with what the ledger API answers for the same question
(`data-value` of each cell against the API's row, written as the API's CSV writes it), and every
link of the market is followed."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient
from proofpool.backend.api.ledger import csv_cell
from proofpool.explorer.app import create_explorer, explorer_from_settings, mount_explorer
from proofpool.explorer.ledger import ExplorerLedger
from proofpool.explorer.pages.market import MARKET_STATS

from proofpool.infra.config import get_settings
from tests.fixtures.explorer_markup import PageMarkup, assert_accessible_structure, parse_page

pytestmark = pytest.mark.timeout(300)

Row = dict[str, Any]
PREFIX = "/explorer"
FEED_ROWS = 20
PAGE_ROWS = 50


@pytest.fixture(scope="module")
def site(ledger_settings) -> Iterator[TestClient]:
    """The backend with the explorer mounted under /explorer, reading it in-process."""
    from proofpool.backend.app import create_app

    backend = create_app(ledger_settings)
    mount_explorer(backend, PREFIX)
    with TestClient(backend, follow_redirects=False) as client:
        yield client


def api_rows(site: TestClient, name: str, **filters: Any) -> list[Row]:
    """Every row of a ledger list matching `filters`, straight from the API."""
    rows: list[Row] = []
    cursor = None
    while True:
        params = {**filters, "limit": 1000, **({"cursor": cursor} if cursor else {})}
        reply = site.get(f"/v1/ledger/{name}", params=params)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        rows += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return rows


def api_page(site: TestClient, name: str, **params: Any) -> Row:
    reply = site.get(f"/v1/ledger/{name}", params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def cells(row: Row, columns: list[str]) -> dict[str, str]:
    """`row` as the page's cells hold it: the API's CSV text of each shown column."""
    return {name: csv_cell(row.get(name)) for name in columns}


def same_rows(shown: list[dict[str, str]], expected: list[Row]) -> None:
    assert shown, "the page shows no rows to compare"
    columns = list(shown[0])
    assert shown == [cells(row, columns) for row in expected]


def page(site: TestClient, path: str, **params: Any) -> PageMarkup:
    reply = site.get(PREFIX + path, params=params)
    assert reply.status_code == 200, (path, reply.status_code, reply.text[:500])
    return parse_page(reply.text)


@pytest.fixture(scope="module")
def seeded(site) -> dict[str, Any]:
    """Ids of the data set worth looking at, found through the API."""
    providers = api_rows(site, "providers")
    slashes = api_rows(site, "slashes")
    validators = api_rows(site, "validators")
    submissions = api_rows(site, "submissions")
    bundle = next(row for row in submissions if row["files"])
    invalid = next(row for row in submissions if row["status"] == "invalid")
    return {
        "provider": slashes[0]["provider"],
        "providers": [row["address"] for row in providers],
        "validator": max(validators, key=lambda v: len(api_rows(site, "verdicts", validator=v["address"])))["address"],
        "node": bundle["node"],
        "bundle": bundle,
        "invalid": invalid,
    }


def test_the_market_shows_each_pool_as_the_api_does(site):
    market = page(site, "/")
    pools = api_rows(site, "pools")
    assert [row["pool_id"] for row in market.tables["pools"]] == [str(p["pool_id"]) for p in pools]
    for shown, pool in zip(market.tables["pools"], pools, strict=True):
        pool_id = pool["pool_id"]
        [stats] = api_page(site, "pool_stats", pool_id=pool_id)["items"]
        checkpoints = api_rows(site, "checkpoints", pool_id=pool_id)
        members = api_rows(site, "memberships", pool_id=pool_id, state="active")
        expected = {
            **pool,
            **{name: stats[name] for name in MARKET_STATS},
            "latest_checkpoint": checkpoints[-1]["version"] if checkpoints else None,
            "active_members": len(members),
        }
        assert shown == cells(expected, list(shown))


def test_no_link_of_the_market_or_its_pool_pages_is_broken(site):
    checked: set[str] = set()
    for origin in ["/", *(f"/pools/{p['pool_id']}" for p in api_rows(site, "pools"))]:
        for href in page(site, origin).links:
            parts = urlsplit(urljoin(f"http://testserver{PREFIX}{origin}", href))
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if target in checked:
                continue
            checked.add(target)
            reply = site.get(target)
            assert reply.status_code == 200, (origin, href, reply.status_code, reply.text[:300])
    assert len(checked) > 20


def test_the_pool_page_holds_the_api_terms_stats_leaderboard_checkpoints_and_feed(site):
    pool = api_rows(site, "pools")[0]
    pool_id = pool["pool_id"]
    shown = page(site, f"/pools/{pool_id}")
    assert shown.records["terms"] == cells(pool, list(shown.records["terms"]))
    [stats] = api_page(site, "pool_stats", pool_id=pool_id)["items"]
    assert shown.records["stats"] == cells(stats, list(shown.records["stats"]))
    contributors = sorted(
        api_rows(site, "contributors", pool_id=pool_id), key=lambda r: (-r["work_units_accepted"], r["node"])
    )
    same_rows(shown.tables["leaderboard"], contributors)
    same_rows(shown.tables["checkpoints"], api_page(site, "checkpoints", pool_id=pool_id, limit=PAGE_ROWS)["items"])
    assert shown.tables["feed"] and len(shown.tables["feed"]) == FEED_ROWS
    assert shown.positions["feed"] == [f"{e['block_number']}-{e['log_index']}" for e in pool_events(site, pool_id)]


def pool_events(site: TestClient, pool_id: int) -> list[Row]:
    """The pool's newest submissions and verdicts, newest first, from the whole API lists."""
    events = api_rows(site, "submissions", pool_id=pool_id) + api_rows(site, "verdicts", pool_id=pool_id)
    return sorted(events, key=lambda e: (e["block_number"], e["log_index"]), reverse=True)[:FEED_ROWS]


def test_the_feed_answers_exactly_the_events_after_a_position(site):
    pool_id = api_rows(site, "pools")[0]["pool_id"]
    events = pool_events(site, pool_id)
    middle = events[7]
    after = f"{middle['block_number']}-{middle['log_index']}"
    answer = site.get(f"{PREFIX}/pools/{pool_id}/feed", params={"after": after}).json()
    assert [row["position"] for row in answer["rows"]] == [f"{e['block_number']}-{e['log_index']}" for e in events[:7]]
    assert answer["after"] == f"{events[0]['block_number']}-{events[0]['log_index']}"
    for row, event in zip(answer["rows"], events, strict=False):
        assert row["event"]["work_key"] == event["work_key"] and row["event"]["tx_hash"] == event["tx_hash"]
        assert f'data-position="{row["position"]}"' in row["html"]
    newest = site.get(f"{PREFIX}/pools/{pool_id}/feed", params={"after": answer["after"]}).json()
    assert newest["rows"] == [] and newest["after"] == answer["after"]


def test_the_provider_page_holds_its_api_rows_with_reasons(site, seeded):
    provider = seeded["provider"]
    shown = page(site, f"/providers/{provider}")
    [stake] = [row for row in api_rows(site, "providers") if row["address"] == provider]
    assert shown.records["stake"] == cells(stake, list(shown.records["stake"]))
    same_rows(shown.tables["nodes"], api_page(site, "nodes", provider=provider, limit=PAGE_ROWS)["items"])
    same_rows(shown.tables["slashes"], api_page(site, "slashes", provider=provider, limit=PAGE_ROWS)["items"])
    same_rows(shown.tables["rewards"], api_page(site, "rewards", account=provider, limit=PAGE_ROWS)["items"])
    submissions = api_page(site, "submissions", provider=provider, limit=PAGE_ROWS)["items"]
    reasons = {
        row["work_key"]: next(v["reason"] for v in detail(site, row)["verdicts"] if v["verdict"] == "invalid")
        for row in submissions
        if row["status"] == "invalid"
    }
    assert reasons
    same_rows(shown.tables["submissions"], [{**row, "reason": reasons.get(row["work_key"])} for row in submissions])


def detail(site: TestClient, row: Row) -> Row:
    reply = site.get(f"/v1/ledger/submissions/{row['pool_id']}/{row['work_key']}")
    assert reply.status_code == 200
    return reply.json()


@pytest.mark.parametrize("table", ["stake", "nodes", "submissions", "slashes", "rewards"])
def test_each_provider_csv_is_the_table_shown(site, seeded, table):
    url = f"{PREFIX}/providers/{seeded['provider']}"
    shown = parse_page(site.get(url).text)
    rows = shown.tables.get(table) or [shown.records[table]]
    reply = site.get(url, params={"format": "csv", "table": table})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/csv")
    assert list(csv.DictReader(io.StringIO(reply.text))) == rows and rows


def test_the_node_page_holds_its_api_rows(site, seeded):
    node = seeded["node"]
    shown = page(site, f"/nodes/{node}")
    [registration] = [row for row in api_rows(site, "nodes") if row["address"] == node]
    assert shown.records["node"] == cells(registration, list(shown.records["node"]))
    same_rows(shown.tables["contributions"], api_page(site, "contributors", node=node, limit=PAGE_ROWS)["items"])
    submissions = api_page(site, "submissions", node=node, limit=PAGE_ROWS)["items"]
    assert [row["work_key"] for row in shown.tables["submissions"]] == [row["work_key"] for row in submissions]


def test_the_validator_page_shows_its_stats_latest_verdicts_and_pages_them_all(site, seeded):
    validator = seeded["validator"]
    shown = page(site, f"/validators/{validator}")
    [stats] = api_page(site, "validator_stats", validator=validator)["items"]
    assert shown.records["stats"] == cells(stats, list(shown.records["stats"]))
    verdicts = api_rows(site, "verdicts", validator=validator)
    assert len(verdicts) > PAGE_ROWS
    same_rows(shown.tables["verdicts"], verdicts[-PAGE_ROWS:][::-1])
    pools = sorted({row["pool_id"] for row in verdicts[-PAGE_ROWS:]})
    same_rows(shown.tables["pools"], [api_page(site, "pool_stats", pool_id=p)["items"][0] for p in pools])
    walked: list[dict[str, str]] = []
    url = f"{PREFIX}/validators/{validator}?verdicts_order=chain"
    for _ in range(20):
        chain = parse_page(site.get(url).text)
        walked += chain.tables["verdicts"]
        nexts = [href for href in chain.links if "verdicts_cursor=" in href and "format=csv" not in href]
        if not nexts:
            break
        url = f"{PREFIX}/validators/{validator}{nexts[0]}"
    same_rows(walked, verdicts)


def test_the_submission_pages_tell_a_bundle_and_an_invalid_verdict(site, seeded):
    bundle = seeded["bundle"]
    shown = page(site, f"/submissions/{bundle['pool_id']}/{bundle['work_key']}")
    assert shown.records["submission"] == cells(bundle, list(shown.records["submission"]))
    same_rows(shown.tables["files"], bundle["files"])
    invalid = seeded["invalid"]
    told = detail(site, invalid)
    shown = page(site, f"/submissions/{invalid['pool_id']}/{invalid['work_key']}")
    same_rows(shown.tables["verdicts"], told["verdicts"])
    same_rows(shown.tables["slashes"], told["slashes"])
    same_rows(shown.tables["credits"], told["rewards"])


def test_search_finds_each_kind_of_account_and_a_pool(site, seeded):
    for query, target in [
        (seeded["provider"].lower(), f"/providers/{seeded['provider']}"),
        (seeded["node"], f"/nodes/{seeded['node']}"),
        (seeded["validator"], f"/validators/{seeded['validator']}"),
        ("2", "/pools/2"),
        (seeded["invalid"]["work_key"], f"/submissions/{seeded['invalid']['pool_id']}/{seeded['invalid']['work_key']}"),
    ]:
        reply = site.get(f"{PREFIX}/search", params={"q": query})
        assert reply.status_code == 303 and reply.headers["location"] == PREFIX + target, query


def match_links(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html.partition('<ul class="matches">')[2].partition("</ul>")[0])


def test_search_finds_transactions_and_bundle_files_and_says_what_they_are(site, seeded):
    bundle, invalid = seeded["bundle"], seeded["invalid"]
    finalized = next(row for row in api_rows(site, "submissions") if row["status"] == "finalized")
    checkpoint = api_rows(site, "checkpoints")[0]

    def found(query: str) -> tuple[list[str], str]:
        reply = site.get(f"{PREFIX}/search", params={"q": query})
        assert reply.status_code == 200, (query, reply.status_code)
        return match_links(reply.text), reply.text

    def at(row: Row) -> str:
        return f"{PREFIX}/submissions/{row['pool_id']}/{row['work_key']}"

    links, text = found(bundle["files"][0]["work_key"])
    assert links == [at(bundle)] and "a file of the bundle" in text
    links, text = found(invalid["tx_hash"])
    assert links == [at(invalid)] and "transaction: work submitted" in text
    links, text = found(invalid["status_tx_hash"])  # the invalidation: verdict, slash and slash share
    assert links == [at(invalid)]
    assert all(what in text for what in ("status set to invalid", "verdict invalid", "slash of", "slash share to"))
    links, text = found(finalized["status_tx_hash"])  # the finalization: provider reward and validator fee
    assert links == [at(finalized)] and "provider reward to" in text and "validator fee to" in text
    links, text = found(checkpoint["tx_hash"])
    assert links == [f"{PREFIX}/pools/{checkpoint['pool_id']}#checkpoint-{checkpoint['version']}"]
    assert f"checkpoint {checkpoint['version']} of pool {checkpoint['pool_id']} published" in text


@pytest.mark.parametrize(
    "path, status, error",
    [
        ("/pools/404", 404, "not_found"),
        ("/providers/0xnot-an-address", 422, "invalid_request"),
        ("/providers/0x" + "99" * 20, 404, "not_found"),
        ("/validators/{provider}?verdicts_order=chain&verdicts_cursor=WyJwb29scyIsMV0", 422, "invalid_cursor"),
        ("/pools/1?checkpoints_cursor=garbage", 422, "invalid_cursor"),
        ("/submissions/1/0x" + "00" * 32, 404, "not_found"),
    ],
)
def test_bad_input_is_a_clear_4xx_page(site, seeded, path, status, error):
    reply = site.get(PREFIX + path.format(**seeded))
    assert reply.status_code == status, reply.text[:300]
    assert parse_page(reply.text).errors == [error] and "Traceback" not in reply.text


def test_an_unreachable_backend_is_a_503_page():
    with TestClient(create_explorer(ExplorerLedger("http://127.0.0.1:9", timeout=5))) as client:
        reply = client.get("/")
    assert reply.status_code == 503 and parse_page(reply.text).errors == ["service_unavailable"]


def test_standalone_over_http_it_shows_what_the_mounted_one_shows(site, ledger_server, monkeypatch):
    monkeypatch.setenv("PROOFPOOL_BACKEND_URL", ledger_server)
    get_settings.cache_clear()
    try:
        with TestClient(explorer_from_settings()) as standalone:
            over_http = parse_page(standalone.get("/").text)
    finally:
        get_settings.cache_clear()
    assert over_http.tables["pools"] == page(site, "/").tables["pools"]


def test_every_page_keeps_its_accessible_structure(site, seeded):
    bundle = seeded["bundle"]
    paths = [
        "/",
        "/pools/1",
        f"/providers/{seeded['provider']}",
        f"/nodes/{seeded['node']}",
        f"/validators/{seeded['validator']}",
        f"/submissions/{bundle['pool_id']}/{bundle['work_key']}",
    ]
    for path in paths:
        assert_accessible_structure(page(site, path))
