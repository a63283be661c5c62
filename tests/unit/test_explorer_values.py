"""How the explorer reads ids from URLs and writes the ledger's values: amounts exact in POOL, hashes
shortened with the full value kept, every cell's raw value as the API's CSV writes it."""

from __future__ import annotations

import pytest
from proofpool.explorer import format as fmt
from proofpool.explorer import links
from proofpool.explorer.errors import BadInput
from proofpool.explorer.params import parse_address, parse_pool_id, parse_position, parse_work_key
from proofpool.explorer.tables import Col, Show, Table, cell

from proofpool.core.ledger_listings import csv_cell

CHECKSUMMED = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"


@pytest.mark.parametrize("text", [CHECKSUMMED, CHECKSUMMED.lower(), "0x" + CHECKSUMMED[2:].upper()])
def test_an_address_in_any_single_case_or_checksummed_is_read_checksummed(text: str) -> None:
    assert parse_address(text) == CHECKSUMMED


@pytest.mark.parametrize(
    "text, says",
    [
        ("0x15d34aaF54267DB7D7c367839AAf71A00a2C6A65", "wrong checksum"),
        ("0x1234", "not an address"),
        ("15d34AAf54267DB7D7c367839AAf71A00a2C6A65", "not an address"),
        ("0x" + "g" * 40, "not an address"),
    ],
)
def test_a_malformed_or_mistyped_address_is_refused(text: str, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        parse_address(text)


def test_work_keys_pool_ids_and_positions() -> None:
    assert parse_work_key("0x" + "AB" * 32) == "0x" + "ab" * 32
    assert parse_pool_id("0") == 0 and parse_pool_id(str(2**63 - 1)) == 2**63 - 1
    assert parse_position("1200-3") == (1200, 3)
    for bad, parse in [
        ("0x" + "ab" * 31, parse_work_key),
        (str(2**63), parse_pool_id),
        ("-1", parse_pool_id),
        ("1.5", parse_pool_id),
        ("12", parse_position),
        ("a-b", parse_position),
    ]:
        with pytest.raises(BadInput):
            parse(bad)


@pytest.mark.parametrize(
    "units, text",
    [
        ("0", "0 POOL"),
        ("1", "0.000000000000000001 POOL"),
        (str(25 * 10**16), "0.25 POOL"),
        (str(2**256 - 1), "115792089237316195423570985008687907853269984665640564039457.584007913129639935 POOL"),
    ],
)
def test_amounts_are_exact_in_pool(units: str, text: str) -> None:
    assert fmt.tokens(units) == text


def test_raw_values_are_written_as_the_api_csv_writes_them() -> None:
    files = [{"work_key": "0xab", "work_units": 7}]
    assert [csv_cell(v) for v in (None, True, False, 3, "x", files)] == [
        "",
        "true",
        "false",
        "3",
        "x",
        '[{"work_key":"0xab","work_units":7}]',
    ]


def test_a_cell_keeps_the_raw_value_and_writes_it_for_people() -> None:
    tx = "0x" + "ab" * 32
    row = {"pool_id": 3, "work_key": tx, "amount": str(10**18), "files": None, "at": "2025-01-01T00:20:00Z"}
    work = cell(Col("work_key", "Work key", Show.HASH, links.to_submission), row)
    assert (work.value, work.text, work.title, work.href) == (tx, "0xababab…abab", tx, f"/submissions/3/{tx}")
    amount = cell(Col("amount", "Amount", Show.AMOUNT), row)
    assert (amount.value, amount.text, amount.numeric) == (str(10**18), "1 POOL", True)
    assert cell(Col("files", "Files", Show.FILES), row).text == "1"
    assert cell(Col("at", "At", Show.TIME), row).text == "2025-01-01 00:20:00 UTC"
    missing = cell(Col("reason", "Reason", Show.TEXT, links.to_pool()), row)
    assert (missing.value, missing.text, missing.href) == ("", "—", None)


def test_a_table_csv_holds_exactly_its_columns_and_rows() -> None:
    rows = [{"a": 1, "b": None, "c": "hidden"}, {"a": 2, "b": True, "c": "hidden"}]
    table = Table("t", "T", (Col("a", "A", Show.COUNT), Col("b", "B", Show.BOOL)), rows)
    assert table.csv() == "a,b\n1,\n2,true\n"


def test_accounts_link_to_the_page_of_their_role() -> None:
    assert links.account("provider_reward", CHECKSUMMED) == f"/providers/{CHECKSUMMED}"
    assert links.account("verdict", CHECKSUMMED) == f"/validators/{CHECKSUMMED}"
    assert links.account("submission", CHECKSUMMED) == f"/nodes/{CHECKSUMMED}"
    assert links.account("withdrawal", CHECKSUMMED) is None
