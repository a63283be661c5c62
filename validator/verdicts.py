"""Sending the decided verdicts of one validator key on-chain (`flush_verdicts`).

Validation tasks only record verdicts (`proofpool.validator.store`); this flush turns them into
transactions: each invalid key one `invalidateWork` at once, accepted keys one `attestWork`
per pool and batch, each committing to the sha256 of its evidence (`proofpool.validator.evidence`). It
reads every key's on-chain status before sending, sends only keys that are still Pending, and
commits each transaction's rows before the next transaction, so after a crash the next flush
finds what was mined (status no longer Pending) instead of sending twice. Then it settles this
key's rejections: one whose pool's challenge window has passed uncontested is executed
(`executeRejection`: the provider is slashed), one executed or overturned meanwhile is marked
settled. Last, it sends the contests its reviews decided (`proofpool.validator.review`) and settles them;
a rejection overturned back to Pending is attested with the review's evidence, since nobody else
will judge that file again. Exactly one flusher runs per validator key; a PostgreSQL session lock
enforces it. A send that fails for any reason (the RPC down, the key out of gas, a revert, any
other error the node answers) leaves its rows decided with the error recorded: `proofpool validator
status` counts them as failing, and the next flush tries them again.

See docs/validator-verdicts.md for the whole argument and every failure case.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import requests
from proofpool.validator import review_store, stages, store
from proofpool.validator.review_store import Review
from proofpool.validator.store import DueRow, Key, SentRejection, VerdictKind
from psycopg import Connection
from psycopg.pq import TransactionStatus
from web3.exceptions import Web3Exception
from web3.types import TxReceipt

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.core.evidence import batch_evidence_sha256
from proofpool.infra.chain.bindings import NO_EVIDENCE, Work, WorkStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import ChainError, ContractRevert, NonceConflict, TxTimeout

log = logging.getLogger(__name__)

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    ServiceUnavailable,
    requests.ConnectionError,
    requests.Timeout,
    TxTimeout,
    NonceConflict,
)
"""Failures that say nothing about the verdicts (the chain is unreachable or slow): the rows stay
decided and the next flush sends them."""

SEND_FAILURES: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, ChainError, Web3Exception)
"""Everything that stops a flush's chain side: the transient failures, the key out of gas
(`InsufficientGas`), a revert `deliver` did not settle, any other error the node answered. Like the
transient ones they say nothing about the verdicts: the rows not handled yet stay decided with the
error recorded (counted as failing by `proofpool validator status`) and the next flush tries again."""

MIN_RETRY_SECONDS = 1.0
"""Lower bound of `next_due_in` after failed sends, so a caller never spins on a dead RPC."""

_OURS: dict[VerdictKind, frozenset[WorkStatus]] = {
    # An attested key stays ours through finalization (or forfeit: the node was slashed later).
    "accepted": frozenset({WorkStatus.ACCEPTED, WorkStatus.FINALIZED, WorkStatus.FORFEITED}),
    # A rejection waits for its challenge window as Rejected, then becomes Invalid.
    "invalid": frozenset({WorkStatus.REJECTED, WorkStatus.INVALID}),
}
"""On-chain statuses that, with our address as the work's validator, mean our verdict landed."""


class FlushBusy(ProofpoolError):
    """Another process is flushing this validator key's verdicts right now."""


@dataclass(frozen=True)
class FlushResult:
    """What one flush did."""

    attested: int
    """Keys accepted on-chain by the `attestWork` transactions of this flush."""
    invalidated: int
    """Keys invalidated on-chain by the `invalidateWork` transactions of this flush."""
    superseded: int
    """Keys not sent because the chain already holds another validator's verdict for them."""
    failed: int
    """Keys left decided after a failed send (error recorded); a later flush tries them again."""
    next_due_in: float | None
    """Seconds until the next flush has work (None: nothing waits)."""
    recovered: int = 0
    """Keys found on-chain with our own verdict (a transaction mined before a crash): marked sent."""
    executed: int = 0
    """Rejections of ours whose challenge window passed, executed by this flush (`executeRejection`)."""
    overturned: int = 0
    """Rejections of ours found overturned by a quorum of other validators' contests."""
    contested: int = 0
    """Other validators' rejections this flush contested (`contestRejection`)."""


Send = Callable[[Sequence[DueRow]], TxReceipt]


def flush_verdicts(
    conn: Connection,
    client: ChainClient,
    *,
    max_batch: int = 32,
    max_wait: float = 5.0,
    now: datetime | None = None,
    settle_limit: int = 64,
) -> FlushResult:
    """Send the due verdicts of `client`'s key (see `store.due_verdicts`) and record the outcome.

    `conn` must have no transaction open: the flush commits after each transaction's rows so
    that nothing it learned from the chain is lost if it dies before the next one. Raises
    `FlushBusy` when another session is flushing the same key; errors of PostgreSQL and bugs
    propagate (the rows stay decided, and the next flush reads the chain before sending).
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError("flush_verdicts commits as it goes: pass a connection with no open transaction")
    me = client.address
    with conn.transaction():
        locked = store.try_lock_flusher(conn, me)
    if not locked:
        raise FlushBusy(f"another process is flushing the verdicts of {me}")
    try:
        with conn.transaction():
            due = store.due_verdicts(conn, me, max_batch=max_batch, max_wait=max_wait, now=now)
        flush = _Flush(conn, client)
        work: list[tuple[list[DueRow], Send]] = [([row], flush.invalidate) for row in due.invalid]
        work += [(list(batch.rows), flush.attest) for batch in due.batches]
        try:
            for rows, send in work:
                flush.deliver(rows, send)
            flush.settle_rejections(settle_limit)
            flush.send_contests(settle_limit)
        except SEND_FAILURES as exc:
            # Every row not handled yet stays decided, with the error, for the next flush (an unsettled
            # rejection or an unsent contest stays so: the next flush looks at it again).
            error = f"{exc.__class__.__name__}: {exc}"
            log.error("verdict flush stopped: %s", error, extra={"validator": me})
            flush.failed([row for rows, _ in work for row in rows if row.key not in flush.handled], error)
    finally:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            with conn.transaction():
                store.unlock_flusher(conn, me)

    next_due_in = due.next_due_in
    if flush.rejection_due_in is not None:
        next_due_in = flush.rejection_due_in if next_due_in is None else min(next_due_in, flush.rejection_due_in)
    if flush.counts["failed"]:
        retry = max(max_wait, MIN_RETRY_SECONDS)
        next_due_in = retry if next_due_in is None else min(next_due_in, retry)
    return FlushResult(**flush.counts, next_due_in=next_due_in)


class _Flush:
    """One flush's chain reads, sends and row updates, with its tallies."""

    def __init__(self, conn: Connection, client: ChainClient) -> None:
        self.conn = conn
        self.client = client
        self.me = client.address
        kinds = ("attested", "invalidated", "superseded", "failed", "recovered", "executed", "overturned", "contested")
        self.counts = dict.fromkeys(kinds, 0)
        self.handled: set[Key] = set()
        self.rejection_due_in: float | None = None

    # --- the two transactions -----------------------------------------------------------------

    def invalidate(self, rows: Sequence[DueRow]) -> TxReceipt:
        (row,) = rows
        assert row.reason is not None  # the table's check: an invalid verdict has a reason
        evidence = row.evidence_sha256 or NO_EVIDENCE
        return self.client.pool.invalidate_work(row.pool_id, row.work_key, row.reason, evidence)

    def attest(self, rows: Sequence[DueRow]) -> TxReceipt:
        evidence = batch_evidence_sha256([row.evidence_sha256 for row in rows])
        return self.client.pool.attest_work(rows[0].pool_id, [row.work_key for row in rows], evidence)

    # --- rejections after their challenge window ------------------------------------------------

    def settle_rejections(self, limit: int) -> None:
        """Execute our rejections whose challenge window has passed; mark settled those executed or
        overturned; note when the next window closes (`rejection_due_in`)."""
        with self.conn.transaction():
            rows = store.unsettled_rejections(self.conn, self.me, limit=limit)
        if not rows:
            return
        chain_now = int(self.client.w3.eth.get_block("latest")["timestamp"])
        for row in rows:
            work = self.client.pool.get_work(row.pool_id, row.work_key)
            if work.status is WorkStatus.REJECTED and work.validator == self.me:
                rejection = self.client.pool.get_rejection(row.pool_id, row.work_key)
                if rejection is not None and rejection.executable_at > chain_now:
                    wait = float(rejection.executable_at - chain_now)
                    self.rejection_due_in = wait if self.rejection_due_in is None else min(self.rejection_due_in, wait)
                    continue
                try:
                    receipt = self.client.pool.execute_rejection(row.pool_id, row.work_key)
                except ContractRevert as revert:  # executed or overturned by someone else just now
                    log.info("rejection not executed", extra=_rejection_fields(row, self.me, revert=str(revert)))
                    work = self.client.pool.get_work(row.pool_id, row.work_key)
                else:
                    tx = "0x" + bytes(receipt["transactionHash"]).hex()
                    self._settled(row, f"executed by this validator in {tx}", "executed")
                    continue
            self._settle_seen(row, work)

    # --- contests of other validators' rejections ----------------------------------------------

    def send_contests(self, limit: int) -> None:
        """Send the contests our reviews decided; settle the contests sent before."""
        with self.conn.transaction():
            due = review_store.by_state(self.conn, self.me, "contest", limit=limit)
            sent = review_store.by_state(self.conn, self.me, "sent", limit=limit)
        for review in due:
            self._contest(review)
        for review in sent:
            self._settle_contest(review)

    def _contest(self, review: Review) -> None:
        pool = self.client.pool
        work = pool.get_work(review.pool_id, review.work_key)
        rejection = pool.get_rejection(review.pool_id, review.work_key) if work.status is WorkStatus.REJECTED else None
        if rejection is None:
            self._review_skipped(review, f"settled before the contest went out: on-chain {work.status.name}")
            return
        if self.me in rejection.contesters:  # our contest was mined before a restart
            with self.conn.transaction():
                review_store.mark_sent(self.conn, review, self.me, None)
            return
        assert review.evidence_sha256 is not None  # the table's check: a contest has evidence
        try:
            receipt = pool.contest_rejection(review.pool_id, review.work_key, review.evidence_sha256)
        except ContractRevert as revert:  # the window closed, or the quorum was reached, just now
            self._review_skipped(review, f"contest refused: {revert}")
            return
        tx_hash = bytes(receipt["transactionHash"])
        with self.conn.transaction():
            review_store.mark_sent(self.conn, review, self.me, tx_hash)
        self.counts["contested"] += 1
        log.info("rejection contested", extra=_review_fields(review, self.me, tx="0x" + tx_hash.hex()))

    def _settle_contest(self, review: Review) -> None:
        pool = self.client.pool
        work = pool.get_work(review.pool_id, review.work_key)
        if work.status is WorkStatus.REJECTED:
            return  # the window is still open (or the rejection waits to be executed)
        note = f"on-chain {work.status.name}"
        if work.status is WorkStatus.PENDING and review.evidence_sha256 is not None:
            # Overturned back to Pending: the file's only verdict was the rejection, so nobody would
            # judge it again. We recomputed it in full: attest it.
            try:
                pool.attest_work(review.pool_id, [review.work_key], review.evidence_sha256)
                note = "overturned; attested by this validator"
            except ContractRevert as revert:
                note = f"overturned; attestation refused: {revert}"
        with self.conn.transaction():
            review_store.mark_settled(self.conn, review, self.me, note)
        log.info("contest settled", extra=_review_fields(review, self.me, note=note))

    def _review_skipped(self, review: Review, note: str) -> None:
        with self.conn.transaction():
            review_store.mark_skipped(self.conn, review, self.me, note)
        log.info("contest not sent", extra=_review_fields(review, self.me, note=note))

    def _settle_seen(self, row: SentRejection, work: Work) -> None:
        if work.status is WorkStatus.REJECTED and work.validator == self.me:
            return  # still waiting (a transient read); the next flush looks again
        if work.status is WorkStatus.INVALID and work.validator == self.me:
            self._settled(row, "executed on-chain", None)
        else:
            self._settled(row, f"overturned: on-chain {work.status.name} by {work.validator}", "overturned")

    def _settled(self, row: SentRejection, note: str, kind: str | None) -> None:
        with self.conn.transaction():
            store.mark_settled(self.conn, row.key, note)
        if kind is not None:
            self.counts[kind] += 1
            log.info(f"rejection {kind}", extra=_rejection_fields(row, self.me, note=note))

    # --- delivery -----------------------------------------------------------------------------

    def deliver(self, rows: Sequence[DueRow], send: Send) -> None:
        """Send `rows` in one transaction, those of them still Pending on-chain.

        A revert means the chain changed between our read and the send (another validator got
        there first): read again and retry once; refused again, one key at a time, so that one
        key cannot hold back the others. A key refused on its own stays decided with the error.
        """
        pending = self.settle(rows)
        refusal: ContractRevert | None = None
        for _ in range(2):
            if not pending:
                return
            try:
                started = time.time()
                self.sent(pending, send(pending), started)
                return
            except ContractRevert as revert:
                self._log_refusal(pending, revert)
                refusal = revert
            pending = self.settle(pending)
        if len(pending) == 1 and refusal is not None:
            self.failed(pending, str(refusal))
            return
        for row in pending:
            try:
                started = time.time()
                self.sent([row], send([row]), started)
            except ContractRevert as revert:
                self._log_refusal([row], revert)
                if self.settle([row]):
                    self.failed([row], str(revert))

    def settle(self, rows: Sequence[DueRow]) -> list[DueRow]:
        """Read each key's on-chain status; settle those that are not Pending; return the Pending ones."""
        works = [(row, self.client.pool.get_work(row.pool_id, row.work_key)) for row in rows]
        pending = [row for row, work in works if work.status is WorkStatus.PENDING]
        missing = [row for row, work in works if work.status is WorkStatus.NONE]
        decided = [(row, work) for row, work in works if work.status not in (WorkStatus.PENDING, WorkStatus.NONE)]
        if missing:
            # Not submitted on-chain (as far as this node sees): keep the verdict, retry later.
            self.failed(missing, "work key not found on-chain (status None)")
        if not decided:
            return pending
        with self.conn.transaction():
            for row, work in decided:
                self._settle_decided(row, work)
        return pending

    def _settle_decided(self, row: DueRow, work: Work) -> None:
        fields = _fields(row, self.me, work_validator=work.validator, status=work.status.name)
        if work.validator == self.me and work.status in _OURS[row.verdict]:
            note = f"found {work.status.name} on-chain by this validator (sent before a restart)"
            store.mark_sent(self.conn, [row.key], None, note=note)
            self._count("recovered", [row])
            log.info("verdict already on-chain, marked sent", extra=fields)
        else:
            why = f"on-chain {work.status.name} by {work.validator}"
            store.mark_superseded(self.conn, row.key, why)
            self._count("superseded", [row])
            log.info("verdict superseded", extra=fields)

    def sent(self, rows: Sequence[DueRow], receipt: TxReceipt, started: float | None = None) -> None:
        """Commit `rows` as sent by `receipt`'s transaction (before anything else is sent), sent at
        `started` (Unix seconds). Keys the contract skipped (`WorkSkipped`: judged by another
        transaction between our read and the send) are settled from their on-chain status instead."""
        skipped = {bytes(e.args["workKey"]) for e in self.client.pool.events(receipt) if e.name == "WorkSkipped"}
        if skipped:
            self.settle([row for row in rows if row.work_key in skipped])
            rows = [row for row in rows if row.work_key not in skipped]
            if not rows:
                return
        tx_hash = bytes(receipt["transactionHash"])
        with self.conn.transaction():
            store.mark_sent(self.conn, [row.key for row in rows], tx_hash, send_started=started)
        self._observe_stages(rows, receipt)
        kind = "invalidated" if rows[0].verdict == "invalid" else "attested"
        self._count(kind, rows)
        extra = _fields(rows[0], self.me, tx="0x" + tx_hash.hex(), count=len(rows))
        if len(rows) > 1:
            extra["work_key"] = ",".join("0x" + row.work_key.hex() for row in rows)
        log.info(f"work {kind}", extra=extra)

    def _observe_stages(self, rows: Sequence[DueRow], receipt: TxReceipt) -> None:
        """Export the verdict stages of `rows` (`proofpool.validator.stages`); the rows are committed
        as sent already, so a failure here only costs the metric."""
        try:
            block_time = float(self.client.w3.eth.get_block(receipt["blockNumber"])["timestamp"])
        except SEND_FAILURES as exc:
            log.warning("verdict block time not read: %s", exc)
            return
        with self.conn.transaction():  # leaves the connection idle, as the flush needs it
            stages.observe_sent(self.conn, [(row.pool_id, row.work_key) for row in rows], block_time)

    def failed(self, rows: Sequence[DueRow], error: str) -> None:
        """Leave `rows` decided with `error` recorded; a later flush tries them again."""
        if not rows:
            return
        with self.conn.transaction():
            store.record_send_error(self.conn, [row.key for row in rows], error)
        self._count("failed", rows)
        for row in rows:
            log.warning("verdict not sent, will retry", extra=_fields(row, self.me, error=error[:200]))

    def _count(self, kind: str, rows: Sequence[DueRow]) -> None:
        self.counts[kind] += len(rows)
        self.handled.update(row.key for row in rows)

    def _log_refusal(self, rows: Sequence[DueRow], revert: ContractRevert) -> None:
        log.warning(
            "chain refused the verdicts, reading their status again",
            extra=_fields(rows[0], self.me, count=len(rows), revert=str(revert)),
        )


def _key_fields(pool_id: int, work_key: bytes, validator: str, **more: object) -> dict[str, object]:
    """The `extra=` of a log line about one submission."""
    return {"pool": pool_id, "work_key": "0x" + work_key.hex(), "validator": validator, **more}


def _review_fields(review: Review, validator: str, **more: object) -> dict[str, object]:
    """... about one of our contests."""
    return _key_fields(review.pool_id, review.work_key, validator, **more)


def _rejection_fields(row: SentRejection, validator: str, **more: object) -> dict[str, object]:
    """... about one of our rejections."""
    return _key_fields(row.pool_id, row.work_key, validator, reason=row.reason, **more)


def _fields(row: DueRow, validator: str, **more: object) -> dict[str, object]:
    """... about a decided verdict."""
    return _key_fields(row.pool_id, row.work_key, validator, verdict=row.verdict, **more)
