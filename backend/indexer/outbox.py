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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import psycopg
from celery import Celery
from kombu.exceptions import OperationalError as BrokerError
from proofpool.backend.db import outbox as outbox_db
from proofpool.backend.db.outbox import OutboxTask, PendingRow
from proofpool.backend.indexer.records import IndexedEvent
from proofpool.backend.indexer.session import connect
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


class DispatchLoop(threading.Thread):
    """Runs a `Dispatcher` beside the indexer, on its own connection, so indexing never waits
    for the broker. Woken by `notify()` after each indexing commit, else every `poll_interval`.

    PostgreSQL and broker outages are waited out with capped backoff (rows stay unsent meanwhile).
    Any other error stops the loop and is kept in `error` for the indexer to raise.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        database_url: str,
        poll_interval: float = 1.0,
        max_backoff: float = 30.0,
        session_timeout: float = 60.0,
        requeue_interval: float = 30.0,
    ) -> None:
        super().__init__(name="outbox-dispatch", daemon=True)
        self.dispatcher = dispatcher
        self.database_url = database_url
        self.stop = threading.Event()
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.session_timeout = session_timeout
        """Bounds each statement and idle period of the dispatcher's session (`proofpool.backend.indexer.session`)."""
        self.sent = 0
        self.requeued = 0
        self.retries = 0
        self.error: BaseException | None = None
        self.requeue_interval = requeue_interval
        """Seconds between two looks for validation tasks nobody took up (`Dispatcher.requeue_lost`)."""
        self._next_requeue = time.monotonic() + requeue_interval
        self._wake = threading.Event()
        self._draining = False

    def notify(self) -> None:
        """New rows were committed."""
        self._wake.set()

    def drain(self, stop: threading.Event) -> None:
        """Send what is pending, then end; returns when the thread has ended or `stop` is set."""
        self._draining = True
        self._wake.set()
        while self.is_alive() and not stop.is_set():
            self.join(0.1)

    def halt(self) -> None:
        """End after the batch in flight (unsent rows stay for the next run)."""
        self.stop.set()
        self._wake.set()
        self.join()

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        delay = 0.2
        try:
            while not self.stop.is_set():
                self._wake.clear()
                try:
                    if conn is None or conn.closed:
                        conn = connect(
                            self.database_url, application_name=DISPATCH_APP_NAME, session_timeout=self.session_timeout
                        )
                    if time.monotonic() >= self._next_requeue:
                        self.requeued += self.dispatcher.requeue_lost(conn)
                        self._next_requeue = time.monotonic() + self.requeue_interval
                    sent = self.dispatcher.dispatch_pending(conn)
                    delay = 0.2
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._backoff("PostgreSQL", exc, delay)
                    delay = min(delay * 2, self.max_backoff)
                    continue
                except BrokerError as exc:
                    self._backoff("the Celery broker", exc, delay)
                    delay = min(delay * 2, self.max_backoff)
                    continue
                self.sent += sent
                if sent == 0:
                    if self._draining:
                        return
                    self._wake.wait(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - not swallowed: the indexer thread re-raises it
            self.error = exc
        finally:
            if conn is not None:
                conn.close()

    def _backoff(self, what: str, exc: BaseException, delay: float) -> None:
        self.retries += 1
        log.warning(f"dispatch waiting for {what}", extra={"error": str(exc).strip()[:200], "retry_in": delay})
        self.stop.wait(delay)
