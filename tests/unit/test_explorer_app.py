"""The explorer's pages over a small in-memory ledger served by a fake of the ledger API (its paging,
filters, cursors and errors as docs/ledger.md describes them) through `httpx.MockTransport`: what
each page shows, its links, CSV, the live feed, search, errors and the root path. The same pages
over the real backend and PostgreSQL are `tests/integration/test_explorer_pages.py`."""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from eth_utils import to_checksum_address
from fastapi import FastAPI
from fastapi.testclient import TestClient
from proofpool.explorer.app import SECURITY_HEADERS, create_explorer
from proofpool.explorer.ledger import ExplorerLedger
from proofpool.explorer.pages.market import MARKET_STATS

from proofpool.core.ledger_listings import POOL_STATS
from tests.fixtures.explorer_markup import assert_accessible_structure, parse_page

Row = dict[str, Any]


def address(name: str) -> str:
    return to_checksum_address("0x" + hashlib.sha256(name.encode()).hexdigest()[:40])


def key(name: str) -> str:
    return "0x" + hashlib.sha256(name.encode()).hexdigest()


def raw(value: Any) -> str:
    return "" if value is None else ("true" if value is True else "false" if value is False else str(value))


@dataclass
class World:
    """A two-pool market, in the API's JSON shape, each list in its ledger order."""

    lists: dict[str, list[Row]] = field(default_factory=dict)
    ids: dict[str, Any] = field(default_factory=dict)


def build_world() -> World:
    p1, p2 = sorted([address("provider-1"), address("provider-2")])
    n1, n2, n3 = address("node-1"), address("node-2"), address("node-3")
    v1 = address("validator-1")
    keys = {name: key(name) for name in ("s1", "s2", "s3", "s4", "s5")}
    files = sorted([key("f1"), key("f2")])

    def tx(name: str) -> str:
        return key("tx-" + name)

    def sub(name: str, pool: int, node: str, provider: str, status: str, block: int, units: int, **extra: Any) -> Row:
        return {
            "pool_id": pool, "work_key": keys[name], "node": node, "provider": provider, "work_units": units,
            "model_version": 1, "status": status, "submitted_at": f"2025-01-01T00:{block % 60:02d}:00Z",
            "block_number": block, "tx_hash": tx(name), "log_index": 0, "status_block": None, "status_tx_hash": None,
            "files": None, **extra,
        }  # fmt: skip

    def verdict(name: str, pool: int, outcome: str, block: int, reason: str | None = None) -> Row:
        return {
            "pool_id": pool, "work_key": keys[name], "verdict": outcome, "validator": v1, "reason": reason,
            "block_number": block, "tx_hash": tx("v-" + name), "log_index": 0,
        }  # fmt: skip

    def reward(account: str, kind: str, amount: str, block: int, name: str | None, pool: int | None) -> Row:
        return {
            "account": account, "kind": kind, "amount": amount, "pool_id": pool,
            "work_key": keys[name] if name else None, "block_number": block, "tx_hash": tx(f"r-{kind}-{block}"),
            "log_index": 0,
        }  # fmt: skip

    def pool(pool_id: int, status: str) -> Row:
        return {
            "pool_id": pool_id, "creator": p1, "manager": v1, "treasury": p1, "status": status,
            "model_uri": f"devnet://tiny/{pool_id}", "spec_sha256": "0x" + "00" * 32, "reward_per_unit": str(10**16),
            "validator_fee": str(5 * 10**17), "slash_amount": str(50 * 10**18), "dispute_window": 3600,
            "validator_slash_share_bps": 5000, "budget": str(123 * 10**18 + 5), "block_number": 3,
            "tx_hash": tx(f"pool-{pool_id}"),
        }  # fmt: skip

    def contributor(pool_id: int, node: str, provider: str, units: int, accepted: int, invalid: int) -> Row:
        return {
            "pool_id": pool_id, "node": node, "provider": provider, "submissions": accepted + invalid + 1, "files": 2,
            "pending": 1, "accepted": accepted, "invalid": invalid, "work_units_accepted": units,
            "rewards": str(units * 10**16), "slashed": str(invalid * 50 * 10**18),
        }  # fmt: skip

    lists: dict[str, list[Row]] = {
        "providers": [
            {
                "address": p,
                "active_stake": str(100 * 10**18),
                "unbonding": "0",
                "unbonding_matures_at": None,
                "slashed_total": "0" if p == p1 else str(50 * 10**18),
                "compute_units": "8",
                "registered_block": 1,
                "block_number": 1,
                "tx_hash": tx(f"prov-{p}"),
            }
            for p in (p1, p2)
        ],
        "nodes": sorted(
            [
                {
                    "address": n,
                    "provider": p,
                    "compute_units": 4,
                    "specs_hash": key(f"specs-{n}"),
                    "attested": True,
                    "active": n != n3,
                    "block_number": 2,
                    "tx_hash": tx(f"node-{n}"),
                }
                for n, p in ((n1, p1), (n2, p1), (n3, p2))
            ],
            key=lambda r: r["address"],
        ),
        "validators": [{"address": v1, "active": True, "block_number": 2, "tx_hash": tx("role")}],
        "pools": [pool(1, "active"), pool(2, "closed")],
        "memberships": [
            {
                "pool_id": pool_id,
                "node": n,
                "provider": p,
                "state": state,
                "blacklisted": False,
                "block_number": 4,
                "tx_hash": tx(f"join-{pool_id}-{n}"),
            }
            for pool_id, n, p, state in sorted(
                [(1, n1, p1, "active"), (1, n2, p1, "active"), (1, n3, p2, "ejected"), (2, n1, p1, "left")]
            )
        ],
        "submissions": [
            sub("s1", 1, n1, p1, "accepted", 10, 40),
            sub("s2", 1, n3, p2, "invalid", 11, 30),
            sub(
                "s3",
                1,
                n2,
                p1,
                "pending",
                12,
                7 + 9,
                files=[{"work_key": files[0], "work_units": 7}, {"work_key": files[1], "work_units": 9}],
            ),
            sub("s4", 1, n1, p1, "finalized", 13, 25),
            sub("s5", 2, n1, p1, "expired", 14, 5),
        ],
        "verdicts": [
            verdict("s1", 1, "accepted", 20),
            verdict("s2", 1, "invalid", 21, "sampling_mismatch"),
            verdict("s4", 1, "accepted", 22),
        ],
        "slashes": [
            {
                "pool_id": 1,
                "work_key": keys["s2"],
                "provider": p2,
                "validator": v1,
                "validator_share": str(25 * 10**18),
                "treasury": p1,
                "treasury_share": str(25 * 10**18),
                "amount": str(50 * 10**18),
                "block_number": 21,
                "tx_hash": tx("v-s2"),
                "log_index": 1,
            }
        ],
        "rewards": [
            reward(v1, "slash_share", str(25 * 10**18), 21, "s2", 1),
            reward(p1, "provider_reward", str(25 * 10**16), 30, "s4", 1),
            reward(v1, "validator_fee", str(5 * 10**17), 30, "s4", 1),
            reward(p1, "withdrawal", str(25 * 10**16), 31, None, None),
        ],
        "checkpoints": [
            {
                "pool_id": 1,
                "version": v,
                "manifest_sha256": key(f"manifest-{v}"),
                "uri": f"s3://b/pools/1/{v}.json",
                "block_number": 5 + v,
                "tx_hash": tx(f"ckpt-{v}"),
                "log_index": 0,
            }
            for v in (1, 2)
        ],
        "pool_stats": [
            {
                "pool_id": 1,
                "submissions": 4,
                "files": 5,
                "pending": 1,
                "accepted": 1,
                "rejected": 0,
                "invalid": 1,
                "finalized": 1,
                "forfeited": 0,
                "expired": 0,
                "work_units_accepted": 65,
                "slashed": str(50 * 10**18),
                "rewards_paid": str(25 * 10**16),
                "validator_fees": str(5 * 10**17),
            },
            {
                "pool_id": 2,
                "submissions": 1,
                "files": 1,
                "pending": 0,
                "accepted": 0,
                "rejected": 0,
                "invalid": 0,
                "finalized": 0,
                "forfeited": 0,
                "expired": 1,
                "work_units_accepted": 0,
                "slashed": "0",
                "rewards_paid": "0",
                "validator_fees": "0",
            },
        ],
        "contributors": sorted(
            [
                contributor(1, n1, p1, 65, 2, 0),
                contributor(1, n2, p1, 0, 0, 0),
                contributor(1, n3, p2, 0, 0, 1),
                contributor(2, n1, p1, 0, 0, 0),
            ],
            key=lambda r: (r["pool_id"], r["node"]),
        ),
        "validator_stats": [
            {
                "validator": v1,
                "verdicts_accepted": 2,
                "verdicts_invalid": 1,
                "fees": str(5 * 10**17),
                "slash_shares": str(25 * 10**18),
            }
        ],
    }
    ids = {
        "provider": p1, "slashed_provider": p2, "node": n1, "bundle_node": n2, "validator": v1,
        "invalid_key": keys["s2"], "bundle_key": keys["s3"], "finalized_key": keys["s4"], "files": files,
    }  # fmt: skip
    return World(lists, ids)


def market_rows(lists: dict[str, list[Row]]) -> list[Row]:
    """The `market` listing the other lists imply, as the database's view computes it: each pool with
    its pool_stats figures (null without a row), its latest checkpoint version, its active members."""
    stats = {row["pool_id"]: row for row in lists["pool_stats"]}
    figures = [column.name for column in POOL_STATS.columns if column.name != "pool_id"]
    rows = []
    for pool in lists["pools"]:
        pool_id = pool["pool_id"]
        versions = [row["version"] for row in lists["checkpoints"] if row["pool_id"] == pool_id]
        members = [row for row in lists["memberships"] if row["pool_id"] == pool_id and row["state"] == "active"]
        own = stats.get(pool_id, {})
        rows.append({**pool, **{name: own.get(name) for name in figures},
                     "latest_checkpoint": max(versions, default=None), "active_members": len(members)})  # fmt: skip
    return rows


def _matches(row: Row, name: str, value: str) -> bool:
    """A filter of the API on one row: `file` is the row's work key or one of its bundle's files,
    any other filter equality with the row's field of that name."""
    if name == "file":
        return value in (row["work_key"], *(file["work_key"] for file in row["files"] or []))
    return raw(row.get(name)) == value


class FakeLedgerApi:
    """`/v1/ledger/...` over a `World`: the filters, limit, `order` (desc: backwards), opaque cursors
    (refused when foreign or of the other order), the submission lookup, JSON errors. `down` makes
    every request fail to connect."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.requests: list[httpx.Request] = []
        self.down = False
        self.failing = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.failing:
            return httpx.Response(500, json={"error": "internal_error", "detail": "boom"})
        parts = request.url.path.removeprefix("/v1/ledger/").split("/")
        params = dict(request.url.params)
        if len(parts) == 3 and parts[0] == "submissions":
            return self._submission(int(parts[1]), parts[2])
        lists = {"checkpoint_metrics": [], **self.world.lists, "market": market_rows(self.world.lists)}
        if len(parts) != 1 or parts[0] not in lists:
            return httpx.Response(404, json={"error": "not_found", "detail": "Not Found"})
        name = parts[0]
        limit, cursor = int(params.pop("limit", 100)), params.pop("cursor", None)
        order = params.pop("order", "asc")
        start = 0
        if cursor is not None:
            tag, _, index = cursor.partition(":")
            if tag != f"{name}/{order}" or not index.isdigit():
                return httpx.Response(
                    422, json={"error": "invalid_cursor", "detail": "cursor is not one this API issued"}
                )
            start = int(index)
        rows = [row for row in lists[name] if all(_matches(row, k, v) for k, v in params.items())]
        if order == "desc":
            rows.reverse()
        end = start + limit
        more = f"{name}/{order}:{end}" if end < len(rows) else None
        return httpx.Response(200, json={"items": rows[start:end], "next_cursor": more})

    def _submission(self, pool_id: int, work_key: str) -> httpx.Response:
        lists = self.world.lists

        def of(name: str) -> list[Row]:
            return [r for r in lists[name] if r.get("pool_id") == pool_id and r.get("work_key") == work_key]

        found = of("submissions")
        if not found:
            return httpx.Response(404, json={"error": "submission_not_found", "detail": "no such submission"})
        body = {"submission": found[0], "verdicts": of("verdicts"), "slashes": of("slashes"), "rewards": of("rewards")}
        return httpx.Response(200, json=body)


@pytest.fixture
def world() -> World:
    return build_world()


@pytest.fixture
def api(world: World) -> FakeLedgerApi:
    return FakeLedgerApi(world)


@pytest.fixture
def explorer(api: FakeLedgerApi) -> Iterator[TestClient]:
    app = create_explorer(ExplorerLedger(transport=httpx.MockTransport(api)))
    with TestClient(app, follow_redirects=False) as client:
        yield client


def test_the_market_shows_each_pool_with_its_stats_checkpoint_and_members(explorer, world):
    page = parse_page(explorer.get("/").text)
    rows = {row["pool_id"]: row for row in page.tables["pools"]}
    stats = {row["pool_id"]: row for row in world.lists["pool_stats"]}
    assert set(rows) == {"1", "2"}
    for pool in world.lists["pools"]:
        row = rows[str(pool["pool_id"])]
        assert row["budget"] == pool["budget"] and row["model_uri"] == pool["model_uri"]
        for name in MARKET_STATS:
            assert row[name] == raw(stats[pool["pool_id"]][name])
    assert (rows["1"]["latest_checkpoint"], rows["1"]["active_members"]) == ("2", "2")
    assert (rows["2"]["latest_checkpoint"], rows["2"]["active_members"]) == ("", "0")


def test_the_market_is_one_request_however_many_pools(explorer, world, api):
    world.lists["pools"] += [{**world.lists["pools"][1], "pool_id": pool_id} for pool_id in range(3, 40)]
    page = parse_page(explorer.get("/").text)
    assert len(page.tables["pools"]) == 39
    assert [request.url.path for request in api.requests] == ["/v1/ledger/market"]


def test_a_pool_without_stats_shows_no_invented_zero(explorer, world):
    world.lists["pool_stats"] = [row for row in world.lists["pool_stats"] if row["pool_id"] != 2]
    row = next(r for r in parse_page(explorer.get("/").text).tables["pools"] if r["pool_id"] == "2")
    assert row["accepted"] == row["slashed"] == ""
    pool = parse_page(explorer.get("/pools/2").text)
    assert "stats" not in pool.records


def test_every_link_of_the_market_and_the_pages_it_links_resolves(explorer):
    seen: set[str] = set()
    frontier = ["/"]
    for _ in range(3):  # market -> pools -> accounts, submissions -> ...
        next_frontier = []
        for path in frontier:
            reply = explorer.get(path)
            assert reply.status_code == 200, (path, reply.status_code, reply.text[:500])
            if not reply.headers["content-type"].startswith("text/html"):
                continue
            for href in parse_page(reply.text).links:
                target = urljoin(f"http://testserver{path}", href)
                parts = urlsplit(target)
                local = parts.path + (f"?{parts.query}" if parts.query else "")
                if local not in seen:
                    seen.add(local)
                    next_frontier.append(local)
        frontier = next_frontier
    assert any(p.startswith("/providers/") for p in seen) and any(p.startswith("/submissions/") for p in seen)
    assert any(p.startswith("/validators/") for p in seen) and any(p.startswith("/nodes/") for p in seen)


def test_the_leaderboard_ranks_by_work_units_accepted_then_node(explorer, world):
    page = parse_page(explorer.get("/pools/1").text)
    expected = sorted(
        (r for r in world.lists["contributors"] if r["pool_id"] == 1),
        key=lambda r: (-r["work_units_accepted"], r["node"]),
    )
    assert [row["node"] for row in page.tables["leaderboard"]] == [r["node"] for r in expected]
    assert page.tables["leaderboard"][0]["work_units_accepted"] == "65"


def test_the_pool_page_shows_terms_stats_checkpoints_and_the_feed_newest_first(explorer, world):
    page = parse_page(explorer.get("/pools/1").text)
    assert page.records["terms"]["budget"] == world.lists["pools"][0]["budget"]
    assert page.records["stats"]["work_units_accepted"] == "65"
    assert [row["version"] for row in page.tables["checkpoints"]] == ["1", "2"]
    assert page.positions["feed"] == ["22-0", "21-0", "20-0", "13-0", "12-0", "11-0", "10-0"]
    assert page.tables["feed"][1] == {
        "block_number": "21",
        "event": "verdict",
        "work_key": world.ids["invalid_key"],
        "account": world.ids["validator"],
        "outcome": "invalid",
        "reason": "sampling_mismatch",
        "work_units": "",
        "tx_hash": key("tx-v-s2"),
    }


def test_the_feed_answers_the_events_after_a_position_with_their_rows(explorer, world):
    assert explorer.get("/pools/1/feed", params={"after": "22-0"}).json()["rows"] == []
    world.lists["verdicts"].append(
        {"pool_id": 1, "work_key": world.ids["bundle_key"], "verdict": "accepted", "validator": world.ids["validator"],
         "reason": None, "block_number": 40, "tx_hash": key("tx-late"), "log_index": 2}
    )  # fmt: skip
    answer = explorer.get("/pools/1/feed", params={"after": "22-0"}).json()
    assert [row["position"] for row in answer["rows"]] == ["40-2"] and answer["after"] == "40-2"
    row = parse_page(f'<table data-table="feed"><tbody>{answer["rows"][0]["html"]}</tbody></table>')
    assert row.tables["feed"] == [
        {"block_number": "40", "event": "verdict", "work_key": world.ids["bundle_key"],
         "account": world.ids["validator"], "outcome": "accepted", "reason": "", "work_units": "",
         "tx_hash": key("tx-late")}
    ]  # fmt: skip
    everything = explorer.get("/pools/1/feed").json()
    assert [row["position"] for row in everything["rows"]][:2] == ["40-2", "22-0"]
    assert explorer.get("/pools/1/feed", params={"after": "13-0"}).json()["after"] == "40-2"


@pytest.mark.parametrize("after, status", [("nonsense", 422), ("1-", 422), ("99999999999999999999-0", 422)])
def test_a_malformed_feed_position_is_a_json_422(explorer, after, status):
    reply = explorer.get("/pools/1/feed", params={"after": after})
    assert reply.status_code == status and reply.json()["error"] == "invalid_request"


def test_the_feed_of_an_unknown_pool_is_a_json_404(explorer):
    reply = explorer.get("/pools/9/feed")
    assert reply.status_code == 404 and reply.json()["error"] == "not_found"


def test_the_provider_page_shows_stake_nodes_submissions_with_reasons_slashes_rewards(explorer, world):
    slashed = world.ids["slashed_provider"]
    page = parse_page(explorer.get(f"/providers/{slashed}").text)
    assert page.records["stake"]["slashed_total"] == str(50 * 10**18)
    [submission] = page.tables["submissions"]
    assert (submission["status"], submission["reason"]) == ("invalid", "sampling_mismatch")
    [slash] = page.tables["slashes"]
    assert slash["amount"] == str(50 * 10**18) and slash["tx_hash"] == key("tx-v-s2")
    assert [row["address"] for row in page.tables["nodes"]] == [address("node-3")]
    mine = parse_page(explorer.get(f"/providers/{world.ids['provider']}").text)
    assert [row["kind"] for row in mine.tables["rewards"]] == ["provider_reward", "withdrawal"]
    assert all(row["reason"] == "" for row in mine.tables["submissions"])


@pytest.mark.parametrize(
    "path, table",
    [
        ("/providers/{provider}", "submissions"),
        ("/providers/{provider}", "rewards"),
        ("/providers/{provider}", "stake"),
        ("/nodes/{node}", "memberships"),
        ("/pools/1", "leaderboard"),
        ("/validators/{validator}", "verdicts"),
        ("/submissions/1/{bundle_key}", "files"),
    ],
)
def test_each_csv_download_is_exactly_the_table_shown(explorer, world, path, table):
    url = path.format(**world.ids)
    page = parse_page(explorer.get(url).text)
    shown = page.tables.get(table) or [page.records[table]]
    reply = explorer.get(url, params={"format": "csv", "table": table})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/csv")
    assert "attachment" in reply.headers["content-disposition"]
    assert list(csv.DictReader(io.StringIO(reply.text))) == shown
    assert shown


def test_tables_page_with_the_api_cursor_and_the_csv_follows_the_page(explorer, world, monkeypatch):
    monkeypatch.setattr("proofpool.explorer.pages.sources.PAGE_ROWS", 2)
    first = parse_page(explorer.get(f"/providers/{world.ids['provider']}").text)
    nexts = [href for href in first.links if "submissions_cursor=" in href and "format=csv" not in href]
    assert len(nexts) == 1
    second_reply = explorer.get(f"/providers/{world.ids['provider']}{nexts[0]}")
    second = parse_page(second_reply.text)
    mine = [r["work_key"] for r in world.lists["submissions"] if r["provider"] == world.ids["provider"]]
    assert [r["work_key"] for r in first.tables["submissions"] + second.tables["submissions"]] == mine
    csv_link = next(href for href in second.links if "format=csv" in href and "table=submissions" in href)
    rows = list(csv.DictReader(io.StringIO(explorer.get(f"/providers/{world.ids['provider']}{csv_link}").text)))
    assert rows == second.tables["submissions"]


def test_the_node_page_shows_provider_memberships_contributions_and_submissions(explorer, world):
    page = parse_page(explorer.get(f"/nodes/{world.ids['node']}").text)
    assert page.records["node"]["provider"] == world.ids["provider"]
    assert [(r["pool_id"], r["state"]) for r in page.tables["memberships"]] == [("1", "active"), ("2", "left")]
    assert [r["pool_id"] for r in page.tables["contributions"]] == ["1", "2"]
    assert [r["status"] for r in page.tables["submissions"]] == ["accepted", "finalized", "expired"]


def test_the_validator_page_shows_stats_latest_verdicts_and_pending_work(explorer, world):
    url = f"/validators/{world.ids['validator']}"
    page = parse_page(explorer.get(url).text)
    assert page.records["stats"] == {"verdicts_accepted": "2", "verdicts_invalid": "1", "fees": str(5 * 10**17),
                                     "slash_shares": str(25 * 10**18)}  # fmt: skip
    assert [r["block_number"] for r in page.tables["verdicts"]] == ["22", "21", "20"]
    assert page.tables["pools"] == [{"pool_id": "1", "pending": "1", "accepted": "1", "invalid": "1"}]
    chain = parse_page(explorer.get(url, params={"verdicts_order": "chain"}).text)
    assert [r["block_number"] for r in chain.tables["verdicts"]] == ["20", "21", "22"]
    assert explorer.get(url, params={"verdicts_order": "sideways"}).status_code == 422


def test_the_latest_verdicts_page_on_to_older_ones(explorer, world, monkeypatch):
    monkeypatch.setattr("proofpool.explorer.pages.validator.PAGE_ROWS", 2)
    url = f"/validators/{world.ids['validator']}"
    first = parse_page(explorer.get(url).text)
    [older] = [href for href in first.links if "verdicts_cursor=" in href and "format=csv" not in href]
    second = parse_page(explorer.get(url + older).text)
    assert [r["block_number"] for r in first.tables["verdicts"] + second.tables["verdicts"]] == ["22", "21", "20"]


def test_the_submission_page_shows_files_verdicts_slash_and_credits(explorer, world):
    bundle = parse_page(explorer.get(f"/submissions/1/{world.ids['bundle_key']}").text)
    assert [r["work_key"] for r in bundle.tables["files"]] == world.ids["files"]
    assert bundle.records["submission"]["work_units"] == "16"
    invalid = parse_page(explorer.get(f"/submissions/1/{world.ids['invalid_key']}").text)
    assert [(r["verdict"], r["reason"]) for r in invalid.tables["verdicts"]] == [("invalid", "sampling_mismatch")]
    assert [r["amount"] for r in invalid.tables["slashes"]] == [str(50 * 10**18)]
    assert [r["kind"] for r in invalid.tables["credits"]] == ["slash_share"]
    upper = explorer.get(f"/submissions/1/{world.ids['invalid_key'].upper().replace('0X', '0x')}")
    assert upper.status_code == 200


@pytest.mark.parametrize(
    "query, target",
    [
        ("{provider}", "/providers/{provider}"),
        ("{lower_node}", "/nodes/{node}"),
        ("{validator}", "/validators/{validator}"),
        ("1", "/pools/1"),
        (" {finalized_key} ", "/submissions/1/{finalized_key}"),
    ],
)
def test_search_goes_to_the_page_of_what_it_names(explorer, world, query, target):
    ids = {**world.ids, "lower_node": world.ids["node"].lower()}
    reply = explorer.get("/search", params={"q": query.format(**ids)})
    assert reply.status_code == 303 and reply.headers["location"] == target.format(**ids)


def match_links(html: str) -> list[str]:
    """The links of a search page's list of matches."""
    return re.findall(r'href="([^"]+)"', html.partition('<ul class="matches">')[2].partition("</ul>")[0])


def test_search_finds_a_file_inside_a_bundle_and_says_so(explorer, world):
    reply = explorer.get("/search", params={"q": world.ids["files"][1].upper().replace("0X", "0x")})
    assert reply.status_code == 200
    assert match_links(reply.text) == [f"/submissions/1/{world.ids['bundle_key']}"]
    assert f"a file of the bundle {world.ids['bundle_key'][:8]}" in reply.text


@pytest.mark.parametrize(
    "tx, says, target",
    [
        ("tx-s2", "transaction: work submitted: submission", "/submissions/1/{invalid_key}"),
        ("tx-v-s2", "transaction: verdict invalid by", "/submissions/1/{invalid_key}"),
        ("tx-ckpt-2", "transaction: checkpoint 2 of pool 1 published", "/pools/1#checkpoint-2"),
        ("tx-r-withdrawal-31", "transaction: withdrawal by", "/providers/{provider}"),
    ],
)
def test_search_finds_what_a_transaction_logged_and_says_what(explorer, world, tx, says, target):
    reply = explorer.get("/search", params={"q": key(tx)})
    assert reply.status_code == 200
    assert match_links(reply.text) == [target.format(**world.ids)]
    assert says in reply.text


def test_a_transaction_that_logged_several_rows_about_one_submission_is_one_match(explorer, world):
    finalize = key("tx-r-finalize")
    for row in world.lists["rewards"]:
        if row["block_number"] == 30:
            row["tx_hash"] = finalize  # a finalization credits the provider and the validator
    reply = explorer.get("/search", params={"q": finalize})
    assert match_links(reply.text) == [f"/submissions/1/{world.ids['finalized_key']}"]
    assert "provider reward to" in reply.text and "validator fee to" in reply.text


def test_search_tells_several_matches_apart(explorer, world):
    shared = key("tx-batch")
    for row in world.lists["submissions"][:2]:
        row["tx_hash"] = shared
    reply = explorer.get("/search", params={"q": shared})
    assert reply.status_code == 200
    assert match_links(reply.text) == [
        f"/submissions/{row['pool_id']}/{row['work_key']}" for row in world.lists["submissions"][:2]
    ]


@pytest.mark.parametrize(
    "query, says",
    [
        ("0x" + "12" * 20, "no provider, node or validator"),
        ("77", "no pool 77"),
        ("0x" + "ab" * 32, "neither the work key of a submission, nor a file of a bundle, nor a transaction"),
        ("hello", "is not an address"),
    ],
)
def test_search_for_what_the_ledger_does_not_hold_says_so_with_a_404(explorer, query, says):
    reply = explorer.get("/search", params={"q": query})
    assert reply.status_code == 404 and says in reply.text
    assert parse_page(reply.text).errors == ["not_found"]


def test_an_empty_search_is_the_search_page(explorer):
    assert explorer.get("/search").status_code == 200


@pytest.mark.parametrize(
    "path, status, error",
    [
        ("/pools/99", 404, "not_found"),
        ("/pools/abc", 422, "invalid_request"),
        ("/pools/99999999999999999999", 422, "invalid_request"),
        ("/providers/0x1234", 422, "invalid_request"),
        ("/providers/0x" + "12" * 20, 404, "not_found"),
        ("/nodes/0xAbCdEf0000000000000000000000000000000000", 422, "invalid_request"),
        ("/validators/0x" + "34" * 20, 404, "not_found"),
        ("/submissions/1/0x1234", 422, "invalid_request"),
        ("/submissions/2/0x" + "ab" * 32, 404, "not_found"),
        ("/providers/{provider}?submissions_cursor=forged", 422, "invalid_cursor"),
        ("/?pools_cursor=submissions/asc:1", 422, "invalid_cursor"),
        ("/validators/{validator}?verdicts_cursor=verdicts/asc:1", 422, "invalid_cursor"),  # latest is desc
        ("/pools/1?format=csv&table=nope", 422, "invalid_request"),
        ("/pools/1?format=xml", 422, "invalid_request"),
        ("/no/such/page", 404, "not_found"),
    ],
)
def test_bad_input_is_a_clear_4xx_page(explorer, world, path, status, error):
    reply = explorer.get(path.format(**world.ids))
    assert reply.status_code == status, reply.text[:300]
    assert reply.headers["content-type"].startswith("text/html")
    page = parse_page(reply.text)
    assert page.errors == [error] and "Traceback" not in reply.text


def test_an_unreachable_backend_is_a_503_page_naming_it(world):
    app = create_explorer(ExplorerLedger("http://127.0.0.1:9"))
    with TestClient(app) as client:
        for path in ("/", "/pools/1", f"/providers/{world.ids['provider']}", "/search?q=1"):
            reply = client.get(path)
            assert reply.status_code == 503, path
            assert "http://127.0.0.1:9" in reply.text and parse_page(reply.text).errors == ["service_unavailable"]
        feed = client.get("/pools/1/feed")
        assert feed.status_code == 503 and feed.json()["error"] == "service_unavailable"


def test_a_failing_backend_is_a_502_page(explorer, api):
    api.failing = True
    reply = explorer.get("/")
    assert reply.status_code == 502 and parse_page(reply.text).errors == ["internal_error"]


def test_mounted_under_a_prefix_every_link_carries_it(api, world):
    outer = FastAPI()
    outer.mount("/explorer", create_explorer(ExplorerLedger(transport=httpx.MockTransport(api))))
    with TestClient(outer, follow_redirects=False) as client:
        reply = client.get("/explorer/")
        assert reply.status_code == 200
        page = parse_page(reply.text)
        absolute = [href for href in page.links if href.startswith("/")]
        assert absolute and all(href.startswith("/explorer/") for href in absolute)
        assert '<link rel="stylesheet" href="/explorer/static/explorer.css">' in reply.text
        assert client.get("/explorer/static/explorer.js").status_code == 200
        feed = parse_page(client.get("/explorer/pools/1").text).attributes
        assert next(a for a in feed.values() if "data-feed-url" in a)["data-feed-url"] == "/explorer/pools/1/feed"
        found = client.get("/explorer/search", params={"q": "1"})
        assert found.headers["location"] == "/explorer/pools/1"


def test_pages_ship_their_own_assets_and_a_strict_content_policy(explorer):
    reply = explorer.get("/")
    for name, value in SECURITY_HEADERS.items():
        assert reply.headers[name] == value
    assert "http://" not in reply.text and "https://" not in reply.text
    assert explorer.get("/static/explorer.css").headers["content-type"].startswith("text/css")
    assert "<script>" not in reply.text and "style=" not in reply.text


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/pools/1",
        "/providers/{provider}",
        "/nodes/{node}",
        "/validators/{validator}",
        "/submissions/1/{invalid_key}",
        "/search",
        "/pools/99",
        "/no/such/page",
    ],
)
def test_every_page_has_landmarks_captions_scoped_headers_and_labels(explorer, world, path):
    reply = explorer.get(path.format(**world.ids))
    assert reply.headers["content-type"].startswith("text/html")
    assert_accessible_structure(parse_page(reply.text))
