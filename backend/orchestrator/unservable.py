"""Assignments a node reported it cannot serve (unknown model version, bad manifest hash, ...).

The node skips such an assignment and says why in its next heartbeat; we keep the latest report
per node in one Redis hash so operators see it in the node's status and in the logs, without a
schema change. It is advisory: the orchestrator keeps handing out the same assignment, since the
fix (publishing a good checkpoint, or the node fetching it) happens elsewhere.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from redis.asyncio import Redis

UNSERVABLE_KEY = "proofpool:unservable"
"""Hash: checksummed node address -> JSON of its latest `UnservableReport`."""


@dataclass(frozen=True)
class UnservableReport:
    """A node's reason for skipping the assignment of (`checkpoint_version`, `batch`)."""

    checkpoint_version: int
    batch: int
    reason: str
    detail: str
    reported_at: float


async def record(redis: Redis, node: str, report: UnservableReport) -> None:
    """Keep `report` as the node's latest."""
    await redis.hset(UNSERVABLE_KEY, node, json.dumps(asdict(report)))


async def latest(redis: Redis, node: str) -> UnservableReport | None:
    """The node's latest report, if it made one."""
    raw = await redis.hget(UNSERVABLE_KEY, node)
    return None if raw is None else UnservableReport(**json.loads(raw))


async def clear(redis: Redis, node: str) -> None:
    """Forget the node's report (it served an assignment since)."""
    await redis.hdel(UNSERVABLE_KEY, node)
