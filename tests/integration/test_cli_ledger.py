"""`proofpool ledger ...` against the real backend served by uvicorn on loopback, as an auditor
would type it."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from proofpool.cli.ledger import LedgerRefused, format_tokens
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.core.errors import ServiceUnavailable
from tests.fixtures.ledger import SPEC_POOL


@pytest.fixture
def ledger_cli(ledger_server):
    runner = CliRunner(env={"COLUMNS": "250"})

    def invoke(*args: str, fails: type[Exception] | None = None):
        result = runner.invoke(app, ["ledger", *args, "--backend-url", ledger_server])
        if fails is not None:
            assert isinstance(result.exception, fails), result.output
            return result.exception
        assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
        return result.stdout

    return invoke


def test_all_follows_cursors_to_every_row(ledger_cli, ledger_db):
    _, data = ledger_db
    out = json.loads(ledger_cli("submissions", "--limit", "17", "--all", "--json"))
    assert out == {"items": data.submissions, "next_cursor": None}


def test_one_page_and_its_cursor_continue_where_it_stopped(ledger_cli, ledger_db):
    _, data = ledger_db
    first = json.loads(ledger_cli("verdicts", "--limit", "3", "--json"))
    assert first["items"] == data.verdicts[:3]
    second = json.loads(ledger_cli("verdicts", "--limit", "3", "--cursor", first["next_cursor"], "--json"))
    assert second["items"] == data.verdicts[3:6]


def test_filters_are_passed_as_options(ledger_cli, ledger_db):
    _, data = ledger_db
    provider = data.submissions[0]["provider"]
    out = json.loads(
        ledger_cli("submissions", "--pool-id", "2", "--provider", provider.lower(), "--status", "pending", "--json")
    )
    assert out["items"] == [
        r for r in data.submissions if r["pool_id"] == 2 and r["provider"] == provider and r["status"] == "pending"
    ]
    out = json.loads(ledger_cli("rewards", "--kind", "withdrawal", "--json"))
    assert [r["kind"] for r in out["items"]] == ["withdrawal"]
    out = json.loads(ledger_cli("validators", "--revoked", "--json"))
    assert [v["active"] for v in out["items"]] == [False]


def test_newest_first_walks_backwards_and_its_cursor_continues_backwards(ledger_cli, ledger_db):
    _, data = ledger_db
    out = json.loads(ledger_cli("submissions", "--newest-first", "--limit", "23", "--all", "--json"))
    assert out == {"items": data.submissions[::-1], "next_cursor": None}
    first = json.loads(ledger_cli("verdicts", "--newest-first", "--limit", "2", "--json"))
    second = json.loads(
        ledger_cli("verdicts", "--newest-first", "--limit", "2", "--cursor", first["next_cursor"], "--json")
    )
    assert first["items"] + second["items"] == data.verdicts[::-1][:4]
    refused = ledger_cli("verdicts", "--limit", "2", "--cursor", first["next_cursor"], fails=LedgerRefused)
    assert refused.error == "invalid_cursor" and "order=desc" in str(refused)
    rows = list(csv.DictReader(io.StringIO(ledger_cli("rewards", "--newest-first", "--all", "--csv", "--limit", "9"))))
    assert [r["tx_hash"] for r in rows] == [r["tx_hash"] for r in data.rewards[::-1]]


def test_lookups_by_key_transaction_and_file(ledger_cli, ledger_db):
    _, data = ledger_db
    node = data.nodes[3]
    assert json.loads(ledger_cli("nodes", "--address", node["address"].lower(), "--json"))["items"] == [node]
    finalized = next(r for r in data.submissions if r["status"] == "finalized")
    credits = json.loads(ledger_cli("rewards", "--tx-hash", finalized["status_tx_hash"], "--json"))["items"]
    assert sorted(r["kind"] for r in credits) == ["provider_reward", "validator_fee"]
    bundle = next(r for r in data.submissions if r["files"])
    found = json.loads(ledger_cli("submissions", "--file", bundle["files"][-1]["work_key"], "--json"))["items"]
    assert found == [bundle]
    refused = ledger_cli("submissions", "--tx-hash", "0x1234", fails=LedgerRefused)
    assert refused.status == 422 and "tx_hash" in str(refused)


def test_csv_with_all_has_one_header_and_every_row(ledger_cli, ledger_db):
    _, data = ledger_db
    rows = list(csv.DictReader(io.StringIO(ledger_cli("rewards", "--limit", "4", "--all", "--csv"))))
    assert [(r["block_number"], r["kind"], r["account"]) for r in rows] == [
        (str(r["block_number"]), r["kind"], r["account"]) for r in data.rewards
    ]
    assert rows[-1]["pool_id"] == ""  # a withdrawal has no pool


def test_table_shows_amounts_in_tokens_and_short_hashes(ledger_cli, ledger_db):
    _, data = ledger_db
    out = ledger_cli("pools")
    assert "pools (3 rows)" in out
    pool = data.pools[0]
    assert f"{pool['manager'][:8]}…{pool['manager'][-4:]}" in out and pool["manager"] not in out
    assert " 50 " in out and format_tokens(int(pool["budget"])) in out
    spec = next(p["spec_sha256"] for p in data.pools if p["pool_id"] == SPEC_POOL)
    assert f"{spec[:8]}…{spec[-4:]}" in out  # the spec pool's hash, shortened like every hash
    invalid = next(r for r in data.submissions if r["status"] == "invalid")
    detail = ledger_cli("submission", str(invalid["pool_id"]), invalid["work_key"])
    assert "submissions (1 rows)" in detail and "sampling_mismatch" in detail and "slashes (1 rows)" in detail


def test_format_tokens_is_exact_for_any_uint256():
    assert (
        format_tokens(2**256 - 1) == "115792089237316195423570985008687907853269984665640564039457.584007913129639935"
    )
    assert format_tokens(1) == "0.000000000000000001"
    assert format_tokens(250_500_000_000_000_000_000) == "250.5"


def test_refusals_name_the_bad_filter(ledger_cli):
    refused = ledger_cli("submissions", "--provider", "0x1234", fails=LedgerRefused)
    assert refused.status == 422 and "provider" in str(refused)
    missing = ledger_cli("submission", "1", "0x" + "00" * 32, fails=LedgerRefused)
    assert missing.status == 404 and missing.error == "submission_not_found"


def test_unreachable_backend_is_one_line_naming_the_url():
    result = CliRunner().invoke(app, ["ledger", "pools", "--backend-url", "http://127.0.0.1:9"])
    assert isinstance(result.exception, ServiceUnavailable)
    assert "http://127.0.0.1:9" in str(result.exception)
    proc = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "ledger", "pools", "--backend-url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: backend not reachable at http://127.0.0.1:9 (ConnectError); is it running?"
    ]


def test_every_listing_has_its_command_memberships_included(ledger_cli):
    """The commands are made from the listings' table, so memberships (API-only before) has one."""
    out = json.loads(ledger_cli("memberships", "--pool-id", "1", "--state", "active", "--json"))
    assert out == {"items": [], "next_cursor": None}  # the seeded ledger holds no memberships
