"""Waiting, bounded, for the backend's indexer to see a node's (re)join.

`joinPool` is a transaction; the backend learns of it only once its indexer has followed the
chain past that block. Until then it still has the node's old membership: uploads are refused
with `403 not_active_member` (e.g. `state: ejected` right after a rejoin) and heartbeats answer
state `ejected`, although the chain already has the node as an active member. Both are waited
out, with a log line that says so, up to `JOIN_INDEX_TIMEOUT` seconds from the first such
answer: an indexer that is down or far behind ends the worker with one line instead of a worker
that waits forever. Any answer that shows the membership ends the wait (`JoinIndexWait.seen`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from proofpool.core.errors import ProofpoolError
from proofpool.infra.http.signed_client import ApiRefused

log = logging.getLogger(__name__)

JOIN_INDEX_TIMEOUT = 300.0
"""Seconds the backend may keep answering as if the node had not joined before the worker gives up."""
NOT_ACTIVE_MEMBER = "not_active_member"
"""The upload refusal of a node the backend does not (yet) count as an active member of the pool."""


class JoinNotIndexed(ProofpoolError):
    """The backend kept treating the node as a non-member long after it (re)joined on-chain."""


class JoinIndexWait:
    """How long the backend has been answering as if this node were not a member of the pool.

    One per caller thread's view (the heartbeat loop, the submitter); thread-safe all the same.
    """

    def __init__(
        self,
        pool_id: int,
        node: str,
        what: str,
        timeout: float = JOIN_INDEX_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool_id, self.node, self.what, self.timeout = pool_id, node, what, timeout
        self._clock = clock
        self._since: float | None = None
        self._answers = 0
        self._lock = threading.Lock()

    def waiting(self, answer: str) -> int:
        """Record one more answer `answer` without the membership and log that the worker waits;
        returns how many such answers came before it in this wait (for a backoff delay).
        `JoinNotIndexed` once the wait is longer than `timeout`."""
        with self._lock:
            now = self._clock()
            if self._since is None:
                self._since, self._answers = now, 0
            waited, answers = now - self._since, self._answers
            self._answers += 1
        if waited >= self.timeout:
            raise JoinNotIndexed(
                f"the backend still answers {self.what} of node {self.node} as if it were not a member of pool "
                f"{self.pool_id} after {waited:.0f} s ({answer}); if the node joined on-chain (`proofpool provider "
                "status`), the backend's indexer is not following the chain: its /healthz shows chain_lag_blocks"
            )
        log.warning(
            "waiting for the backend's indexer to see the node's join to pool %d (%s; %.0f s so far, at most %.0f s)",
            self.pool_id,
            answer,
            waited,
            self.timeout,
            extra={"pool": self.pool_id, "node": self.node, "waited": round(waited, 1)},
        )
        return answers

    def seen(self) -> None:
        """The backend answered as for a member: the next refusal starts a new wait."""
        with self._lock:
            self._since = None

    def transient(self, exc: BaseException) -> bool:
        """For `retry`: True for a `not_active_member` refusal within the bound (logged as a wait),
        False for any other failure; `JoinNotIndexed` past the bound."""
        if not (isinstance(exc, ApiRefused) and exc.error == NOT_ACTIVE_MEMBER):
            return False
        self.waiting(f"{exc.status} {exc.error}: {exc.detail}")
        return True
