"""The public ledger API on a real PostgreSQL: filters (key lookups, transactions, bundle files),
keyset pagination both ways, CSV, refusals, and the indexes the lookups and newest-first pages use.

The data set (tests/fixtures/ledger.py) is kept in Python in the API's JSON shape, so every
expected answer is a plain filter over a list."""

from __future__ import annotations

import csv
import io
from typing import Any

import psycopg
import pytest
from proofpool.backend.api.ledger import csv_cell
from proofpool.backend.db.ledger import SUBMISSIONS, encode_cursor, page_sql

from proofpool.core.ledger_listings import LISTINGS as DECLARED
from proofpool.core.ledger_listings import Order
from proofpool.infra.config import Settings
from tests.fixtures.ledger import SPEC_POOL, SPEC_SHA256

LISTINGS = ("providers", "nodes", "pools", "submissions", "verdicts", "slashes", "rewards", "validators", "checkpoints")


def walk(api, name: str, params: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """Every row of a list, following cursors page by page."""
    rows, cursor, pages = [], None, 0
    while True:
        reply = api.get(
            f"/v1/ledger/{name}", params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        )
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert len(body["items"]) <= limit
        rows += body["items"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return rows
        assert pages < 10_000


def test_every_row_of_every_list_is_served_once_in_order(ledger_api, ledger_db):
    _, data = ledger_db
    for name in LISTINGS:
        expected = data.listing(name)
        assert expected, name
        for limit in (1, 7, 1000):
            assert walk(ledger_api, name, {}, limit=limit) == expected, (name, limit)


def test_newest_first_serves_every_list_backwards_once(ledger_api, ledger_db):
    _, data = ledger_db
    for name in LISTINGS:
        for limit in (1, 7, 1000):
            assert walk(ledger_api, name, {"order": "desc"}, limit=limit) == data.listing(name)[::-1], (name, limit)


def test_newest_first_keeps_the_filters(ledger_api, ledger_db):
    _, data = ledger_db
    for filters in _submission_filters(data):
        expected = [r for r in data.submissions if _matches(r, filters)][::-1]
        assert walk(ledger_api, "submissions", {**filters, "order": "desc"}, limit=5) == expected, filters
    validator = data.verdicts[0]["validator"]
    expected = [r for r in data.verdicts if r["validator"] == validator][::-1]
    assert walk(ledger_api, "verdicts", {"validator": validator.lower(), "order": "desc"}, limit=4) == expected


@pytest.mark.parametrize("issued, used", [("asc", "desc"), ("desc", "asc")])
def test_a_cursor_continues_only_the_order_it_came_from(ledger_api, issued, used):
    cursor = ledger_api.get("/v1/ledger/submissions", params={"limit": 2, "order": issued}).json()["next_cursor"]
    reply = ledger_api.get("/v1/ledger/submissions", params={"limit": 2, "order": used, "cursor": cursor})
    assert reply.status_code == 422
    assert reply.json() == {
        "error": "invalid_cursor",
        "detail": f"cursor continues a walk with order={issued}, not order={used}",
    }


def test_a_newest_first_csv_continues_from_its_header_cursor(ledger_api, ledger_db):
    _, data = ledger_db
    rows, cursor = [], None
    while True:
        params = {"format": "csv", "limit": 70, "order": "desc", **({"cursor": cursor} if cursor else {})}
        reply = ledger_api.get("/v1/ledger/submissions", params=params)
        rows += list(csv.DictReader(io.StringIO(reply.text)))
        cursor = reply.headers.get("x-next-cursor")
        if cursor is None:
            break
    assert [r["work_key"] for r in rows] == [r["work_key"] for r in data.submissions[::-1]]


def test_a_full_last_page_ends_the_walk_without_an_empty_page(ledger_api, ledger_db):
    _, data = ledger_db
    body = ledger_api.get("/v1/ledger/pools", params={"limit": len(data.pools)}).json()
    assert body == {"items": data.pools, "next_cursor": None}


def test_pools_show_the_spec_hash_each_committed_to(ledger_api, ledger_db):
    served = {p["pool_id"]: (p["model_uri"], p["spec_sha256"]) for p in walk(ledger_api, "pools", {}, limit=10)}
    assert served == {
        1: ("devnet://tiny/1", "0x" + "00" * 32),
        SPEC_POOL: (f"spec://{SPEC_SHA256}", "0x" + SPEC_SHA256),
        3: ("devnet://tiny/3", "0x" + "00" * 32),
    }
    schema = ledger_api.get("/openapi.json").json()["components"]["schemas"]["PoolRow"]
    assert "spec_sha256" in schema["required"] and "pool spec" in schema["properties"]["spec_sha256"]["description"]


def _matches(row: dict[str, Any], filters: dict[str, Any]) -> bool:
    for key, value in filters.items():
        if key == "since":
            if row["submitted_at"] < value:
                return False
        elif key == "until":
            if row["submitted_at"] >= value:
                return False
        elif row[key] != value:
            return False
    return True


def _submission_filters(data) -> list[dict[str, Any]]:
    first = data.submissions[0]
    times = sorted(r["submitted_at"] for r in data.submissions)
    since, until = times[len(times) // 4], times[3 * len(times) // 4]
    return [
        {"pool_id": 2},
        {"provider": first["provider"]},
        {"node": first["node"]},
        {"status": "invalid"},
        {"pool_id": 1, "status": "pending"},
        {"provider": first["provider"], "status": "finalized"},
        {"since": since},
        {"until": until},
        {"since": since, "until": until, "pool_id": 3},
        {"since": since, "until": until, "status": "finalized"},
        {"since": since, "node": first["node"]},
        {"node": first["node"], "pool_id": first["pool_id"], "status": first["status"]},
    ]


def test_submission_filters_return_exactly_the_matching_rows(ledger_api, ledger_db):
    _, data = ledger_db
    for filters in _submission_filters(data):
        expected = [r for r in data.submissions if _matches(r, filters)]
        assert expected, filters
        assert walk(ledger_api, "submissions", filters, limit=5) == expected, filters


def test_address_filters_accept_lowercase_and_time_filters_accept_unix_seconds(ledger_api, ledger_db):
    _, data = ledger_db
    provider = data.submissions[0]["provider"]
    expected = [r for r in data.submissions if r["provider"] == provider]
    assert walk(ledger_api, "submissions", {"provider": provider.lower()}, limit=1000) == expected
    since = data.submissions[len(data.submissions) // 2]["submitted_at"]
    unix = int(__import__("datetime").datetime.fromisoformat(since).timestamp())
    expected = [r for r in data.submissions if r["submitted_at"] >= since]
    assert walk(ledger_api, "submissions", {"since": unix}, limit=1000) == expected


@pytest.mark.parametrize(
    "name, filters",
    [
        ("nodes", {"active": "true"}),
        ("pools", {"status": "closed"}),
        ("verdicts", {"verdict": "invalid"}),
        ("verdicts", {"pool_id": 1}),
        ("slashes", {"pool_id": 2}),
        ("rewards", {"kind": "provider_reward"}),
        ("rewards", {"pool_id": 3, "kind": "slash_share"}),
        ("validators", {"active": "false"}),
        ("checkpoints", {"pool_id": 3}),
    ],
)
def test_other_lists_filter(ledger_api, ledger_db, name, filters):
    _, data = ledger_db
    typed = {k: {"true": True, "false": False}.get(v, v) if isinstance(v, str) else v for k, v in filters.items()}
    expected = [r for r in data.listing(name) if _matches(r, typed)]
    assert expected
    assert walk(ledger_api, name, filters, limit=3) == expected


def test_filters_by_account_pick_the_right_rows(ledger_api, ledger_db):
    _, data = ledger_db
    for name, key, value in [
        ("nodes", "provider", data.nodes[0]["provider"]),
        ("pools", "manager", data.pools[-1]["manager"]),
        ("verdicts", "validator", data.verdicts[0]["validator"]),
        ("slashes", "provider", data.slashes[0]["provider"]),
        ("slashes", "validator", data.slashes[0]["validator"]),
        ("rewards", "account", data.rewards[0]["account"]),
    ]:
        expected = [r for r in data.listing(name) if r[key] == value]
        assert walk(ledger_api, name, {key: value}, limit=4) == expected, (name, key)


@pytest.mark.parametrize("name, key", [("providers", "address"), ("nodes", "address"), ("validators", "address"),
                                       ("pools", "pool_id")])  # fmt: skip
def test_a_row_is_found_by_its_key_in_one_page(ledger_api, ledger_db, name, key):
    _, data = ledger_db
    for row in data.listing(name):
        value = row[key].lower() if isinstance(row[key], str) else row[key]
        assert ledger_api.get(f"/v1/ledger/{name}", params={key: value}).json() == {"items": [row], "next_cursor": None}
    absent = "0x" + "99" * 20 if key == "address" else 404
    assert ledger_api.get(f"/v1/ledger/{name}", params={key: absent}).json() == {"items": [], "next_cursor": None}


TX_LISTS = ("submissions", "verdicts", "slashes", "rewards", "checkpoints")


@pytest.mark.parametrize("name", TX_LISTS)
def test_a_transaction_finds_exactly_the_rows_it_logged(ledger_api, ledger_db, name):
    _, data = ledger_db
    rows = data.listing(name)
    for tx in {row["tx_hash"] for row in rows}:
        expected = [row for row in rows if row["tx_hash"] == tx]
        assert walk(ledger_api, name, {"tx_hash": tx.upper().replace("0X", "0x")}, limit=1) == expected
        assert walk(ledger_api, name, {"tx_hash": tx, "order": "desc"}, limit=1) == expected[::-1]
    if name == "rewards":  # a finalization credits the provider and the validator in one log
        assert any(len([r for r in rows if r["tx_hash"] == row["tx_hash"]]) == 2 for row in rows)
    assert walk(ledger_api, name, {"tx_hash": "0x" + "00" * 32}, limit=10) == []


def test_a_status_transaction_finds_the_submissions_it_changed_last(ledger_api, ledger_db):
    _, data = ledger_db
    changed = [row for row in data.submissions if row["status_tx_hash"] is not None]
    assert {row["status"] for row in changed} == {"accepted", "invalid", "finalized", "forfeited"}
    for row in changed:
        assert walk(ledger_api, "submissions", {"status_tx_hash": row["status_tx_hash"]}, limit=10) == [row]
    invalid = next(row for row in changed if row["status"] == "invalid")  # also its verdict's and slash's tx
    assert walk(ledger_api, "verdicts", {"tx_hash": invalid["status_tx_hash"]}, limit=10)[0]["verdict"] == "invalid"


def test_a_file_finds_its_submission_single_or_in_a_bundle(ledger_api, ledger_db):
    _, data = ledger_db
    bundles = [row for row in data.submissions if row["files"]]
    single = next(row for row in data.submissions if row["files"] is None)
    assert bundles
    for bundle in bundles:
        for file in bundle["files"]:
            assert walk(ledger_api, "submissions", {"file": file["work_key"]}, limit=10) == [bundle]
        assert walk(ledger_api, "submissions", {"file": bundle["work_key"]}, limit=10) == [bundle]
    assert walk(ledger_api, "submissions", {"file": single["work_key"].upper().replace("0X", "0x")}, limit=10) == [
        single
    ]
    other_pool = 1 + single["pool_id"] % 3
    assert walk(ledger_api, "submissions", {"file": single["work_key"], "pool_id": other_pool}, limit=10) == []
    assert walk(ledger_api, "submissions", {"file": "0x" + "00" * 32}, limit=10) == []


def _plan(url: str, listing: str, filters: dict[str, Any], order: Order, **settings: str) -> str:
    """PostgreSQL's plan of a page query (page 1), under `SET <name> = <value>` for each setting."""
    sql = page_sql(DECLARED[listing], frozenset(filters), False, order)
    with psycopg.connect(url) as conn:
        for name, value in settings.items():
            conn.execute(f"SET {name} = {value}")
        return "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}", {**filters, "limit": 101}).fetchall())


def _one(data, name: str, column: str) -> Any:
    value = data.listing(name)[len(data.listing(name)) // 2][column]
    return bytes.fromhex(value[2:]) if column.endswith("hash") else value


# The data set is small enough that the planner would read whole tables; with sequential scans
# (and, for ordered walks, bitmap scans) priced out, the plan shows which index serves the query.
ORDERED_WALKS = [
    ("submissions", {}, "submissions_position"),
    ("submissions", {"pool_id": 2}, "submissions_pool_position"),
    ("submissions", {"provider": ("submissions", "provider")}, "submissions_provider_position"),
    ("submissions", {"node": ("submissions", "node")}, "submissions_node_position"),
    ("submissions", {"pool_id": 2, "status": "invalid"}, "submissions_pool_status_position"),
    ("submissions", {"tx_hash": ("submissions", "tx_hash")}, "submissions_tx_position"),
    ("submissions", {"status_tx_hash": ("verdicts", "tx_hash")}, "submissions_status_tx_position"),
    ("verdicts", {"pool_id": 1}, "verdicts_pool_position"),
    ("rewards", {"account": ("rewards", "account")}, "rewards_account_position"),
    ("checkpoints", {"tx_hash": ("checkpoints", "tx_hash")}, "checkpoints_tx_position"),
]


@pytest.mark.parametrize("listing, filters, index", ORDERED_WALKS, ids=[f"{w[0]}-{w[2]}" for w in ORDERED_WALKS])
def test_newest_first_walks_the_same_index_backwards(ledger_db, listing, filters, index):
    url, data = ledger_db
    values = {k: _one(data, *v) if isinstance(v, tuple) else v for k, v in filters.items()}
    off = {"enable_seqscan": "off", "enable_bitmapscan": "off"}
    assert f"Index Scan using {index} on {listing}" in _plan(url, listing, values, Order.ASC, **off)
    assert f"Index Scan Backward using {index} on {listing}" in _plan(url, listing, values, Order.DESC, **off)


@pytest.mark.parametrize("listing", ["verdicts", "slashes", "rewards"])
def test_a_transaction_lookup_uses_the_unique_index_of_its_logs(ledger_db, listing):
    url, data = ledger_db
    plan = _plan(url, listing, {"tx_hash": _one(data, listing, "tx_hash")}, Order.DESC, enable_seqscan="off")
    assert f"{listing}_tx_hash_log_index" in plan


def test_a_file_lookup_ors_the_work_key_index_and_the_bundle_files_index(ledger_db):
    url, _ = ledger_db
    plan = _plan(url, "submissions", {"file": bytes(32)}, Order.ASC, enable_seqscan="off", enable_indexscan="off")
    assert "BitmapOr" in plan and "submissions_work_key" in plan and "submissions_file_keys" in plan


def _market(data, members: dict[int, int], latest: dict[int, int]) -> list[dict[str, Any]]:
    stats = {row.pop("pool_id"): row for row in data.pool_stats}
    empty = dict.fromkeys(next(iter(stats.values())))
    return [
        {**pool, **stats.get(pool["pool_id"], empty), "latest_checkpoint": latest.get(pool["pool_id"]),
         "active_members": members.get(pool["pool_id"], 0)}
        for pool in data.pools
    ]  # fmt: skip


def test_the_market_is_each_pool_with_its_stats_latest_checkpoint_and_active_members(ledger_api, ledger_db):
    _, data = ledger_db
    latest = {row["pool_id"]: row["version"] for row in data.checkpoints}
    expected = _market(data, {}, latest)
    assert walk(ledger_api, "market", {}, limit=2) == expected
    assert walk(ledger_api, "market", {"order": "desc"}, limit=2) == expected[::-1]
    assert walk(ledger_api, "market", {"status": "closed"}, limit=10) == [
        r for r in expected if r["status"] == "closed"
    ]


def test_the_market_counts_active_members_and_finds_the_latest_checkpoint(ledger_db):
    """Memberships and later checkpoints written in a transaction rolled back at the end."""
    import asyncio

    from proofpool.backend.db.ledger import fetch_page

    from proofpool.core.ledger_listings import MARKET

    url, data = ledger_db
    nodes = [row["address"] for row in data.nodes]
    states = {1: ["active", "active", "left", None], 2: ["ejected"], 3: ["active"]}

    async def market() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction(force_rollback=True):
            for pool_id, pool_states in states.items():
                for node, state in zip(nodes, pool_states, strict=False):
                    await conn.execute(
                        "INSERT INTO memberships (pool_id, node, provider, state, blacklisted, block_number, "
                        "tx_hash) VALUES (%s, %s, NULL, %s, %s, 1, '\\x00')",
                        (pool_id, node, state, state is None),
                    )
            await conn.execute(
                "INSERT INTO checkpoints (pool_id, version, manifest_sha256, uri, block_number, tx_hash, log_index)"
                " VALUES (2, 7, '\\x00', 's3://b/7', 999999, '\\x01', 0)"
            )
            return (await fetch_page(conn, MARKET, filters={}, cursor=None, limit=10)).items

    rows = {row.pool_id: (row.active_members, row.latest_checkpoint) for row in asyncio.run(market())}
    assert rows == {1: (2, 1), 2: (0, 7), 3: (1, 1)}


@pytest.mark.parametrize("name", LISTINGS)
def test_csv_holds_the_same_rows_and_cursor_as_json(ledger_api, name):
    params = {"limit": 5}
    json_page = ledger_api.get(f"/v1/ledger/{name}", params=params).json()
    reply = ledger_api.get(f"/v1/ledger/{name}", params={**params, "format": "csv"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(reply.text)))
    header, body = lines[0], lines[1:]
    assert header == list(json_page["items"][0].keys())
    assert body == [[csv_cell(item[column]) for column in header] for item in json_page["items"]]
    assert reply.headers.get("x-next-cursor") == json_page["next_cursor"]


def test_csv_pages_continue_from_the_header_cursor(ledger_api, ledger_db):
    _, data = ledger_db
    rows, cursor = [], None
    while True:
        params = {"format": "csv", "limit": 50, **({"cursor": cursor} if cursor else {})}
        reply = ledger_api.get("/v1/ledger/submissions", params=params)
        rows += list(csv.DictReader(io.StringIO(reply.text)))
        cursor = reply.headers.get("x-next-cursor")
        if cursor is None:
            break
    assert [r["work_key"] for r in rows] == [r["work_key"] for r in data.submissions]


BAD_QUERIES = [
    ("submissions", {"provider": "0x1234"}),
    ("submissions", {"provider": "0x" + "Ab" * 20}),  # mixed case with a wrong checksum
    ("submissions", {"node": "not-an-address"}),
    ("submissions", {"status": "approved"}),
    ("submissions", {"pool_id": "-1"}),
    ("submissions", {"pool_id": str(2**64)}),
    ("submissions", {"pool_id": "one"}),
    ("submissions", {"since": "yesterday"}),
    ("submissions", {"since": "2025-01-02T00:00:00Z", "until": "2025-01-01T00:00:00Z"}),
    ("submissions", {"limit": "0"}),
    ("submissions", {"limit": "1001"}),
    ("submissions", {"format": "xml"}),
    ("submissions", {"pool": "1"}),  # unknown parameter: a typo must not widen the result
    ("submissions", {"cursor": "garbage!"}),
    ("submissions", {"cursor": "eyJ4IjoxfQ"}),  # base64 JSON of the wrong shape
    ("submissions", {"cursor": encode_cursor(SUBMISSIONS, (2**64, 0))}),
    ("submissions", {"cursor": "A" * 600}),
    ("nodes", {"cursor": encode_cursor(SUBMISSIONS, (1, 0))}),  # another list's cursor
    ("nodes", {"active": "maybe"}),
    ("pools", {"status": "open"}),
    ("verdicts", {"verdict": "rejected"}),
    ("rewards", {"kind": "bonus"}),
    ("rewards", {"account": "0x"}),
    ("checkpoints", {"pool_id": "1.5"}),
    ("memberships", {"state": "gone"}),
    ("memberships", {"provider": "0x1234"}),
    ("memberships", {"cursor": encode_cursor(SUBMISSIONS, (1, 0))}),
    ("submissions", {"order": "newest"}),
    ("submissions", {"order": "desc", "cursor": encode_cursor(SUBMISSIONS, (1, 0))}),  # an asc cursor
    ("submissions", {"cursor": encode_cursor(SUBMISSIONS, (1, 0), Order.DESC)}),  # a desc cursor, asc
    ("submissions", {"tx_hash": "0x1234"}),
    ("submissions", {"tx_hash": "ab" * 32}),  # 0x required
    ("submissions", {"status_tx_hash": "0x" + "zz" * 32}),
    ("submissions", {"file": "0x" + "ab" * 33}),
    ("verdicts", {"tx_hash": "0x" + "ab" * 20}),  # an address is not a transaction
    ("providers", {"address": "0x1234"}),
    ("validators", {"address": "0x" + "Ab" * 20}),
    ("pools", {"pool_id": "-1"}),
    ("nodes", {"pool_id": "1"}),  # no such filter
]


@pytest.mark.parametrize("name, params", BAD_QUERIES)
def test_bad_filters_are_422_with_a_json_reason(ledger_api, name, params):
    reply = ledger_api.get(f"/v1/ledger/{name}", params=params)
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"] in {"invalid_request", "invalid_cursor"}


def test_a_cursor_with_a_nul_byte_is_refused_not_a_database_error(ledger_api):
    from proofpool.core.ledger_listings import NODES

    reply = ledger_api.get("/v1/ledger/nodes", params={"cursor": encode_cursor(NODES, ("0x\x00",))})
    assert reply.status_code == 422
    assert reply.json()["error"] == "invalid_cursor"


def test_submission_lookup_returns_its_verdicts_slash_and_credits(ledger_api, ledger_db):
    _, data = ledger_db
    invalid = next(r for r in data.submissions if r["status"] == "invalid")
    reply = ledger_api.get(f"/v1/ledger/submissions/{invalid['pool_id']}/{invalid['work_key']}")
    assert reply.status_code == 200
    body = reply.json()
    assert body["submission"] == invalid
    assert [v["reason"] for v in body["verdicts"]] == ["sampling_mismatch"]
    assert [s["work_key"] for s in body["slashes"]] == [invalid["work_key"]]
    assert [r["kind"] for r in body["rewards"]] == ["slash_share"]

    finalized = next(r for r in data.submissions if r["status"] == "finalized")
    body = ledger_api.get(f"/v1/ledger/submissions/{finalized['pool_id']}/{finalized['work_key'].upper()[2:]}")
    assert body.status_code == 422  # 0x prefix required
    body = ledger_api.get(f"/v1/ledger/submissions/{finalized['pool_id']}/{finalized['work_key']}").json()
    assert sorted(r["kind"] for r in body["rewards"]) == ["provider_reward", "validator_fee"]
    assert body["slashes"] == []


def test_unknown_submission_is_404_and_a_malformed_key_422(ledger_api, ledger_db):
    _, data = ledger_db
    known = data.submissions[0]
    other_pool = 3 if known["pool_id"] != 3 else 1
    for path in (f"1/0x{'00' * 32}", f"{other_pool}/{known['work_key']}"):
        reply = ledger_api.get(f"/v1/ledger/submissions/{path}")
        assert reply.status_code == 404
        assert reply.json()["error"] == "submission_not_found"
    for path in ("1/0x1234", "x/0x" + "00" * 32, f"-1/0x{'00' * 32}", f"1/0x{'zz' * 32}"):
        assert ledger_api.get(f"/v1/ledger/submissions/{path}").status_code == 422, path


def test_ledger_is_public_and_documented(ledger_api):
    schema = ledger_api.get("/openapi.json").json()
    paths = {p for p in schema["paths"] if p.startswith("/v1/ledger/")}
    lists = {p for p in paths if "{" not in p}  # the lookups of one submission are tested on their own
    assert lists == {f"/v1/ledger/{name}" for name in DECLARED} >= {f"/v1/ledger/{name}" for name in LISTINGS}
    assert "/v1/ledger/submissions/{pool_id}/{work_key}" in paths
    params = {p["name"] for p in schema["paths"]["/v1/ledger/submissions"]["get"]["parameters"]}
    assert params == {
        "limit",
        "cursor",
        "format",
        "order",
        "pool_id",
        "provider",
        "node",
        "status",
        "since",
        "until",
        "tx_hash",
        "status_tx_hash",
        "file",
    }


@pytest.fixture(scope="module")
def chain_ledger(loop_world):
    """The chain-loop world indexed by the real indexer into a database of its own, served by the app."""

    from fastapi.testclient import TestClient
    from proofpool.backend.app import create_app

    from tests.fixtures.indexer import make_indexer
    from tests.fixtures.ledger import ledger_redis_url
    from tests.fixtures.postgres import migrated_database

    with migrated_database("proofpool_test_ledger") as url:
        make_indexer(loop_world.w3, loop_world.book, url).run(once=True)
        with TestClient(create_app(Settings(DATABASE_URL=url, REDIS_URL=ledger_redis_url()))) as api:
            yield api


def test_ledger_serves_what_the_indexer_read_from_the_chain(chain_ledger, loop_world):
    loop, cast = loop_world.loop, loop_world.cast
    honest, cheating = "0x" + loop.honest_key.hex(), "0x" + loop.cheating_key.hex()
    submissions = walk(chain_ledger, "submissions", {"pool_id": loop.pool_id}, limit=1)
    assert {(s["work_key"], s["status"], s["provider"]) for s in submissions} == {
        (honest, "finalized", cast.alice.address),
        (cheating, "invalid", cast.bob.address),
    }

    cheat = chain_ledger.get(f"/v1/ledger/submissions/{loop.pool_id}/{cheating}").json()
    assert [(v["verdict"], v["reason"], v["validator"]) for v in cheat["verdicts"]] == [
        ("invalid", "sampling_mismatch", cast.validator.address)
    ]
    (slash,) = cheat["slashes"]
    assert int(slash["validator_share"]) + int(slash["treasury_share"]) == int(slash["amount"]) > 0
    assert [(r["account"], r["kind"]) for r in cheat["rewards"]] == [(cast.validator.address, "slash_share")]
    paid = chain_ledger.get(f"/v1/ledger/submissions/{loop.pool_id}/{honest}").json()["rewards"]
    assert sorted((r["account"], r["kind"]) for r in paid) == sorted(
        [(cast.alice.address, "provider_reward"), (cast.validator.address, "validator_fee")]
    )
    validators = {v["address"]: v["active"] for v in walk(chain_ledger, "validators", {}, limit=100)}
    assert validators[cast.validator.address] is True and validators[loop_world.stranger] is False
    pools = {p["pool_id"]: (p["status"], p["spec_sha256"]) for p in walk(chain_ledger, "pools", {}, limit=100)}
    no_spec = "0x" + "00" * 32  # the devnet's pools run no pool spec
    assert pools == {loop.pool_id: ("closed", no_spec), loop_world.second_pool: ("created", no_spec)}


def test_every_ledger_row_names_a_transaction_of_its_block(chain_ledger, loop_world):
    w3 = loop_world.w3
    for name in LISTINGS:
        rows = walk(chain_ledger, name, {}, limit=1000)
        assert rows, name
        for row in rows:
            receipt = w3.eth.get_transaction_receipt(row["tx_hash"])
            assert receipt["blockNumber"] == row["block_number"], (name, row)
            if "log_index" in row:
                assert row["log_index"] in {log["logIndex"] for log in receipt["logs"]}, (name, row)


def test_memberships_are_what_the_pool_contract_says(chain_ledger, loop_world):
    """Every (pool, node) the chain loop touched, paged one row at a time, filtered, and each row
    naming the transaction that last changed it."""
    cast, loop, pool = loop_world.cast, loop_world.loop, loop_world.client.pool
    rows = walk(chain_ledger, "memberships", {}, limit=1)
    assert [(r["pool_id"], r["node"]) for r in rows] == sorted((r["pool_id"], r["node"]) for r in rows)
    assert {(r["node"], r["provider"], r["state"], r["blacklisted"]) for r in rows} == {
        (cast.alice_node.address, cast.alice.address, "left", False),
        (cast.bob_node.address, cast.bob.address, "slashed", False),
        (loop_world.stranger, None, None, True),
    }
    for row in rows:
        member = pool.get_member(row["pool_id"], row["node"])
        assert (row["state"] or "none", row["blacklisted"]) == (member.state.name.lower(), member.blacklisted)
        receipt = loop_world.w3.eth.get_transaction_receipt(row["tx_hash"])
        assert receipt["blockNumber"] == row["block_number"]

    by_bob = walk(chain_ledger, "memberships", {"provider": cast.bob.address.lower()}, limit=10)
    assert [(r["pool_id"], r["node"]) for r in by_bob] == [(loop.pool_id, cast.bob_node.address)]
    assert walk(chain_ledger, "memberships", {"state": "left"}, limit=10) == [
        r for r in rows if r["node"] == cast.alice_node.address
    ]
    assert walk(chain_ledger, "memberships", {"node": loop_world.stranger, "pool_id": loop.pool_id}, limit=10) == [
        r for r in rows if r["node"] == loop_world.stranger
    ]
    assert walk(chain_ledger, "memberships", {"pool_id": loop_world.second_pool}, limit=10) == []

    reply = chain_ledger.get("/v1/ledger/memberships", params={"format": "csv", "limit": 2})
    lines = list(csv.reader(io.StringIO(reply.text)))
    assert lines[0] == list(rows[0].keys())
    assert lines[1:] == [[csv_cell(r[c]) for c in lines[0]] for r in rows[:2]]
    json_page = chain_ledger.get("/v1/ledger/memberships", params={"limit": 2}).json()
    assert reply.headers["x-next-cursor"] == json_page["next_cursor"] is not None


def _ledger_fuzz_cases() -> list:
    """Every ledger operation in both schemathesis modes (valid and invalid inputs)."""
    import schemathesis
    from proofpool.backend.app import create_app
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
    ops = [result.ok() for result in schema.get_all_operations()]
    return [
        pytest.param(op, mode, id=f"{op.label}-{mode.value}")
        for op in ops
        if "ledger" in op.definition.raw.get("tags", [])
        for mode in GenerationMode
    ]


@pytest.mark.parametrize("operation, mode", _ledger_fuzz_cases())
def test_fuzzed_ledger_requests_never_get_a_server_error(operation, mode, ledger_api):
    """schemathesis against the OpenAPI document: no 5xx, and every answer (refusals included)
    has a documented status, content type and body."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        kwargs = case.as_transport_kwargs(base_url="http://testserver")
        response = ledger_api.request(case.method, case.formatted_path, params=kwargs.get("params"))
        checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
        case.validate_response(response, checks=checks)

    fuzz()
