"""The verdict store: the `validations` table (revision 0004) between validation tasks and the chain,
and `batch_claims` (revision 0005): which file an assigned batch was accepted for.

A validation task claims a submission (`claim`), runs the checks and records its verdict
(`record_decision`); the validator's one flusher (`proofpool.validator.verdicts.flush_verdicts`) asks
which verdicts are due (`due_verdicts`), sends them and marks the outcome (`mark_sent`,
`mark_superseded`, `record_send_error`). Rows move claimed -> decided -> sent | superseded and
never back, so a verdict, once recorded, is the only one this store will ever send for its key.

Functions take the connection first and never commit: callers own the transactions. Times
come from the database's clock (`now()`), so several machines agree on leases and waits.
See docs/validator-verdicts.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypedDict

from eth_utils import to_checksum_address
from psycopg import Connection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from proofpool.infra.chain.bindings import reason_code

State = Literal["claimed", "decided", "sent", "superseded"]
VerdictKind = Literal["accepted", "invalid"]
VERDICT_KINDS: tuple[VerdictKind, ...] = ("accepted", "invalid")
ERROR_TEXT_LIMIT = 1000
"""Characters of a send error kept in `last_error` (RPC errors can carry whole payloads)."""


class Key(NamedTuple):
    """A submission: the primary key of `validations` and of the chain's work mapping."""

    pool_id: int
    work_key: bytes


@dataclass(frozen=True)
class Claim:
    """A row as its owner sees it after `claim`."""

    pool_id: int
    work_key: bytes
    validator: str
    state: State
    verdict: VerdictKind | None
    reason: str | None
    claimed_at: datetime
    lease_until: datetime
    decided_at: datetime | None

    @property
    def decided(self) -> bool:
        """True when a verdict was recorded already: a redelivered task has nothing left to do."""
        return self.state != "claimed"


@dataclass(frozen=True)
class DueRow:
    """A decided verdict waiting to be sent."""

    pool_id: int
    work_key: bytes
    verdict: VerdictKind
    reason: str | None
    decided_at: datetime
    attempts: int
    evidence_sha256: bytes | None = None
    """sha256 of the verdict's evidence document (None for rows decided before evidence was kept)."""

    @property
    def key(self) -> Key:
        return Key(self.pool_id, self.work_key)


@dataclass(frozen=True)
class SentRejection:
    """An invalid verdict of ours that is on-chain but whose rejection has not been seen settled."""

    pool_id: int
    work_key: bytes
    reason: str

    @property
    def key(self) -> Key:
        return Key(self.pool_id, self.work_key)


@dataclass(frozen=True)
class AttestBatch:
    """Accepted verdicts of one pool to send in one `attestWork` (at most `max_batch` keys)."""

    pool_id: int
    rows: tuple[DueRow, ...]


@dataclass(frozen=True)
class Due:
    """What a flush should send now, and when to look again."""

    invalid: tuple[DueRow, ...] = ()
    """Invalid verdicts, oldest first: each is sent at once, one `invalidateWork` each."""
    batches: tuple[AttestBatch, ...] = ()
    """Accepted verdicts, by pool, oldest first: full batches, plus a pool's remainder once its oldest
    key has waited `max_wait`."""
    next_due_in: float | None = None
    """Seconds until the next remainder becomes due (None: nothing else is waiting)."""


class ValidatorCounts(TypedDict):
    """Rows of one validator, for `proofpool validator status`."""

    claimed: int
    decided: dict[str, int]
    sent: dict[str, int]
    superseded: dict[str, int]
    waiting: int
    failing: int
    oldest_waiting_seconds: float | None


_COLUMNS = "pool_id, work_key, validator, state, verdict, reason, claimed_at, lease_until, decided_at"

# First claim inserts; a conflicting row changes hands only while undecided: the same validator
# renews its lease (a redelivered task), another one takes it over once the lease has expired.
CLAIM = f"""
    INSERT INTO validations (pool_id, work_key, validator, state, claimed_at, lease_until)
    VALUES (%(pool_id)s, %(work_key)s, %(validator)s, 'claimed', now(),
            now() + %(lease)s * interval '1 second')
    ON CONFLICT (pool_id, work_key) DO UPDATE
       SET validator = EXCLUDED.validator,
           claimed_at = CASE WHEN validations.validator = EXCLUDED.validator
                             THEN validations.claimed_at ELSE EXCLUDED.claimed_at END,
           lease_until = EXCLUDED.lease_until
     WHERE validations.state = 'claimed'
       AND (validations.validator = EXCLUDED.validator OR validations.lease_until <= now())
    RETURNING {_COLUMNS}"""

SELECT_OWN = f"""
    SELECT {_COLUMNS} FROM validations
     WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s AND validator = %(validator)s"""

CLAIMED_ELSEWHERE = """
    SELECT EXTRACT(EPOCH FROM lease_until - now()) FROM validations
     WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s AND state = 'claimed'"""

RECORD_DECISION = """
    UPDATE validations
       SET state = 'decided', verdict = %(verdict)s, reason = %(reason)s, evidence = %(evidence)s,
           evidence_sha256 = %(evidence_sha256)s, decided_at = now()
     WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s AND validator = %(validator)s
       AND state = 'claimed'"""

WAITING = """
    SELECT pool_id, work_key, verdict, reason, decided_at, attempts, evidence_sha256 FROM validations
     WHERE validator = %(validator)s AND state = 'decided' AND verdict = %(verdict)s
     ORDER BY pool_id, decided_at, work_key"""

UNSETTLED = """
    SELECT pool_id, work_key, reason FROM validations
     WHERE validator = %(validator)s AND state = 'sent' AND verdict = 'invalid' AND settled_at IS NULL
     ORDER BY sent_at, pool_id, work_key
     LIMIT %(limit)s"""

MARK_SETTLED = """
    UPDATE validations SET settled_at = now(), note = concat_ws('; ', note, %(note)s::text)
     WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s AND state = 'sent' AND settled_at IS NULL"""

DB_NOW = "SELECT clock_timestamp()"

_KEYS = "(pool_id, work_key) IN (SELECT * FROM unnest(%(pools)s::bigint[], %(keys)s::bytea[]))"

MARK_SENT = f"""
    UPDATE validations SET state = 'sent', sent_at = now(), tx_hash = %(tx_hash)s, note = %(note)s,
           send_started_at = to_timestamp(%(send_started)s::float8)
     WHERE state = 'decided' AND {_KEYS}"""

MARK_SUPERSEDED = """
    UPDATE validations SET state = 'superseded', note = %(why)s
     WHERE state = 'decided' AND pool_id = %(pool_id)s AND work_key = %(work_key)s"""

RECORD_SEND_ERROR = f"""
    UPDATE validations SET attempts = attempts + 1, last_error = %(error)s
     WHERE state = 'decided' AND {_KEYS}"""

# Session advisory lock per validator key: one flusher sends for a key at a time; it goes away
# with the session, so a dead flusher never blocks the next one.
TRY_LOCK_FLUSHER = "SELECT pg_try_advisory_lock(hashtextextended(%(name)s, 0))"
UNLOCK_FLUSHER = "SELECT pg_advisory_unlock(hashtextextended(%(name)s, 0))"

COUNTS = """
    SELECT state, verdict, count(*)::bigint,
           count(*) FILTER (WHERE last_error IS NOT NULL)::bigint,
           extract(epoch FROM now() - min(decided_at))::float8
      FROM validations WHERE validator = %(validator)s
     GROUP BY state, verdict"""


def claim(conn: Connection, pool_id: int, work_key: bytes, validator: str, *, lease_seconds: float) -> Claim | None:
    """Claim a submission for `validator` for `lease_seconds`; None when someone else owns it.

    The first validator to claim a key owns it. Its own re-claim (a redelivered task) renews the
    lease while the row is undecided and otherwise just shows the row: a `Claim` with `decided`
    set means the verdict is recorded and the task must do nothing. Another validator takes an
    undecided row over only after its lease expired (its owner died mid-task); a decided row never
    changes hands, so its one verdict is the one that gets sent.
    """
    if lease_seconds <= 0:
        raise ValueError("lease_seconds must be positive")
    params = {"pool_id": pool_id, "work_key": work_key, "validator": to_checksum_address(validator)}
    with conn.cursor(row_factory=class_row(Claim)) as cur:
        row = cur.execute(CLAIM, {**params, "lease": float(lease_seconds)}).fetchone()
        if row is None:
            # Not ours to (re)claim: show our own decided row, or nothing if the row is someone else's.
            row = cur.execute(SELECT_OWN, params).fetchone()
    return row


CLAIM_BATCH = """
    INSERT INTO batch_claims (pool_id, node, model_version, batch, work_key)
    VALUES (%(pool_id)s, %(node)s, %(version)s, %(batch)s, %(work_key)s)
    ON CONFLICT DO NOTHING"""
SELECT_BATCH_OWNER = """
    SELECT work_key FROM batch_claims
    WHERE pool_id = %(pool_id)s AND node = %(node)s AND model_version = %(version)s AND batch = %(batch)s"""


def claim_batch(conn: Connection, pool_id: int, node: str, version: int, batch: int, work_key: bytes) -> bytes:
    """Claim an assigned batch for the file `work_key`; returns the key that holds it (this one, or
    the file that claimed it first: then `work_key` is a second file for one batch).

    Called in the transaction that records an accepted verdict: if it rolls back, so does the claim.
    A concurrent claim of the same batch waits for the other transaction and then sees its row.
    """
    params = {
        "pool_id": pool_id,
        "node": to_checksum_address(node),
        "version": version,
        "batch": batch,
        "work_key": work_key,
    }
    conn.execute(CLAIM_BATCH, params)
    row = conn.execute(SELECT_BATCH_OWNER, params).fetchone()
    assert row is not None  # inserted above, or already there
    return bytes(row[0])


def claimed_elsewhere(conn: Connection, pool_id: int, work_key: bytes) -> float | None:
    """Seconds left on another validator's undecided claim (<= 0: expired, up for taking over),
    None when the row is decided (or absent): then there is nothing left to do for this key."""
    row = conn.execute(CLAIMED_ELSEWHERE, {"pool_id": pool_id, "work_key": work_key}).fetchone()
    return None if row is None else float(row[0])


def record_decision(
    conn: Connection,
    pool_id: int,
    work_key: bytes,
    validator: str,
    verdict: VerdictKind,
    reason: str | None,
    evidence: Mapping[str, Any],
    evidence_sha256: bytes | None = None,
) -> bool:
    """Record `validator`'s verdict on its claimed row; True when the row now holds this verdict.

    Only the claiming validator decides, and only once: a second call with the same verdict and
    reason is a no-op returning True (a retried task), anything else returns False and changes
    nothing (the row is someone else's, or was decided otherwise before). An invalid verdict needs
    a reason that fits the contract's bytes32 reason code; refusing it here, not at send time, keeps
    an unsendable verdict out of the queue.
    """
    if verdict not in VERDICT_KINDS:
        raise ValueError(f"verdict must be one of {VERDICT_KINDS}, not {verdict!r}")
    if verdict == "invalid":
        if not reason:
            raise ValueError("an invalid verdict needs a reason code")
        reason_code(reason)  # ValueError unless short ASCII
    validator = to_checksum_address(validator)
    key = {"pool_id": pool_id, "work_key": work_key, "validator": validator}
    updated = conn.execute(
        RECORD_DECISION,
        {
            **key,
            "verdict": verdict,
            "reason": reason,
            "evidence": Jsonb(dict(evidence)),
            "evidence_sha256": evidence_sha256,
        },
    ).rowcount
    if updated == 1:
        return True
    with conn.cursor(row_factory=class_row(Claim)) as cur:
        row = cur.execute(SELECT_OWN, key).fetchone()
    return row is not None and row.decided and row.verdict == verdict and row.reason == reason


def due_verdicts(
    conn: Connection,
    validator: str,
    *,
    max_batch: int = 32,
    max_wait: float = 5.0,
    now: datetime | None = None,
) -> Due:
    """The decided verdicts of `validator` to send now (`now` defaults to the database's clock).

    Invalid verdicts are always due: a cheater should be slashed and ejected at once. Accepted
    verdicts are batched per pool to save gas: every full batch of `max_batch` is due, and the
    rest of a pool once its oldest key has waited `max_wait` seconds. So no key waits much more
    than `max_wait` (plus the flush cadence), and batches are as full as that allows.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    if max_wait < 0:
        raise ValueError("max_wait must not be negative")
    if now is None:
        row = conn.execute(DB_NOW).fetchone()
        assert row is not None
        now = row[0]
    validator = to_checksum_address(validator)
    with conn.cursor(row_factory=class_row(DueRow)) as cur:
        invalid = tuple(cur.execute(WAITING, {"validator": validator, "verdict": "invalid"}).fetchall())
        accepted = cur.execute(WAITING, {"validator": validator, "verdict": "accepted"}).fetchall()

    batches: list[AttestBatch] = []
    next_due_in: float | None = None
    for pool_id, rows in _by_pool(accepted).items():
        full = len(rows) - len(rows) % max_batch
        batches += [AttestBatch(pool_id, tuple(rows[i : i + max_batch])) for i in range(0, full, max_batch)]
        rest = rows[full:]
        if not rest:
            continue
        waited = (now - rest[0].decided_at).total_seconds()
        if waited >= max_wait:
            batches.append(AttestBatch(pool_id, tuple(rest)))
        else:
            wait = max_wait - waited
            next_due_in = wait if next_due_in is None else min(next_due_in, wait)
    return Due(invalid=invalid, batches=tuple(batches), next_due_in=next_due_in)


def _by_pool(rows: Sequence[DueRow]) -> dict[int, list[DueRow]]:
    """Rows (ordered by pool, then age) grouped by pool, order kept."""
    pools: dict[int, list[DueRow]] = {}
    for row in rows:
        pools.setdefault(row.pool_id, []).append(row)
    return pools


def _key_arrays(keys: Sequence[Key]) -> dict[str, list[Any]]:
    return {"pools": [k.pool_id for k in keys], "keys": [k.work_key for k in keys]}


def mark_sent(
    conn: Connection,
    keys: Sequence[Key],
    tx_hash: bytes | None,
    *,
    note: str | None = None,
    send_started: float | None = None,
) -> int:
    """Mark decided rows as on-chain by our transaction `tx_hash`; returns the rows changed.

    `tx_hash` is None when the verdict was found on-chain instead of sent now (our transaction was
    mined before the process died): `note` says so, and the indexer's `verdicts` table has the tx.
    `send_started` (Unix seconds) is when the transaction was handed to the node, for the stage
    timings (`proofpool.validator.stages`); None when unknown.
    """
    if not keys:
        return 0
    params = {**_key_arrays(keys), "tx_hash": tx_hash, "note": note, "send_started": send_started}
    return conn.execute(MARK_SENT, params).rowcount


def mark_superseded(conn: Connection, key: Key, why: str) -> bool:
    """Mark a decided row as never to be sent: the chain holds someone else's verdict for it."""
    return conn.execute(MARK_SUPERSEDED, {"pool_id": key.pool_id, "work_key": key.work_key, "why": why}).rowcount == 1


def record_send_error(conn: Connection, keys: Sequence[Key], error: str) -> int:
    """Count a failed send on decided rows; they stay decided, so the next flush tries again."""
    if not keys:
        return 0
    return conn.execute(RECORD_SEND_ERROR, {**_key_arrays(keys), "error": error[:ERROR_TEXT_LIMIT]}).rowcount


def unsettled_rejections(conn: Connection, validator: str, *, limit: int = 64) -> list[SentRejection]:
    """`validator`'s sent invalid verdicts whose on-chain outcome it has not seen yet, oldest first:
    a rejection waiting for its challenge window, or one executed or overturned since."""
    with conn.cursor(row_factory=class_row(SentRejection)) as cur:
        return cur.execute(UNSETTLED, {"validator": to_checksum_address(validator), "limit": limit}).fetchall()


def mark_settled(conn: Connection, key: Key, note: str) -> bool:
    """Record that a sent rejection's outcome is final on-chain (`note` says which)."""
    return conn.execute(MARK_SETTLED, {"pool_id": key.pool_id, "work_key": key.work_key, "note": note}).rowcount == 1


def validator_counts(conn: Connection, validator: str) -> ValidatorCounts:
    """Rows of `validator` by state and verdict, how many wait to be sent (and how many of those
    failed their last send), and the age in seconds of the oldest waiting one."""
    counts = ValidatorCounts(
        claimed=0,
        decided=dict.fromkeys(VERDICT_KINDS, 0),
        sent=dict.fromkeys(VERDICT_KINDS, 0),
        superseded=dict.fromkeys(VERDICT_KINDS, 0),
        waiting=0,
        failing=0,
        oldest_waiting_seconds=None,
    )
    by_verdict = {"decided": counts["decided"], "sent": counts["sent"], "superseded": counts["superseded"]}
    rows = conn.execute(COUNTS, {"validator": to_checksum_address(validator)}).fetchall()
    for state, verdict, count, failing, oldest in rows:
        if state == "claimed":
            counts["claimed"] += count
            continue
        by_verdict[state][verdict] += count
        if state == "decided":
            counts["waiting"] += count
            counts["failing"] += failing
            best = counts["oldest_waiting_seconds"]
            counts["oldest_waiting_seconds"] = oldest if best is None else max(best, oldest)
    return counts


def _flusher_lock_name(validator: str) -> str:
    return f"proofpool.validator.flush:{to_checksum_address(validator)}"


def try_lock_flusher(conn: Connection, validator: str) -> bool:
    """Take the session lock that makes this connection the one flusher of `validator`; False if taken.

    Session-level on purpose: it outlives the flush's many short transactions and is released
    when the session ends, also when the process dies.
    """
    row = conn.execute(TRY_LOCK_FLUSHER, {"name": _flusher_lock_name(validator)}).fetchone()
    return bool(row and row[0])


def unlock_flusher(conn: Connection, validator: str) -> None:
    """Release the lock of `try_lock_flusher`."""
    conn.execute(UNLOCK_FLUSHER, {"name": _flusher_lock_name(validator)})
