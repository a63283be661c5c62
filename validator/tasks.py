"""The Celery tasks: a thin shell over the validator's `pipeline`, `review` and `verdicts`.

`validate_submission(pool_id, work_key)` decides and records a verdict, then asks the verdict
sender to flush. `review_rejection(pool_id, work_key, rejected_block)` recomputes a file another
validator rejected and records whether to contest. `send_verdicts()` sends what is due, queues
reviews of new rejections, and schedules itself again for when the oldest waiting key is due;
one periodic flush per key (`_tick`) runs every `validator_review_interval` on top. All are
idempotent: a redelivered task finds its recorded decision, and a flush reads the chain before
sending.
Only named transient errors are retried; a malformed file is a verdict, never an exception.
Their soft time limits are enforced by `TimeLimitedTask` (the threads and solo pools ignore them):
`SoftTimeLimitExceeded` fails the task like any other unexpected error.
"""

from __future__ import annotations

import logging

import psycopg
import redis
import requests
from celery import Task
from proofpool.validator import metrics, review_store, stages
from proofpool.validator.celery_app import TimeLimitedTask, app
from proofpool.validator.models import ModelUnavailable
from proofpool.validator.pipeline import FileNotYetAvailable, HeldByAnother, Outcome, validate
from proofpool.validator.resources import Resources, resources
from proofpool.validator.review import ReviewOutcome, review
from proofpool.validator.review_store import Review
from proofpool.validator.submissions import SubmissionNotIndexed
from proofpool.validator.verdicts import FlushBusy, flush_verdicts

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.broker import REVIEW_REJECTION, SEND_VERDICTS, VALIDATE_SUBMISSION, reviews_queue, verdicts_queue
from proofpool.infra.chain.errors import NonceConflict, TxTimeout

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = (
    ServiceUnavailable,  # RPC, store or database unreachable
    requests.ConnectionError,
    requests.Timeout,
    TxTimeout,
    NonceConflict,
    psycopg.OperationalError,
    SubmissionNotIndexed,  # indexer lag, or a reorg removed it (retried until it reappears or gives up)
    FileNotYetAvailable,  # until the missing-file deadline, then judged `missing`
    ModelUnavailable,  # the pool's checkpoint cannot be fetched now: never the submitter's fault
    HeldByAnother,  # another validator's undecided claim: until it decides or its lease expires
)

FAILED_SEND_RETRY = 5.0
"""Seconds before verdicts whose transaction failed (RPC down) are tried again."""


JUDGING_TASK: dict[str, object] = {
    "base": TimeLimitedTask,  # the validate worker runs the threads pool, which ignores soft_time_limit
    "bind": True,
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": False,
    "max_retries": 40,
    "soft_time_limit": 600,
}
"""Options of the tasks that judge a file in a validation slot (a submission, or a review)."""


@app.task(name=VALIDATE_SUBMISSION, **JUDGING_TASK)
def validate_submission(self: Task, pool_id: int, work_key: str) -> None:
    """Validate one submission (args from the indexer's outbox) and record the verdict."""
    key = bytes.fromhex(work_key.removeprefix("0x"))
    if self.request.retries:
        metrics.TASK_RETRIES.labels("retry").inc()
    result = validate(resources(), pool_id, key)
    verdict = result.verdict
    metrics.VALIDATIONS.labels(
        result.outcome.value,
        "" if verdict is None else ("accepted" if verdict.accepted else "invalid"),
        "" if verdict is None or verdict.reason is None else verdict.reason,
    ).inc()
    if result.outcome is Outcome.DECIDED and verdict is not None:
        app.send_task(SEND_VERDICTS, queue=verdicts_queue(resources().address))
        metrics.VALIDATION_SECONDS.observe(result.seconds)
        metrics.VALIDATED_TOKENS.inc(verdict.checked_tokens)
        with resources().connection() as conn:
            stages.observe_decided(conn, pool_id, key)


@app.task(name=REVIEW_REJECTION, **JUDGING_TASK)
def review_rejection(self: Task, pool_id: int, work_key: str, rejected_block: int) -> None:
    """Recompute a file another validator rejected; record a contest if it is valid."""
    key = bytes.fromhex(work_key.removeprefix("0x"))
    if self.request.retries:
        metrics.TASK_RETRIES.labels("retry").inc()
    outcome = review(resources(), Review(pool_id, key, rejected_block))
    metrics.REVIEWS.labels(outcome.value).inc()
    if outcome is ReviewOutcome.CONTEST:
        app.send_task(SEND_VERDICTS, queue=verdicts_queue(resources().address))


@app.task(
    name=SEND_VERDICTS,
    base=TimeLimitedTask,  # the verdict sender runs the solo pool, which ignores soft_time_limit
    bind=True,
    autoretry_for=(*TRANSIENT_ERRORS, FlushBusy),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=False,
    max_retries=None,
    soft_time_limit=300,
)
def send_verdicts(self: Task) -> None:
    """Send this validator's due verdicts; reschedule while accepted keys wait for their batch."""
    res = resources()
    with res.pool.connection() as conn:
        conn.autocommit = True  # the flush commits after every transaction it sends
        try:
            result = flush_verdicts(
                conn, res.client, max_batch=res.settings.verdict_batch, max_wait=res.settings.verdict_max_wait
            )
        finally:
            conn.autocommit = False
    metrics.VERDICT_TXS.labels("attested").inc(result.attested)
    metrics.VERDICT_TXS.labels("invalidated").inc(result.invalidated)
    metrics.VERDICT_TXS.labels("superseded").inc(result.superseded)
    metrics.VERDICT_TXS.labels("executed").inc(result.executed)
    metrics.VERDICT_TXS.labels("contested").inc(result.contested)
    _queue_reviews(res)
    if result.failed:
        log.warning("verdicts left for the next flush", extra={"validator": res.address, "failed": result.failed})
        self.apply_async(countdown=FAILED_SEND_RETRY, queue=verdicts_queue(res.address))
    elif result.next_due_in is not None:
        self.apply_async(countdown=max(0.1, result.next_due_in), queue=verdicts_queue(res.address))
    _tick(self, res)


def _tick(task: Task, res: Resources) -> None:
    """Keep one periodic flush scheduled per key: other validators' rejections and our own
    challenge windows need a look even when no submission wakes the sender. A Redis key that lives
    one interval gates it, so the flushes that every validation task triggers (and a tick the
    broker redelivers) do not each start a chain of their own."""
    interval = res.settings.validator_review_interval
    gate = redis.Redis.from_url(res.settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        first = gate.set(f"proofpool:validator:{res.address.lower()}:tick", "1", nx=True, px=int(interval * 1000))
    except redis.RedisError as exc:  # the next validation task's flush tries again
        log.warning("periodic flush not scheduled: %s", exc, extra={"validator": res.address})
        return
    finally:
        gate.close()
    if first:
        task.apply_async(countdown=interval, queue=verdicts_queue(res.address))


def _queue_reviews(res: Resources) -> None:
    """Hand the rejections this validator has not reviewed yet to its validation slots."""
    with res.connection() as conn:
        queued = review_store.to_review(conn, res.address, lease_seconds=res.settings.validator_lease)
    for target in queued:
        args = [target.pool_id, "0x" + target.work_key.hex(), target.rejected_block]
        app.send_task(REVIEW_REJECTION, args=args, queue=reviews_queue(res.address))
