"""The two Celery tasks: a thin shell over `validator.pipeline` and `validator.verdicts`.

`validate_submission(pool_id, work_key)` decides and records a verdict, then asks the verdict
sender to flush. `send_verdicts()` sends what is due and, while accepted keys wait for their batch
to fill, schedules itself again for when the oldest is due. Both are idempotent: a redelivered
`validate_submission` finds its recorded decision, and a flush reads the chain before sending.
Only named transient errors are retried; a malformed file is a verdict, never an exception.
Their soft time limits are enforced by `TimeLimitedTask` (the threads and solo pools ignore them):
`SoftTimeLimitExceeded` fails the task like any other unexpected error.
"""

from __future__ import annotations

import logging

import psycopg
import requests
from celery import Task

from proofpool.broker import SEND_VERDICTS, VALIDATE_SUBMISSION, verdicts_queue
from proofpool.chain.errors import NonceConflict, TxTimeout
from proofpool.errors import ServiceUnavailable
from validator import metrics
from validator.celery_app import TimeLimitedTask, app
from validator.models import ModelUnavailable
from validator.pipeline import FileNotYetAvailable, HeldByAnother, Outcome, validate
from validator.resources import resources
from validator.submissions import SubmissionNotIndexed
from validator.verdicts import FlushBusy, flush_verdicts

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


@app.task(
    name=VALIDATE_SUBMISSION,
    base=TimeLimitedTask,  # the validate worker runs the threads pool, which ignores soft_time_limit
    bind=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=False,
    max_retries=40,
    soft_time_limit=600,
)
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
        metrics.VALIDATION_SECONDS.observe(result.seconds)
        metrics.VALIDATED_TOKENS.inc(verdict.checked_tokens)
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
    if result.failed:
        log.warning("verdicts left for the next flush", extra={"validator": res.address, "failed": result.failed})
        self.apply_async(countdown=FAILED_SEND_RETRY, queue=verdicts_queue(res.address))
    elif result.next_due_in is not None:
        self.apply_async(countdown=max(0.1, result.next_due_in), queue=verdicts_queue(res.address))
