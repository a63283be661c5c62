"""`proofpool ledger <list>` for people: an empty page says "0 rows", and the table fits the
terminal without cutting a header or a value (columns that do not fit are left out and named).
Against a fake backend: a loopback HTTP server answering `/v1/ledger/<list>` with given rows."""

from __future__ import annotations

import csv
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.core.ledger_listings import LISTINGS, Column, Kind, Listing

ADDRESS = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
HASH = "0x" + "ab" * 32
SAMPLES: dict[Kind, Any] = {
    Kind.ADDRESS: ADDRESS,
    Kind.AMOUNT: "250500000000000000000",
    Kind.UINT256: "12",
    Kind.INT: 123456,
    Kind.FLOAT: 0.123456789,
    Kind.BOOL: True,
    Kind.TEXT: "s3://proofpool/pools/1/checkpoints/3",
    Kind.TIMESTAMP: "2026-11-26T20:11:30Z",
    Kind.HASH: HASH,
    Kind.FILES: [{"work_key": HASH, "work_units": 42}, {"work_key": HASH, "work_units": 7}],
}


def _value(column: Column) -> Any:
    return column.values[0] if column.kind is Kind.ENUM else SAMPLES[column.kind]


def _row(listing: Listing) -> dict[str, Any]:
    """A row as the API serves it: every column of the listing, a typical value of its kind."""
    return {column.name: _value(column) for column in listing.columns}


class FakeLedger(ThreadingHTTPServer):
    """Serves `rows[list]` as one JSON page, or as CSV with `format=csv`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.rows: dict[str, list[dict[str, Any]]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLedger

    def do_GET(self) -> None:
        url = urlparse(self.path)
        name = url.path.removeprefix("/v1/ledger/")
        rows = self.server.rows.get(name, [])
        if parse_qs(url.query).get("format") == ["csv"]:
            out = io.StringIO()
            writer = csv.DictWriter(out, [column.name for column in LISTINGS[name].columns])
            writer.writeheader()
            writer.writerows(rows)
            self._reply(out.getvalue().encode(), "text/csv")
        else:
            self._reply(json.dumps({"items": rows, "next_cursor": None}).encode(), "application/json")

    def _reply(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[FakeLedger]:
    server = FakeLedger()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def ledger(backend: FakeLedger, *args: str, columns: int = 80) -> tuple[str, str]:
    """(stdout, stderr) of `proofpool ledger ARGS` in a terminal `columns` wide."""
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(app, ["ledger", *args, "--backend-url", backend.url])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.stdout, result.stderr


def test_an_empty_page_says_0_rows_but_json_and_csv_stay_data(backend: FakeLedger) -> None:
    assert ledger(backend, "submissions") == ("submissions (0 rows)\n", "")
    out, _ = ledger(backend, "submissions", "--json")
    assert json.loads(out) == {"items": [], "next_cursor": None}
    out, _ = ledger(backend, "submissions", "--csv")
    assert out.splitlines() == [",".join(column.name for column in LISTINGS["submissions"].columns)]


@pytest.mark.parametrize("listing", LISTINGS.values(), ids=LISTINGS)
def test_at_80_columns_the_table_fits_and_no_header_or_value_is_cut(backend: FakeLedger, listing: Listing) -> None:
    backend.rows[listing.name] = [_row(listing), _row(listing)]
    out, err = ledger(backend, listing.name)
    lines = out.splitlines()
    assert lines[0].strip() == f"{listing.name} (2 rows)"
    assert max(len(line) for line in lines) <= 80, out
    headers = lines[1].split()
    left_out = err.partition("columns: ")[2].partition(" (")[0].split(", ") if err else []
    assert headers + left_out == list(listing.shown), (out, err)  # every shown column: whole, or named
    assert headers, "at least the first column is shown"
    cells = " ".join(lines[3:])
    for name in headers:
        column = listing.column(name)
        if column.kind in (Kind.ADDRESS, Kind.HASH):
            assert f"{_value(column)[:8]}…{_value(column)[-4:]}" in cells.split(), name
        elif column.kind is Kind.TIMESTAMP:
            assert "2026-11-26" in cells and "20:11:30" in cells
        elif column.kind is Kind.AMOUNT:
            assert "250.5" in cells.split()
        elif column.kind is Kind.FLOAT:
            assert "0.123457" in cells.split()  # six significant digits


def test_submissions_at_80_columns_leave_out_the_last_columns_and_say_so(backend: FakeLedger) -> None:
    backend.rows["submissions"] = [_row(LISTINGS["submissions"])]
    out, err = ledger(backend, "submissions")
    header = ["pool_id", "work_key", "node", "status", "work_units", "files", "submitted_at"]
    assert out.splitlines()[1].split() == header
    assert err.split("\n")[0].startswith("left out to fit 80 columns: block_number, tx_hash")


def test_a_wide_terminal_shows_every_shown_column(backend: FakeLedger) -> None:
    backend.rows["submissions"] = [_row(LISTINGS["submissions"])]
    out, err = ledger(backend, "submissions", columns=200)
    assert out.splitlines()[1].split() == list(LISTINGS["submissions"].shown)
    assert "2026-11-26 20:11:30" in out and err == ""
