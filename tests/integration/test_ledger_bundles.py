"""Bundles in the public ledger on a real PostgreSQL (the seeded data set, tests/fixtures/ledger.py,
where every 8th submission is a bundle): the API's submission items and detail carry `files` (null
for a single file), CSV holds them as JSON text, the schema documents them, and the CLI shows the
file count in its table and a bundle's files in full in `ledger submission`."""

from __future__ import annotations

import csv
import io
import json

import pytest
from proofpool.cli.main import app
from typer.testing import CliRunner

from tests.fixtures.ledger import BUNDLE_EVERY


@pytest.fixture
def bundles(ledger_db) -> list[dict]:
    _, data = ledger_db
    found = [row for row in data.submissions if row["files"] is not None]
    assert len(found) == len(data.submissions) // BUNDLE_EVERY
    return found


def test_submission_items_carry_a_bundles_files_in_order(ledger_api, ledger_db, bundles):
    _, data = ledger_db
    served = ledger_api.get("/v1/ledger/submissions", params={"limit": 1000}).json()["items"]
    assert served == data.submissions
    by_key = {row["work_key"]: row for row in served}
    for bundle in bundles:
        files = by_key[bundle["work_key"]]["files"]
        assert files == bundle["files"] and 2 <= len(files) <= 4
        assert [f["work_key"] for f in files] == sorted(f["work_key"] for f in files)
        assert by_key[bundle["work_key"]]["work_units"] == sum(f["work_units"] for f in files)
    assert sum(row["files"] is None for row in served) == len(served) - len(bundles)


def test_the_detail_of_a_bundle_has_its_files(ledger_api, bundles):
    bundle = bundles[0]
    reply = ledger_api.get(f"/v1/ledger/submissions/{bundle['pool_id']}/{bundle['work_key']}")
    assert reply.status_code == 200, reply.text
    assert reply.json()["submission"] == bundle


def test_csv_holds_the_files_as_json_text(ledger_api, ledger_db, bundles):
    _, data = ledger_db
    reply = ledger_api.get("/v1/ledger/submissions", params={"limit": 1000, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(reply.text)))
    assert [r["work_key"] for r in rows] == [r["work_key"] for r in data.submissions]
    cells = {r["work_key"]: r["files"] for r in rows}
    for bundle in bundles:
        assert json.loads(cells[bundle["work_key"]]) == bundle["files"]
    single = next(r for r in data.submissions if r["files"] is None)
    assert cells[single["work_key"]] == ""


def test_the_schema_documents_the_files_of_a_bundle(ledger_api):
    schemas = ledger_api.app.openapi()["components"]["schemas"]
    files = schemas["SubmissionRow"]["properties"]["files"]
    assert files["anyOf"][0]["items"]["$ref"].endswith("/BundleFile")
    assert {"type": "null"} in files["anyOf"]
    assert set(schemas["BundleFile"]["properties"]) == {"work_key", "work_units"}
    assert schemas["BundleFile"]["required"] == ["work_key", "work_units"]


def test_the_cli_table_shows_the_file_count_and_the_detail_every_file(ledger_server, bundles):
    runner = CliRunner(env={"COLUMNS": "250"})
    bundle = bundles[0]
    listed = runner.invoke(
        app, ["ledger", "submissions", "--pool-id", str(bundle["pool_id"]), "--backend-url", ledger_server]
    )
    assert listed.exit_code == 0, listed.output
    header = next(line for line in listed.stdout.splitlines() if "work_key" in line)
    assert header.split().index("files") == header.split().index("work_units") + 1
    row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{bundle['pool_id']} ") and
               line.split()[1] == f"{bundle['work_key'][:8]}…{bundle['work_key'][-4:]}")  # fmt: skip
    assert row.split()[header.split().index("files")] == str(len(bundle["files"]))

    detail = runner.invoke(
        app, ["ledger", "submission", str(bundle["pool_id"]), bundle["work_key"], "--backend-url", ledger_server]
    )
    assert detail.exit_code == 0, detail.output
    assert f"files of the bundle ({len(bundle['files'])})" in detail.stdout
    for file in bundle["files"]:
        assert file["work_key"] in detail.stdout  # in full: the key the file is stored under
