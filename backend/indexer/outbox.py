"""Validation tasks through the outbox: queued with the events, sent to Celery after commit.

Guarantee (docs/indexer.md, "Dispatch"): every `WorkSubmitted` and every `WorkBundleSubmitted`
(a bundle is judged as one submission, under its bundle key) gets exactly one outbox row,
written in the transaction that stores the event, so a row exists iff the event is indexed.
The dispatcher sends committed rows only, then marks them sent in a second transaction:

- killed after the indexing commit and before sending: the row is unsent, the next run sends it
  (once);
- killed after sending and before the mark commits: the next run sends it again, with the same
  Celery task id (UUID5 of the dedupe key). Delivery is therefore at-least-once with a
  deterministic id; the validator makes the effect exactly-once by deduping on the work key
  (one verdict per work key, chain state read before any transaction).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import OperationalError as BrokerError
from proofpool.backend.db import outbox as outbox_db
from proofpool.backend.db.outbox import OutboxTask, PendingRow
from proofpool.backend.indexer.records import IndexedEvent
from proofpool.backend.indexer.side_loop import SideLoop
from psycopg import Connection

from proofpool.infra.broker import VALIDATE_SUBMISSION, task_id_for

log = logging.getLogger(__name__)

DISPATCH_APP_NAME = "proofpool-indexer-dispatch"
"""How the dispatcher names its PostgreSQL session (pg_stat_activity)."""

Send = Callable[[PendingRow], None]
"""Sends one row; raises when the broker does not take it."""


SUBMISSION_EVENTS = frozenset({"WorkSubmitted", "WorkBundleSubmitted"})
"""ComputePool events that create a submission, each to be judged once (a bundle as a whole)."""


def validation_tasks(events: Sequence[IndexedEvent]) -> list[OutboxTask]:
    """One `validate_submission` task per `WorkSubmitted` or `WorkBundleSubmitted` among `events`:
    the same task name and arguments for both, the work key being the bundle key for a bundle."""
    tasks = []
    for event in events:
        if event.name not in SUBMISSION_EVENTS or event.contract != "ComputePool":
            continue
        pool_id, work_key = int(event.args["poolId"]), str(event.args["workKey"]).lower()
        tasks.append(
            OutboxTask(
                task=VALIDATE_SUBMISSION,
                args=[pool_id, work_key],
                dedupe_key=f"{pool_id}:{work_key}",
                block_number=event.block_number,
            )
        )
    return tasks


class Sender(Protocol):
    """Opens a sending session (one broker connection) for a batch of rows."""

    def session(self) -> AbstractContextManager[Send]: ...


class CelerySender:
    """Sends outbox rows by task name with their deterministic ids; the worker side is never imported."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    @contextmanager
    def session(self) -> Iterator[Send]:
        # One producer (one broker connection) per batch: about 4x faster than one per task.
        with self.app.producer_or_acquire() as producer:

            def send(row: PendingRow) -> None:
                self.app.send_task(row.task, args=row.args, task_id=task_id_for(row.dedupe_key), producer=producer)

            yield send


def celery_sender(app: Celery) -> CelerySender:
    return CelerySender(app)


class Dispatcher:
    """Sends unsent outbox rows, oldest first, `batch` per transaction; and sends again the validation
    tasks no validator took up within `redispatch_after` seconds (None: never), see `requeue_lost`."""

    def __init__(self, sender: Sender, batch: int = 200, redispatch_after: float | None = None) -> None:
        self.sender = sender
        self.batch = batch
        self.redispatch_after = redispatch_after

    def requeue_lost(self, conn: Connection) -> int:
        """Mark unsent the validation tasks sent `redispatch_after` seconds ago whose submission is
        still pending and unclaimed (or whose claim's lease ran out), so `dispatch_pending` sends them
        again under the same task id. The broker's redelivery covers a worker that dies holding a
        task; this covers a task the broker itself lost. Returns how many were requeued."""
        if self.redispatch_after is None:
            return 0
        with conn.transaction():
            keys = outbox_db.requeue_unclaimed(conn, VALIDATE_SUBMISSION, self.redispatch_after, self.batch)
        if keys:
            log.warning(
                "validation tasks sent again: still pending, no validator took them up",
                extra={"count": len(keys), "first_key": keys[0], "after_seconds": self.redispatch_after},
            )
        return len(keys)

    def dispatch_pending(self, conn: Connection, limit: int | None = None) -> int:
        """Send and mark rows until none is left (or `limit` were sent); returns how many were sent.

        Broker errors propagate after the rows of the failed batch stay unsent; callers retry later.
        """
        sent = 0
        while limit is None or sent < limit:
            size = self.batch if limit is None else min(self.batch, limit - sent)
            with conn.transaction():
                rows = outbox_db.claim_pending(conn, size)
                if not rows:
                    break
                started = time.monotonic()
                with self.sender.session() as send:
                    for row in rows:
                        send(row)
                        log.debug("task sent", extra=_row_fields(row))
                outbox_db.mark_dispatched(conn, [row.id for row in rows])
            sent += len(rows)
            log.info(
                "tasks dispatched",
                extra={"count": len(rows), "first_key": rows[0].dedupe_key, "seconds": time.monotonic() - started},
            )
        return sent


def _row_fields(row: PendingRow) -> dict[str, Any]:
    fields: dict[str, Any] = {"task": row.task, "task_id": task_id_for(row.dedupe_key)}
    if row.task == VALIDATE_SUBMISSION and len(row.args) == 2:
        fields.update(pool=row.args[0], work_key=row.args[1])
    return fields


class DispatchLoop(SideLoop):
    """Runs a `Dispatcher` beside the indexer (`proofpool.backend.indexer.side_loop`): sends what the
    indexer committed, and every `requeue_interval` seconds looks for validation tasks nobody took up
    (`Dispatcher.requeue_lost`). A broker outage is waited out (rows stay unsent meanwhile)."""

    what = "dispatch"
    application_name = DISPATCH_APP_NAME

    def __init__(
        self,
        dispatcher: Dispatcher,
        database_url: str,
        poll_interval: float = 1.0,
        max_backoff: float = 30.0,
        session_timeout: float = 60.0,
        requeue_interval: float = 30.0,
    ) -> None:
        super().__init__("outbox-dispatch", database_url, poll_interval, max_backoff, session_timeout)
        self.dispatcher = dispatcher
        self.sent = 0
        self.requeued = 0
        self.requeue_interval = requeue_interval
        self._next_requeue = time.monotonic() + requeue_interval

    def work(self, conn: Connection) -> int:
        if time.monotonic() >= self._next_requeue:
            self.requeued += self.dispatcher.requeue_lost(conn)
            self._next_requeue = time.monotonic() + self.requeue_interval
        sent = self.dispatcher.dispatch_pending(conn)
        self.sent += sent
        return sent

    def outage(self, exc: Exception) -> str | None:
        return "the Celery broker" if isinstance(exc, BrokerError) else None
