"""Ledger cursors: opaque, round-trip exactly, and refuse anything the API did not issue."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proofpool.backend.db.ledger import InvalidCursor, decode_cursor, encode_cursor, page_sql

from proofpool.core.ledger_listings import MAX_CURSOR_CHARS, NODES, POOLS, REWARDS, SUBMISSIONS, Order

POSITIONS = st.integers(min_value=0, max_value=2**63 - 1)


@given(block=POSITIONS, log=POSITIONS)
def test_position_cursors_round_trip(block, log):
    cursor = encode_cursor(SUBMISSIONS, (block, log))
    assert decode_cursor(SUBMISSIONS, cursor) == (block, log)
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


ACCOUNTS = st.from_regex(r"0x[0-9a-fA-F]{40}", fullmatch=True)
"""Reward rows' accounts are addresses: arbitrary text of 128 characters (up to 512 UTF-8 bytes)
made cursors longer than the API accepts, a failure of the test's strategy, not of the ledger."""


@given(block=POSITIONS, log=POSITIONS, kind=st.sampled_from(["provider_reward", "withdrawal"]), account=ACCOUNTS)
def test_composite_cursors_round_trip(block, log, kind, account):
    assert decode_cursor(REWARDS, encode_cursor(REWARDS, (block, log, kind, account))) == (block, log, kind, account)


@given(st.text(max_size=MAX_CURSOR_CHARS + 10))
def test_arbitrary_text_is_refused_only_as_invalid_cursor(text):
    with contextlib.suppress(InvalidCursor):
        decode_cursor(SUBMISSIONS, text)


@pytest.mark.parametrize(
    "listing, cursor",
    [
        (SUBMISSIONS, ""),
        (SUBMISSIONS, "not base64 at all!"),
        (SUBMISSIONS, "A" * (MAX_CURSOR_CHARS + 1)),
        (NODES, encode_cursor(SUBMISSIONS, (5, 1))),  # another listing's cursor
        (SUBMISSIONS, encode_cursor(NODES, ("0xabc",))),
        (SUBMISSIONS, encode_cursor(SUBMISSIONS, (-1, 0))),
        (SUBMISSIONS, encode_cursor(SUBMISSIONS, (2**63, 0))),
        (SUBMISSIONS, encode_cursor(SUBMISSIONS, (True, 0))),  # JSON true is not a position
        (SUBMISSIONS, encode_cursor(SUBMISSIONS, ("5", 0))),
        (SUBMISSIONS, encode_cursor(SUBMISSIONS, (1.5, 0))),
        (POOLS, encode_cursor(POOLS, ("1",))),
        (NODES, encode_cursor(NODES, ("0x\x00",))),  # PostgreSQL text cannot hold NUL
        (NODES, encode_cursor(NODES, ("x" * 200,))),
    ],
)
def test_foreign_or_tampered_cursors_are_refused(listing, cursor):
    with pytest.raises(InvalidCursor):
        decode_cursor(listing, cursor)


@given(block=POSITIONS, log=POSITIONS)
def test_a_cursor_carries_its_order_and_resumes_only_that_walk(block, log):
    newest_first = encode_cursor(SUBMISSIONS, (block, log), Order.DESC)
    assert decode_cursor(SUBMISSIONS, newest_first, Order.DESC) == (block, log)
    with pytest.raises(InvalidCursor, match="order=desc, not order=asc"):
        decode_cursor(SUBMISSIONS, newest_first, Order.ASC)
    with pytest.raises(InvalidCursor, match="order=asc, not order=desc"):
        decode_cursor(SUBMISSIONS, encode_cursor(SUBMISSIONS, (block, log)), Order.DESC)


def test_a_cursor_with_an_unknown_order_is_refused():
    import base64

    raw = base64.urlsafe_b64encode(b'["submissions","sideways",1,2]').rstrip(b"=").decode()
    with pytest.raises(InvalidCursor, match="not one this API issued"):
        decode_cursor(SUBMISSIONS, raw)


def test_newest_first_walks_the_key_backwards():
    first = page_sql(SUBMISSIONS, frozenset({"pool_id"}), False, Order.DESC)
    later = page_sql(SUBMISSIONS, frozenset({"pool_id"}), True, Order.DESC)
    assert first.endswith("WHERE pool_id = %(pool_id)s ORDER BY block_number DESC, log_index DESC LIMIT %(limit)s")
    assert "(block_number, log_index) < (%(after_0)s, %(after_1)s)" in later
    rewards = page_sql(REWARDS, frozenset(), True, Order.DESC)
    assert rewards.endswith(
        "WHERE (block_number, log_index, kind, account) < (%(after_0)s, %(after_1)s, %(after_2)s, %(after_3)s) "
        "ORDER BY block_number DESC, log_index DESC, kind DESC, account DESC LIMIT %(limit)s"
    )


def test_page_queries_use_keyset_never_offset():
    first = page_sql(SUBMISSIONS, frozenset({"pool_id", "status"}), False)
    later = page_sql(SUBMISSIONS, frozenset({"pool_id", "status"}), True)
    assert "OFFSET" not in first.upper() and "OFFSET" not in later.upper()
    assert "(block_number, log_index) > (%(after_0)s, %(after_1)s)" in later
    assert later.endswith("ORDER BY block_number, log_index LIMIT %(limit)s")
    assert "pool_id = %(pool_id)s AND status = %(status)s" in first


def test_a_time_window_becomes_a_block_range_walked_in_key_order():
    sql = page_sql(SUBMISSIONS, frozenset({"since", "until", "status"}), True)
    assert "block_number >= COALESCE((SELECT f.block_number FROM submissions f" in sql
    assert "block_number <= COALESCE((SELECT l.block_number FROM submissions l" in sql
    assert sql.endswith("ORDER BY block_number, log_index LIMIT %(limit)s")
