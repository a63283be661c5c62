"""The review store on a real PostgreSQL: which rejections a validator queues for review, the
hand-out again of a lost review, and the one-way state changes of a review row."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import psycopg
import pytest
from eth_account import Account
from proofpool.validator import review_store, store
from proofpool.validator.review_store import Review

from proofpool.infra.chain.anvil import ANVIL_KEYS
from tests.fixtures.postgres import migrated_database

ME = Account.from_key(ANVIL_KEYS[3]).address
OTHER = Account.from_key(ANVIL_KEYS[8]).address
NODE, PROVIDER = Account.from_key(ANVIL_KEYS[5]).address, Account.from_key(ANVIL_KEYS[6]).address
LEASE = 300.0


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with migrated_database("proofpool_test_reviews") as database:
        yield database


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("TRUNCATE reviews, validations, submissions")
        yield connection


def key(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def submission(conn: psycopg.Connection, work_key: bytes, status: str, *, node: str = NODE, block: int = 10) -> None:
    conn.execute(
        "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,"
        " submitted_at, block_number, tx_hash, log_index, status_block) VALUES (1, %s, %s, %s, 8, 0, %s, now(), 1,"
        " %s, 0, %s)",
        (work_key, node, PROVIDER, status, b"\x55" * 32, block),
    )


def test_queues_other_validators_rejections_once(conn: psycopg.Connection) -> None:
    theirs, ours, own_node, pending = key("theirs"), key("ours"), key("own-node"), key("pending")
    submission(conn, theirs, "rejected", block=12)
    submission(conn, ours, "rejected")
    submission(conn, own_node, "rejected", node=ME)
    submission(conn, pending, "pending")
    # `ours` is our own rejection: we decided it invalid
    assert store.claim(conn, 1, ours, ME, lease_seconds=LEASE) is not None
    assert store.record_decision(conn, 1, ours, ME, "invalid", "made_up", {})

    queued = review_store.to_review(conn, ME, lease_seconds=LEASE)

    assert queued == [Review(1, theirs, 12)]
    assert review_store.to_review(conn, ME, lease_seconds=LEASE) == []  # handed out once
    # Another validator reviews all three: none is its rejection or its node's work.
    assert {r.work_key for r in review_store.to_review(conn, OTHER, lease_seconds=LEASE)} == {theirs, ours, own_node}


def test_a_second_rejection_of_the_same_file_is_a_new_review(conn: psycopg.Connection) -> None:
    work_key = key("twice")
    submission(conn, work_key, "rejected", block=20)
    (first,) = review_store.to_review(conn, ME, lease_seconds=LEASE)
    conn.execute("UPDATE submissions SET status_block = 30")  # overturned, then rejected again
    (second,) = review_store.to_review(conn, ME, lease_seconds=LEASE)
    assert (first.rejected_block, second.rejected_block) == (20, 30)


def test_a_lost_review_is_handed_out_again_after_a_lease(conn: psycopg.Connection) -> None:
    submission(conn, key("lost"), "rejected")
    (queued,) = review_store.to_review(conn, ME, lease_seconds=LEASE)
    conn.execute("UPDATE reviews SET queued_at = now() - interval '301 seconds'")
    assert review_store.to_review(conn, ME, lease_seconds=LEASE) == [queued]
    assert review_store.to_review(conn, ME, lease_seconds=LEASE) == []  # re-stamped


def test_review_states_move_one_way(conn: psycopg.Connection) -> None:
    submission(conn, key("states"), "rejected")
    (review,) = review_store.to_review(conn, ME, lease_seconds=LEASE)
    evidence = hashlib.sha256(b"recomputed").digest()
    assert review_store.decide(conn, review, ME, "contest", None, evidence)
    assert not review_store.decide(conn, review, ME, "upheld", "made_up", evidence)  # decided once
    assert review_store.by_state(conn, ME, "contest") == [Review(1, review.work_key, 10, "contest", evidence)]
    assert review_store.mark_sent(conn, review, ME, b"\x01" * 32)
    assert not review_store.mark_skipped(conn, review, ME, "too late")  # sent: not skippable any more
    assert review_store.mark_settled(conn, review, ME, "on-chain ACCEPTED")
    assert review_store.get(conn, review, ME).state == "settled"
    with pytest.raises(psycopg.errors.CheckViolation):  # a contest always carries its evidence
        conn.execute("UPDATE reviews SET state = 'contest', evidence_sha256 = NULL")
