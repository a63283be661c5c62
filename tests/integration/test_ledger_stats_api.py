"""The statistics listings (`pool_stats`, `contributors`, `validator_stats`) through the public
ledger API and `proofpool ledger`, over the seeded ledger (tests/fixtures/ledger.py): the database's
triggers filled them while the data set was written, and every expected row is recomputed from
the data set's Python lists."""

from __future__ import annotations

import csv
import io
import json

import pytest
from proofpool.backend.api.ledger import csv_cell
from proofpool.backend.db.ledger import SUBMISSIONS, encode_cursor
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.core.ledger_listings import POOL_STATS, STATISTICS, Kind
from tests.integration.test_api_ledger import walk


@pytest.mark.parametrize("listing", STATISTICS, ids=lambda listing: listing.name)
def test_every_row_is_served_once_in_key_order_with_json_types_of_its_kind(ledger_api, ledger_db, listing):
    _, data = ledger_db
    expected = data.listing(listing.name)
    assert len(expected) >= 2  # so limit=1 pages through cursors
    for limit in (1, 7, 1000):
        assert walk(ledger_api, listing.name, {}, limit=limit) == expected, limit
    for column in listing.columns:
        kind = {Kind.INT: int, Kind.AMOUNT: str, Kind.ADDRESS: str}[column.kind]
        assert all(type(row[column.name]) is kind for row in expected), column.name


def test_the_statistics_add_up_to_the_lists_they_sum(ledger_api, ledger_db):
    """What a dashboard shows from one row equals what it would count by walking the lists."""
    _, data = ledger_db
    for pool in walk(ledger_api, "pool_stats", {}, limit=1000):
        pool_id = pool["pool_id"]
        invalid = walk(ledger_api, "submissions", {"pool_id": pool_id, "status": "invalid"}, limit=1000)
        assert pool["invalid"] == len(invalid) > 0
        slashes = walk(ledger_api, "slashes", {"pool_id": pool_id}, limit=1000)
        assert int(pool["slashed"]) == sum(int(s["amount"]) for s in slashes)
        paid = walk(ledger_api, "rewards", {"pool_id": pool_id, "kind": "provider_reward"}, limit=1000)
        assert int(pool["rewards_paid"]) == sum(int(r["amount"]) for r in paid) > 0
        board = walk(ledger_api, "contributors", {"pool_id": pool_id}, limit=1000)
        assert sum(row["submissions"] for row in board) == pool["submissions"]
        assert sum(int(row["rewards"]) for row in board) == int(pool["rewards_paid"])
        assert sum(row["work_units_accepted"] for row in board) == pool["work_units_accepted"] > 0
    bundles = [r for r in data.submissions if r["files"] is not None]
    assert sum(p["files"] - p["submissions"] for p in data.pool_stats) == sum(len(r["files"]) - 1 for r in bundles) > 0


@pytest.mark.parametrize(
    "name, filters",
    [
        ("pool_stats", {"pool_id": 2}),
        ("contributors", {"pool_id": 1}),
        ("contributors", {"node": "first node"}),
        ("contributors", {"provider": "first provider"}),
        ("contributors", {"pool_id": 3, "provider": "first provider"}),
        ("validator_stats", {"validator": "first validator"}),
    ],
)
def test_filters_return_exactly_the_matching_rows(ledger_api, ledger_db, name, filters):
    _, data = ledger_db
    first = data.submissions[0]
    named = {"first node": first["node"], "first provider": first["provider"]}
    named["first validator"] = data.verdicts[0]["validator"]
    filters = {key: named.get(value, value) for key, value in filters.items()}
    expected = [row for row in data.listing(name) if all(row[k] == v for k, v in filters.items())]
    assert expected
    lowercase = {k: v.lower() if isinstance(v, str) else v for k, v in filters.items()}  # addresses in any case
    assert walk(ledger_api, name, lowercase, limit=2) == expected


@pytest.mark.parametrize("listing", STATISTICS, ids=lambda listing: listing.name)
def test_csv_holds_the_json_rows_and_cursor(ledger_api, listing):
    json_page = ledger_api.get(f"/v1/ledger/{listing.name}", params={"limit": 1}).json()
    reply = ledger_api.get(f"/v1/ledger/{listing.name}", params={"limit": 1, "format": "csv"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/csv")
    header, *body = list(csv.reader(io.StringIO(reply.text)))
    assert header == [column.name for column in listing.columns]
    assert body == [[csv_cell(item[column]) for column in header] for item in json_page["items"]]
    assert reply.headers["x-next-cursor"] == json_page["next_cursor"] is not None


@pytest.mark.parametrize(
    "name, params",
    [
        ("pool_stats", {"pool": "1"}),
        ("pool_stats", {"status": "pending"}),
        ("contributors", {"node": "0x1234"}),
        ("contributors", {"pool_id": "-1"}),
        ("contributors", {"cursor": encode_cursor(SUBMISSIONS, (1, 0))}),
        ("validator_stats", {"validator": "not-an-address"}),
        ("validator_stats", {"cursor": encode_cursor(POOL_STATS, (1,))}),
    ],
)
def test_bad_queries_are_422(ledger_api, name, params):
    reply = ledger_api.get(f"/v1/ledger/{name}", params=params)
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"] in {"invalid_request", "invalid_cursor"}


def test_the_cli_prints_them(ledger_server, ledger_db):
    _, data = ledger_db
    runner = CliRunner(env={"COLUMNS": "250"})

    def ledger(*args: str) -> str:
        result = runner.invoke(app, ["ledger", *args, "--backend-url", ledger_server])
        assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
        return result.stdout

    node = data.submissions[0]["node"]
    out = json.loads(ledger("contributors", "--node", node.lower(), "--limit", "1", "--all", "--json"))
    assert out == {"items": [r for r in data.contributors if r["node"] == node], "next_cursor": None}
    table = ledger("pool_stats")
    assert f"pool_stats ({len(data.pool_stats)} rows)" in table and "rewards_paid" in table
    rows = list(csv.DictReader(io.StringIO(ledger("validator_stats", "--csv"))))
    assert [r["validator"] for r in rows] == [r["validator"] for r in data.validator_stats]
