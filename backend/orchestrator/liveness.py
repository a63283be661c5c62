"""Heartbeat liveness in Redis: one sorted set, node address -> unix time of its last heartbeat.

A heartbeat is one ZADD (O(log n)), so 1,000 nodes every few seconds cost nothing; reading
many nodes at once is one ZMSCORE. Nothing here is durable on purpose: after a Redis restart
the "epoch" key is recreated with the current time and counts as everyone's last sign of life,
so a lost set gives every member a fresh `dead_after` grace instead of ejecting them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

HEARTBEATS_KEY = "proofpool:heartbeats"
"""Sorted set: member = checksummed node address, score = unix seconds of its last heartbeat."""
EPOCH_KEY = "proofpool:liveness-epoch"
"""Unix seconds since when heartbeats have been tracked in this Redis (set once, NX)."""


async def record_heartbeat(redis: Redis, node: str, now: float) -> None:
    """Remember that `node` heartbeated at `now`."""
    await redis.zadd(HEARTBEATS_KEY, {node: now})


async def last_heartbeat(redis: Redis, node: str) -> float | None:
    """Unix time of the node's last heartbeat, or None."""
    score = await redis.zscore(HEARTBEATS_KEY, node)
    return None if score is None else float(score)


async def last_heartbeats(redis: Redis, nodes: Sequence[str]) -> dict[str, float | None]:
    """Last heartbeat of each of `nodes` in one round trip."""
    if not nodes:
        return {}
    scores = await redis.zmscore(HEARTBEATS_KEY, list(nodes))
    return {node: None if score is None else float(score) for node, score in zip(nodes, scores, strict=True)}


async def tracking_since(redis: Redis, now: float) -> float:
    """Since when this Redis tracks heartbeats; starts the clock at `now` if nobody has."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(EPOCH_KEY, repr(now), nx=True)
        pipe.get(EPOCH_KEY)
        _, value = await pipe.execute()
    return float(value)


async def forget(redis: Redis, nodes: Sequence[str]) -> None:
    """Drop the liveness of `nodes` (tests, and nodes removed for good)."""
    if nodes:
        await redis.zrem(HEARTBEATS_KEY, *nodes)
