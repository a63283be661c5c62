"""The Celery app factory and task names shared by the dispatcher (indexer) and the validators.

Both sides build their Celery app here so they agree on the broker, the serializer and the
delivery guarantees. The indexer only ever *sends* by name (`send_task`), so it never imports
validator code; the validator registers its task under the same name.

Delivery is at-least-once: `task_acks_late` + `task_reject_on_worker_lost` redeliver the task of a
worker that died mid-task (after `celery_visibility_timeout` on Redis), and the indexer's outbox
may send a task twice with the same deterministic id if it died between sending and marking the
row. Tasks therefore dedupe on their natural key (the work key): see docs/indexer.md.
"""

from __future__ import annotations

import uuid

from celery import Celery

from proofpool.infra.config import Settings

VALIDATE_SUBMISSION = "validator.validate_submission"
"""Task that validates one submission. Args: `pool_id` (int), `work_key` (0x-hex str)."""
SEND_VERDICTS = "validator.send_verdicts"
"""Task that sends a validator's decided verdicts on-chain (no args; idempotent)."""
REVIEW_REJECTION = "validator.review_rejection"
"""Task that reviews another validator's rejection. Args: `pool_id`, `work_key` (0x-hex), `rejected_block`."""

VALIDATE_QUEUE = "validate"
"""Validation tasks, consumed in parallel; the default queue of every proofpool Celery app."""
VERDICTS_QUEUE = "verdicts"
"""Prefix of the verdict-flush queues: one per validator key (`verdicts_queue`)."""


def verdicts_queue(validator: str) -> str:
    """The queue of one validator's verdict sender. Per key, because a flush sends only that key's
    verdicts: on a shared queue another validator's sender would take the task and leave this
    key's decided verdicts unsent."""
    return f"{VERDICTS_QUEUE}.{validator.lower()}"


REVIEWS_QUEUE = "reviews"
"""Prefix of the review queues: one per validator key (`reviews_queue`)."""


def reviews_queue(validator: str) -> str:
    """The queue of one validator's reviews, consumed by its validation slots. Per key, because every
    validator reviews every rejection: on a shared queue one validator would take another's review."""
    return f"{REVIEWS_QUEUE}.{validator.lower()}"


TASK_ID_NAMESPACE = uuid.UUID("5d0b4a7e-3f3c-4a55-9a55-70726f6f6670")
"""Namespace of the deterministic task ids derived from outbox dedupe keys."""


def make_celery(settings: Settings, name: str) -> Celery:
    """A Celery app on `settings.celery_broker_url`: JSON only, late acks, one task per worker slot.

    `task_ignore_result`: verdicts live in Postgres and on-chain, nobody reads Celery results.
    """
    app = Celery(name, broker=settings.celery_broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        # kombu re-queues a dead worker's unacked tasks when a consumer starts, then every
        # interval x throttle seconds (10 x 10 by default): throttle 1 brings a lost task back
        # within the visibility timeout + 10 s, as docs/indexer.md says.
        broker_transport_options={
            "visibility_timeout": settings.celery_visibility_timeout,
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        enable_utc=True,
        task_default_queue=VALIDATE_QUEUE,
        worker_send_task_events=True,  # Flower and `celery events` see every task
        task_send_sent_event=True,
    )
    return app


def task_id_for(dedupe_key: str) -> str:
    """The Celery task id of an outbox row: a UUID5 of its dedupe key, the same on every re-send."""
    return str(uuid.uuid5(TASK_ID_NAMESPACE, dedupe_key))
