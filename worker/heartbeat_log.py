"""One log line about heartbeats at most every `HEARTBEAT_LOG_INTERVAL` seconds.

A busy worker heartbeats once per batch and an idle one every heartbeat interval; a line per
heartbeat would drown the log, and none at all leaves an operator tailing it unable to tell a
live idle worker from a hung one. So the first answered heartbeat is logged, then one line a
minute summing up the ones since: `heartbeat ok: state healthy, pool 1, checkpoint v3, 12
heartbeats since last line`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from proofpool.infra.http.node_api import Heartbeat

log = logging.getLogger(__name__)

HEARTBEAT_LOG_INTERVAL = 60.0
"""Least seconds between two heartbeat lines."""


class HeartbeatLog:
    """Counts answered heartbeats and logs the latest one at most every `interval` seconds.

    Heartbeats are answered on the loop's thread or the lookahead's, so counting takes a lock.
    """

    def __init__(
        self,
        pool_id: int,
        node: str,
        interval: float = HEARTBEAT_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool_id, self.node, self.interval = pool_id, node, interval
        self._clock = clock
        self._count = 0
        self._logged_at: float | None = None
        self._lock = threading.Lock()

    def answered(self, beat: Heartbeat) -> None:
        """Count `beat`; log it with the count since the last line when that line is old enough."""
        with self._lock:
            self._count += 1
            now = self._clock()
            if self._logged_at is not None and now - self._logged_at < self.interval:
                return
            count, self._count, self._logged_at = self._count, 0, now
        log.info("%s", heartbeat_line(beat, self.pool_id, count), extra=self._fields(beat, count))

    def _fields(self, beat: Heartbeat, count: int) -> dict[str, object]:
        a = beat.assignment
        return {
            "pool": self.pool_id,
            "node": self.node,
            "state": beat.state,
            "version": None if a is None else a.checkpoint_version,
            "heartbeats": count,
        }


def heartbeat_line(beat: Heartbeat, pool_id: int, count: int) -> str:
    """`heartbeat ok: state healthy, pool 1, checkpoint v3, 12 heartbeats since last line`."""
    a = beat.assignment
    work = "no assignment" if a is None else f"checkpoint v{a.checkpoint_version}"
    heartbeats = f"{count} heartbeat{'s' * (count != 1)} since last line"
    return f"heartbeat ok: state {beat.state}, pool {pool_id}, {work}, {heartbeats}"
