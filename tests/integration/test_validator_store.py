"""The verdict store on a real PostgreSQL: claim and lease rules, one decision per key, the
batching rule of `due_verdicts`, the flusher's row updates and the status counts."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from eth_account import Account
from proofpool.validator import store
from proofpool.validator.checks import Verdict
from proofpool.validator.pipeline import first_of_its_batch
from proofpool.validator.store import Key
from proofpool.validator.submissions import IndexedSubmission

from proofpool.infra.chain.anvil import ANVIL_KEYS
from tests.fixtures.postgres import migrated_database

A = Account.from_key(ANVIL_KEYS[3]).address
B = Account.from_key(ANVIL_KEYS[8]).address
POOL, OTHER_POOL = 1, 2
LEASE = 300.0


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with migrated_database("proofpool_test_vstore") as database:
        yield database


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to an empty `validations` table (each statement stands alone, as
    in a task that claims in one transaction and decides in another)."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("TRUNCATE validations, batch_claims")
        yield connection


def key(i: int, tag: str = "") -> bytes:
    return hashlib.sha256(f"store-{tag}-{i}".encode()).digest()


def expire_lease(conn: psycopg.Connection, pool_id: int, work_key: bytes) -> None:
    """What time does to a lease, without waiting for it."""
    conn.execute(
        "UPDATE validations SET lease_until = now() - interval '1 second' WHERE pool_id = %s AND work_key = %s",
        (pool_id, work_key),
    )


def decide(
    conn: psycopg.Connection,
    keys: list[bytes],
    verdict: store.VerdictKind = "accepted",
    *,
    pool_id: int = POOL,
    validator: str = A,
    reason: str | None = None,
) -> None:
    for work_key in keys:
        assert store.claim(conn, pool_id, work_key, validator, lease_seconds=LEASE) is not None
        assert store.record_decision(conn, pool_id, work_key, validator, verdict, reason, {"checks": "all"})


def decided_at(conn: psycopg.Connection, pool_id: int = POOL) -> list[datetime]:
    rows = conn.execute(
        "SELECT decided_at FROM validations WHERE pool_id = %s AND state = 'decided' ORDER BY decided_at", (pool_id,)
    ).fetchall()
    return [r[0] for r in rows]


def row(conn: psycopg.Connection, work_key: bytes, pool_id: int = POOL) -> dict:
    cur = conn.execute("SELECT * FROM validations WHERE pool_id = %s AND work_key = %s", (pool_id, work_key))
    names = [d.name for d in cur.description]
    values = cur.fetchone()
    assert values is not None
    return dict(zip(names, values, strict=True))


# --- claims ------------------------------------------------------------------------------------


def test_first_claim_wins_and_others_get_none(conn):
    first = store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    assert first is not None
    assert (first.validator, first.state, first.verdict, first.decided) == (A, "claimed", None, False)
    assert first.lease_until - first.claimed_at == timedelta(seconds=LEASE)

    assert store.claim(conn, POOL, key(1), B, lease_seconds=LEASE) is None
    assert row(conn, key(1))["validator"] == A
    # the same work key in another pool is another submission
    assert store.claim(conn, OTHER_POOL, key(1), B, lease_seconds=LEASE) is not None


def test_claimed_elsewhere_says_how_long_an_undecided_claim_holds(conn):
    """What a second validator's task uses to retry instead of dropping a key whose owner may
    have died mid-task (the drill: SIGKILL a validator while it validates)."""
    assert store.claimed_elsewhere(conn, POOL, key(1)) is None  # nobody has it
    assert store.claim(conn, POOL, key(1), A, lease_seconds=LEASE) is not None
    held = store.claimed_elsewhere(conn, POOL, key(1))
    assert held is not None and LEASE - 5 < held <= LEASE
    expire_lease(conn, POOL, key(1))
    held = store.claimed_elsewhere(conn, POOL, key(1))
    assert held is not None and held <= 0  # expired: the retry takes it over
    assert store.claim(conn, POOL, key(1), B, lease_seconds=LEASE) is not None
    assert store.record_decision(conn, POOL, key(1), B, "accepted", None, {})
    assert store.claimed_elsewhere(conn, POOL, key(1)) is None  # decided: nothing left to do


def test_claim_stores_the_checksummed_address(conn):
    claimed = store.claim(conn, POOL, key(1), A.lower(), lease_seconds=LEASE)
    assert claimed is not None and claimed.validator == A
    assert store.claim(conn, POOL, key(1), A.lower(), lease_seconds=LEASE) is not None  # still the same validator


def test_same_validator_reclaims_its_row_and_renews_the_lease(conn):
    first = store.claim(conn, POOL, key(1), A, lease_seconds=10)
    assert first is not None
    again = store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    assert again is not None
    assert again.claimed_at == first.claimed_at  # the claim is the same; only its lease moved
    assert again.lease_until > first.lease_until
    expire_lease(conn, POOL, key(1))
    assert store.claim(conn, POOL, key(1), A, lease_seconds=LEASE) is not None  # its own expired lease too


def test_another_validator_takes_over_only_after_the_lease_expired(conn):
    assert store.claim(conn, POOL, key(1), A, lease_seconds=LEASE) is not None
    assert store.claim(conn, POOL, key(1), B, lease_seconds=LEASE) is None

    expire_lease(conn, POOL, key(1))
    taken = store.claim(conn, POOL, key(1), B, lease_seconds=LEASE)
    assert taken is not None and taken.validator == B and taken.state == "claimed"
    # A's task comes back from the dead: it owns nothing and cannot decide
    assert store.claim(conn, POOL, key(1), A, lease_seconds=LEASE) is None
    assert store.record_decision(conn, POOL, key(1), A, "invalid", "toploc_mismatch", {}) is False
    assert store.record_decision(conn, POOL, key(1), B, "accepted", None, {}) is True
    assert (row(conn, key(1))["validator"], row(conn, key(1))["verdict"]) == (B, "accepted")


def test_a_decided_row_never_changes_hands(conn):
    decide(conn, [key(1)], "invalid", reason="sampling_mismatch")
    expire_lease(conn, POOL, key(1))
    assert store.claim(conn, POOL, key(1), B, lease_seconds=LEASE) is None
    assert row(conn, key(1))["validator"] == A

    # a redelivered task of the owner sees the verdict and does nothing
    mine = store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    assert mine is not None and mine.decided
    assert (mine.state, mine.verdict, mine.reason) == ("decided", "invalid", "sampling_mismatch")


def test_concurrent_claims_of_one_key_have_one_winner(url):
    barrier = threading.Barrier(2)
    results: dict[str, store.Claim | None] = {}

    def claim_as(validator: str) -> None:
        with psycopg.connect(url) as conn:
            barrier.wait()
            results[validator] = store.claim(conn, POOL, key(7, "race"), validator, lease_seconds=LEASE)
            conn.commit()

    threads = [threading.Thread(target=claim_as, args=(v,)) for v in (A, B)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [v for v, claimed in results.items() if claimed is not None]
    assert len(results) == 2 and len(winners) == 1
    with psycopg.connect(url) as conn:
        assert row(conn, key(7, "race"))["validator"] == winners[0]


NODE = Account.from_key(ANVIL_KEYS[5]).address


def test_a_batch_belongs_to_the_first_file_that_claims_it(conn):
    first, second = key(1, "batch"), key(2, "batch")
    assert store.claim_batch(conn, POOL, NODE, 3, 9, first) == first
    assert store.claim_batch(conn, POOL, NODE, 3, 9, first) == first  # a redelivered task: still its own
    assert store.claim_batch(conn, POOL, NODE.lower(), 3, 9, second) == first  # same node in any hex case
    # another batch, version, node or pool is another claim
    for pool_id, node, version, batch in (
        (POOL, NODE, 3, 10),
        (POOL, NODE, 4, 9),
        (POOL, A, 3, 9),
        (OTHER_POOL, NODE, 3, 9),
    ):
        assert store.claim_batch(conn, pool_id, node, version, batch, second) == second


def test_concurrent_claims_of_one_batch_have_one_owner(url):
    barrier = threading.Barrier(2)
    owners: dict[bytes, bytes] = {}

    def claim_for(work_key: bytes) -> None:
        with psycopg.connect(url) as conn:
            barrier.wait()
            owners[work_key] = store.claim_batch(conn, POOL, NODE, 1, 1, work_key)
            conn.commit()

    files = [key(i, "batch-race") for i in (1, 2)]
    threads = [threading.Thread(target=claim_for, args=(k,)) for k in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(owners) == 2 and len(set(owners.values())) == 1 and owners[files[0]] in files


def test_claim_refuses_a_non_positive_lease(conn):
    with pytest.raises(ValueError, match="lease"):
        store.claim(conn, POOL, key(1), A, lease_seconds=0)


# --- decisions ---------------------------------------------------------------------------------


def test_record_decision_needs_the_claim(conn):
    assert store.record_decision(conn, POOL, key(1), A, "accepted", None, {}) is False  # never claimed
    store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    assert store.record_decision(conn, POOL, key(1), B, "accepted", None, {}) is False  # not B's
    assert row(conn, key(1))["state"] == "claimed"


def test_record_decision_is_idempotent_and_never_redecides(conn):
    store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    evidence = {"toploc": {"exp_mismatches": 0}, "samples": 64}
    assert store.record_decision(conn, POOL, key(1), A, "accepted", None, evidence) is True
    first = row(conn, key(1))
    assert (first["state"], first["verdict"], first["evidence"]) == ("decided", "accepted", evidence)

    assert store.record_decision(conn, POOL, key(1), A, "accepted", None, evidence) is True  # a retried task
    assert store.record_decision(conn, POOL, key(1), A, "invalid", "toploc_mismatch", {}) is False
    assert row(conn, key(1)) == first  # untouched, decided_at included


@pytest.mark.parametrize(
    "verdict, reason, message",
    [
        ("invalid", None, "needs a reason"),
        ("invalid", "", "needs a reason"),
        ("invalid", "x" * 33, "longer than 32 bytes"),
        ("invalid", "naïve", "ascii"),
        ("maybe", None, "verdict must be one of"),
    ],
)
def test_record_decision_refuses_an_unsendable_verdict(conn, verdict, reason, message):
    store.claim(conn, POOL, key(1), A, lease_seconds=LEASE)
    with pytest.raises(ValueError, match=message):
        store.record_decision(conn, POOL, key(1), A, verdict, reason, {})
    assert row(conn, key(1))["state"] == "claimed"


@pytest.mark.parametrize(
    "values",
    [
        "('decided', NULL, NULL, now(), NULL)",  # decided without a verdict
        "('claimed', 'accepted', NULL, NULL, NULL)",  # a verdict without leaving 'claimed'
        "('decided', 'invalid', NULL, now(), NULL)",  # invalid without a reason
        "('sent', 'accepted', NULL, now(), NULL)",  # sent without sent_at
        "('weird', NULL, NULL, NULL, NULL)",
    ],
)
def test_the_table_refuses_inconsistent_rows(conn, values):
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO validations (pool_id, work_key, validator, state, verdict, reason, decided_at, sent_at, "
            "lease_until) SELECT 1, %s, %s, s, v, r, d::timestamptz, t::timestamptz, now() "
            f"FROM (VALUES {values}) AS x(s, v, r, d, t)",
            (key(1), A),
        )


# --- what is due -------------------------------------------------------------------------------


def test_31_accepted_within_max_wait_are_not_due(conn):
    decide(conn, [key(i) for i in range(31)])
    times = decided_at(conn)
    due = store.due_verdicts(conn, A, now=times[0] + timedelta(seconds=4.9))
    assert (due.invalid, due.batches) == ((), ())
    assert due.next_due_in == pytest.approx(0.1)


def test_32_accepted_are_one_batch_at_once(conn):
    keys = [key(i) for i in range(32)]
    decide(conn, keys)
    due = store.due_verdicts(conn, A, now=decided_at(conn)[-1])
    assert len(due.batches) == 1
    batch = due.batches[0]
    assert batch.pool_id == POOL
    assert sorted(r.work_key for r in batch.rows) == sorted(keys)
    assert due.next_due_in is None


def test_the_rest_goes_when_its_oldest_has_waited_max_wait(conn):
    decide(conn, [key(i) for i in range(31)])
    oldest = decided_at(conn)[0]
    due = store.due_verdicts(conn, A, now=oldest + timedelta(seconds=5))
    assert [len(b.rows) for b in due.batches] == [31]
    assert due.next_due_in is None
    # the database's own clock, a moment later, still says "not yet"
    assert store.due_verdicts(conn, A).batches == ()


def test_full_batches_go_and_the_young_rest_waits(conn):
    decide(conn, [key(i) for i in range(70)])
    times = decided_at(conn)
    due = store.due_verdicts(conn, A, max_batch=32, now=times[-1])
    assert [len(b.rows) for b in due.batches] == [32, 32]
    sent = [r.decided_at for b in due.batches for r in b.rows]
    assert sent == times[:64]  # the oldest go first
    assert due.next_due_in == pytest.approx(5 - (times[-1] - times[64]).total_seconds())


def test_invalid_verdicts_are_due_immediately(conn):
    decide(conn, [key(1)], "invalid", reason="sampling_mismatch")
    decide(conn, [key(2)])
    due = store.due_verdicts(conn, A, now=decided_at(conn)[-1])
    assert [(r.work_key, r.verdict, r.reason) for r in due.invalid] == [(key(1), "invalid", "sampling_mismatch")]
    assert due.batches == ()
    assert 0 < (due.next_due_in or 0) <= 5


def test_batches_are_per_pool_and_per_validator(conn):
    decide(conn, [key(i) for i in range(3)], pool_id=POOL)
    decide(conn, [key(i) for i in range(2)], pool_id=OTHER_POOL)
    decide(conn, [key(i, "b") for i in range(4)], validator=B)
    later = decided_at(conn)[-1] + timedelta(seconds=60)
    due = store.due_verdicts(conn, A, now=later)
    assert sorted((b.pool_id, len(b.rows)) for b in due.batches) == [(POOL, 3), (OTHER_POOL, 2)]
    assert [len(b.rows) for b in store.due_verdicts(conn, B, now=later).batches] == [4]


def test_due_verdicts_checks_its_limits(conn):
    with pytest.raises(ValueError, match="max_batch"):
        store.due_verdicts(conn, A, max_batch=0)
    with pytest.raises(ValueError, match="max_wait"):
        store.due_verdicts(conn, A, max_wait=-1)


# --- the flusher's updates and the counts ------------------------------------------------------


def test_sent_superseded_and_errors_only_touch_decided_rows(conn):
    decide(conn, [key(i) for i in range(3)])
    decide(conn, [key(9)], "invalid", reason="bad_advantages")
    store.claim(conn, POOL, key(5), A, lease_seconds=LEASE)
    tx = b"\x11" * 32

    assert store.record_send_error(conn, [Key(POOL, key(0)), Key(POOL, key(5))], "ConnectionError: refused") == 1
    assert store.record_send_error(conn, [Key(POOL, key(0))], "x" * 5000) == 1
    failed = row(conn, key(0))
    assert (failed["state"], failed["attempts"], len(failed["last_error"])) == ("decided", 2, 1000)
    assert row(conn, key(5))["attempts"] == 0  # claimed rows are not the flusher's

    assert store.mark_sent(conn, [Key(POOL, key(0)), Key(POOL, key(1)), Key(POOL, key(5))], tx) == 2
    assert (row(conn, key(0))["state"], row(conn, key(0))["tx_hash"]) == ("sent", tx)
    assert row(conn, key(0))["sent_at"] is not None
    assert store.mark_sent(conn, [Key(POOL, key(0))], b"\x22" * 32) == 0  # sent once, never again
    assert row(conn, key(0))["tx_hash"] == tx

    assert store.mark_superseded(conn, Key(POOL, key(2)), "on-chain ACCEPTED by someone") is True
    assert store.mark_superseded(conn, Key(POOL, key(1)), "too late") is False  # already sent
    assert (row(conn, key(2))["state"], row(conn, key(2))["note"]) == ("superseded", "on-chain ACCEPTED by someone")
    assert store.due_verdicts(conn, A).invalid[0].work_key == key(9)


def test_validator_counts(conn):
    decide(conn, [key(i) for i in range(4)])
    decide(conn, [key(i) for i in range(4, 6)], "invalid", reason="reward_mismatch")
    decide(conn, [key(i, "b") for i in range(3)], validator=B)
    store.claim(conn, POOL, key(99), A, lease_seconds=LEASE)
    store.mark_sent(conn, [Key(POOL, key(0)), Key(POOL, key(4))], b"\x01" * 32)
    store.mark_superseded(conn, Key(POOL, key(1)), "taken")
    store.record_send_error(conn, [Key(POOL, key(2))], "TxTimeout")
    conn.execute("UPDATE validations SET decided_at = now() - interval '90 seconds' WHERE work_key = %s", (key(5),))

    counts = store.validator_counts(conn, A)
    assert counts["claimed"] == 1
    assert counts["decided"] == {"accepted": 2, "invalid": 1}
    assert counts["sent"] == {"accepted": 1, "invalid": 1}
    assert counts["superseded"] == {"accepted": 1, "invalid": 0}
    assert (counts["waiting"], counts["failing"]) == (3, 1)
    assert counts["oldest_waiting_seconds"] == pytest.approx(90, abs=5)

    empty = store.validator_counts(conn, Account.from_key(ANVIL_KEYS[9]).address)
    assert (empty["waiting"], empty["oldest_waiting_seconds"], empty["sent"]) == (
        0,
        None,
        {"accepted": 0, "invalid": 0},
    )


def test_one_flusher_lock_per_validator(url):
    with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url, autocommit=True) as second:
        assert store.try_lock_flusher(first, A) is True
        assert store.try_lock_flusher(second, A) is False
        assert store.try_lock_flusher(second, B) is True  # another key, another flusher
        store.unlock_flusher(first, A)
        assert store.try_lock_flusher(second, A) is True


def test_a_second_accepted_file_of_one_batch_is_invalidated_as_duplicate(conn):
    def submission(work_key: bytes) -> IndexedSubmission:
        return IndexedSubmission(POOL, work_key, NODE, NODE, 20, 2, "pending", datetime.now(UTC), 1)

    accepted = Verdict(accepted=True, reason=None, evidence={"batch": 4, "work_units": 20}, rows=8)
    original, replay = submission(key(1, "dup")), submission(key(2, "dup"))
    assert first_of_its_batch(conn, original, accepted) is accepted
    assert first_of_its_batch(conn, original, accepted) is accepted  # redelivered
    duplicate = first_of_its_batch(conn, replay, accepted)
    assert (duplicate.accepted, duplicate.reason, duplicate.rows) == (False, "duplicate_batch", 8)
    assert duplicate.evidence == {"batch": 4, "model_version": 2, "first_work_key": original.work_key.hex()}
    rejected = Verdict(accepted=False, reason="toploc_mantissa", evidence={"batch": 5}, rows=8)
    assert first_of_its_batch(conn, replay, rejected) is rejected  # only accepted files claim a batch
    assert store.claim_batch(conn, POOL, NODE, 2, 5, replay.work_key) == replay.work_key
