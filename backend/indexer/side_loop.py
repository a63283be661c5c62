"""Work the indexer hands to a thread of its own, so indexing never waits for it: sending the outbox's
tasks to the broker (`proofpool.backend.indexer.outbox.DispatchLoop`) and reading each checkpoint's
metrics from the object store (`proofpool.backend.indexer.checkpoint_metrics.CheckpointMetricsLoop`).

Each runs on its own PostgreSQL session and does its `work` when the indexer commits (`notify`), else
every `poll_interval`. An outage of PostgreSQL or of the service the loop talks to is waited out with
capped backoff; any other error stops the loop and is kept in `error` for the indexer to raise.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from proofpool.backend.indexer.session import connect
from psycopg import Connection

log = logging.getLogger(__name__)


class SideLoop(threading.Thread):
    """The loop (module docstring); a subclass says what one pass does (`work`) and which errors of
    its service are outages to wait out (`outage`)."""

    what: str = "side loop"
    """Names the loop in its log lines ("dispatch", "checkpoint metrics")."""
    application_name: str = "proofpool-indexer-side"
    """How its PostgreSQL session is named (pg_stat_activity)."""

    def __init__(
        self,
        name: str,
        database_url: str,
        poll_interval: float = 1.0,
        max_backoff: float = 30.0,
        session_timeout: float = 60.0,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.database_url = database_url
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.session_timeout = session_timeout
        """Bounds each statement and idle period of the loop's session (`proofpool.backend.indexer.session`)."""
        self.stop = threading.Event()
        self.retries = 0
        self.error: BaseException | None = None
        self._wake = threading.Event()
        self._draining = False

    def work(self, conn: Connection) -> int:
        """One pass; returns how much it did (0: nothing left for now)."""
        raise NotImplementedError

    def outage(self, exc: Exception) -> str | None:
        """The service `exc` says is down ("the Celery broker"), or None when it is no outage."""
        return None

    def give_up_draining(self, what: str) -> bool:
        """Whether a drain (the indexer's `--once` ending) stops at an outage of `what` instead of
        waiting for it: work left undone then waits for the next run."""
        return False

    def notify(self) -> None:
        """The indexer committed new events."""
        self._wake.set()

    def drain(self, stop: threading.Event) -> None:
        """Do what is due, then end; returns when the thread has ended or `stop` is set."""
        self._draining = True
        self._wake.set()
        while self.is_alive() and not stop.is_set():
            self.join(0.1)

    def halt(self) -> None:
        """End after the pass in flight."""
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
                        url, name, timeout = self.database_url, self.application_name, self.session_timeout
                        conn = connect(url, application_name=name, session_timeout=timeout)
                    done = self.work(conn)
                    delay = 0.2
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._backoff("PostgreSQL", exc, delay)
                    delay = min(delay * 2, self.max_backoff)
                    continue
                except Exception as exc:
                    down = self.outage(exc)
                    if down is None:
                        raise
                    if self._draining and self.give_up_draining(down):
                        log.warning(f"{self.what} left for the next run", extra={"error": str(exc).strip()[:200]})
                        return
                    self._backoff(down, exc, delay)
                    delay = min(delay * 2, self.max_backoff)
                    continue
                if done == 0:
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
        log.warning(f"{self.what} waiting for {what}", extra={"error": str(exc).strip()[:200], "retry_in": delay})
        self.stop.wait(delay)
