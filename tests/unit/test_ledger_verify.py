"""The pure part of `proofpool ledger verify`: merging two key-ordered row streams into a diff,
and the reports made of it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from proofpool.backend.indexer.ledger_diff import Difference, LedgerDiff, TableDiff, diff_rows, render_text
from proofpool.backend.indexer.verify import scratch_name

COLUMNS = ("address", "active_stake", "tx_hash")
KEY = ("address",)
ALICE = ("0xAlice", Decimal(100), b"\x01")
BOB = ("0xBob", Decimal(50), b"\x02")
CAROL = ("0xCarol", Decimal(7), b"\x03")


def providers(chain, database, limit=20) -> TableDiff:
    return diff_rows("providers", KEY, COLUMNS, chain, database, limit)


def test_identical_rows_match():
    diff = providers([ALICE, BOB, CAROL], [ALICE, BOB, CAROL])
    assert diff.ok and diff.total == 0 and diff.differences == []
    assert (diff.chain_rows, diff.database_rows) == (3, 3)


def test_empty_tables_match():
    assert providers([], []).ok


def test_a_row_the_database_lacks_is_missing():
    diff = providers([ALICE, BOB, CAROL], [ALICE, CAROL])
    assert (diff.missing, diff.extra, diff.changed_rows, diff.total) == (1, 0, 0, 1)
    assert diff.differences == [
        Difference("providers", {"address": "0xBob"}, "missing", chain=dict(zip(COLUMNS, BOB, strict=True)))
    ]
    assert (diff.chain_rows, diff.database_rows) == (3, 2)


def test_a_row_the_chain_does_not_imply_is_extra():
    diff = providers([BOB], [ALICE, BOB, CAROL])
    assert (diff.missing, diff.extra, diff.total) == (0, 2, 2)
    assert [(d.kind, d.key) for d in diff.differences] == [
        ("extra", {"address": "0xAlice"}),
        ("extra", {"address": "0xCarol"}),
    ]
    assert diff.differences[0].database == dict(zip(COLUMNS, ALICE, strict=True))


def test_changed_columns_are_listed_one_by_one_with_both_values():
    tampered = ("0xBob", Decimal(49), b"\xff")
    diff = providers([ALICE, BOB], [ALICE, tampered])
    assert (diff.changed_rows, diff.changed_cells, diff.total) == (1, 2, 2)
    assert diff.differences == [
        Difference("providers", {"address": "0xBob"}, "changed", "active_stake", Decimal(50), Decimal(49)),
        Difference("providers", {"address": "0xBob"}, "changed", "tx_hash", b"\x02", b"\xff"),
    ]


def test_composite_keys_and_null_key_parts_merge_in_database_order():
    columns = ("pool_id", "work_key", "status")
    chain = [(1, b"\x01", "finalized"), (1, b"\x02", "pending"), (2, None, "accepted")]
    database = [(1, b"\x01", "pending"), (2, b"\x00", "accepted"), (2, None, "accepted")]
    diff = diff_rows("submissions", ("pool_id", "work_key"), columns, chain, database)
    assert [(d.kind, d.key, d.column) for d in diff.differences] == [
        ("changed", {"pool_id": 1, "work_key": b"\x01"}, "status"),
        ("missing", {"pool_id": 1, "work_key": b"\x02"}, None),
        ("extra", {"pool_id": 2, "work_key": b"\x00"}, None),
    ]


def test_the_listing_is_capped_but_the_counts_are_complete():
    chain = [(f"0x{i:04d}", Decimal(i), b"") for i in range(50)]
    diff = providers(chain, chain[:10], limit=5)
    assert diff.missing == 40 and len(diff.differences) == 5
    assert diff.differences[0].key == {"address": "0x0010"}


def test_rows_out_of_key_order_are_refused_not_misreported():
    with pytest.raises(ValueError, match="database rows are not in strictly ascending key order"):
        providers([ALICE, BOB], [BOB, ALICE])
    with pytest.raises(ValueError, match="chain rows"):
        providers([ALICE, ALICE], [ALICE])


def _ledger(*tables: TableDiff, problems: list[str] | None = None) -> LedgerDiff:
    return LedgerDiff(31337, "proofpool", 5, 90, 95, list(tables), problems or [], seconds=1.25)


def test_text_report_names_table_key_column_and_both_values():
    changed = diff_rows(
        "submissions",
        ("pool_id", "work_key"),
        ("pool_id", "work_key", "status"),
        [(1, b"\xab\xcd", "finalized")],
        [(1, b"\xab\xcd", "pending")],
    )
    gone = providers([ALICE, BOB], [ALICE])
    text = render_text(_ledger(changed, gone, providers([CAROL], [CAROL])))
    assert "MISMATCH: 2 differences in 2 of 3 tables" in text
    assert "changed  submissions [pool_id=1, work_key=0xabcd] status: chain 'finalized' != database 'pending'" in text
    assert "missing  providers [address='0xBob']: on the chain, not in the database" in text
    assert "providers: 2 rows from the chain, 1 in the database; 1 missing" in text
    assert "blocks 5..90 (chain head 95)" in text


def test_text_report_says_how_many_were_not_listed():
    chain = [(f"0x{i:04d}", Decimal(i), b"") for i in range(8)]
    text = render_text(_ledger(providers(chain, [], limit=3)))
    assert "... 5 more in providers (raise --limit to list them)" in text


def test_a_match_is_one_ok_line_and_problems_fail_the_verdict():
    matching = providers([ALICE], [ALICE])
    assert _ledger(matching).ok and "OK: the database matches the chain (1 rows)" in render_text(_ledger(matching))
    broken = _ledger(matching, problems=["the cursor is beyond the chain"])
    assert not broken.ok and "problem: the cursor is beyond the chain" in render_text(broken)


def test_json_report_is_exact_and_serialisable():
    when = datetime(2025, 1, 1, tzinfo=UTC)
    diff = diff_rows(
        "providers",
        KEY,
        ("address", "active_stake", "unbonding_matures_at", "tx_hash"),
        [("0xBob", Decimal(2**200), when, b"\x02")],
        [("0xBob", Decimal(1), None, b"\x02")],
    )
    out = json.loads(json.dumps(_ledger(diff).to_json()))
    assert out["ok"] is False and out["differences"] == 2
    table = out["tables"]["providers"]
    assert (table["changed_rows"], table["changed_cells"], table["listed"]) == (1, 2, 2)
    assert table["differences"][0] == {
        "table": "providers",
        "kind": "changed",
        "key": {"address": "0xBob"},
        "column": "active_stake",
        "chain": str(2**200),
        "database": "1",
    }
    assert table["differences"][1]["chain"] == "2025-01-01T00:00:00+00:00"
    assert table["differences"][1]["database"] is None


def test_scratch_names_fit_postgres_identifiers():
    assert scratch_name("proofpool").startswith("proofpool_verify_")
    long = scratch_name("x" * 80)
    assert len(long) == 63 and "_verify_" in long
    assert scratch_name("proofpool") != scratch_name("proofpool")
