"""Retry with exponential backoff for the worker's calls to the backend, the store and the chain.

Only errors named transient are retried (a service down, a timeout, a 5xx or 429); anything
else propagates at once. A refusal with a Retry-After (the backend's upload rate limit) waits
exactly that long instead of the backoff: the limit frees a slot at a known time, and waiting
for it paces the worker to the limit rather than to a backoff that overshoots it. Every wait
can be cut short by the worker's stop event, so SIGTERM is honoured within one try rather than
after a full retry budget; the try itself still runs, so a batch past generation is uploaded
and submitted if the services answer at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import requests

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.infra.chain.errors import NonceConflict, TxTimeout
from proofpool.infra.http.signed_client import ApiRefused

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_AFTER_MAX = 300.0
"""Longest Retry-After honoured as given, in seconds; a longer one is waited this long."""


class Stopped(ProofpoolError):
    """The worker was asked to stop while waiting to retry."""


@dataclass(frozen=True)
class Backoff:
    """Waits of `initial * factor**n`, at most `maximum` seconds, for at most `attempts` tries."""

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    attempts: int | None = None
    """None: retry until stopped (what a long-running worker wants for a service that is down)."""

    def delay(self, attempt: int) -> float:
        return min(self.maximum, self.initial * self.factor**attempt)


def is_transient(exc: BaseException) -> bool:
    """True for failures that may go away by themselves: worth waiting for."""
    if isinstance(exc, ApiRefused):
        return exc.status >= 500 or exc.status == 429
    return isinstance(
        exc,
        ServiceUnavailable  # backend, store or RPC unreachable (StorageUnavailable is one)
        | TxTimeout
        | NonceConflict
        | requests.ConnectionError
        | requests.Timeout
        | ConnectionError
        | TimeoutError,
    )


def retry(
    fn: Callable[[], T],
    *,
    what: str,
    stop: threading.Event,
    backoff: Backoff = Backoff(),
    transient: Callable[[BaseException], bool] = is_transient,
    context: dict[str, Any] | None = None,
) -> T:
    """Call `fn` until it succeeds, retrying the failures `transient` accepts; `Stopped` instead of
    waiting for a retry once `stop` is set."""
    attempt = 0
    while True:  # the first try runs even after a stop request: a step in progress gets to finish
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or (backoff.attempts is not None and attempt + 1 >= backoff.attempts):
                raise
            wait = retry_wait(exc, backoff, attempt)
            attempt += 1
            log.warning(
                "%s failed, retrying in %.1f s: %s",
                what,
                wait,
                exc,
                extra={**(context or {}), "attempt": attempt, "error": type(exc).__name__},
            )
            if stop.wait(wait):
                raise Stopped(f"stopped while retrying {what}") from exc


def retry_wait(exc: BaseException, backoff: Backoff, attempt: int) -> float:
    """Seconds before try `attempt + 1`: the refusal's Retry-After when it has one (at most
    `RETRY_AFTER_MAX`), else the backoff's delay."""
    retry_after = exc.retry_after if isinstance(exc, ApiRefused) else None
    if retry_after is None:
        return backoff.delay(attempt)
    return min(retry_after, RETRY_AFTER_MAX)


def sleep_unless_stopped(stop: threading.Event, seconds: float) -> None:
    """Sleep, but return early (raising `Stopped`) once the worker is asked to stop."""
    started = time.monotonic()
    if stop.wait(seconds):
        raise Stopped(f"stopped after {time.monotonic() - started:.1f} s of waiting")
