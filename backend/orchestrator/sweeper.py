"""The sweeper: ejects members whose heartbeats stopped (state Dead) from the pools this
backend manages, on-chain, with the pool manager key.

It runs as its own process (`proofpool backend sweep`), not inside the API workers: the API
runs several workers and ejecting is a chain transaction that blocks for seconds. Two sweepers
may run at once (e.g. during a redeploy): a Redis claim per (pool, node) makes one of them act,
and the claim's lifetime also stops re-ejecting a node the indexer has not yet seen ejected.
Before any transaction the member is read from the chain, so an eject never races a leave.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from proofpool.backend.db import nodes as db
from proofpool.backend.orchestrator import liveness
from proofpool.backend.orchestrator.manager_key import manager_key
from proofpool.backend.orchestrator.states import Liveness, NodeState, latest, node_state
from psycopg import AsyncConnection
from redis.asyncio import Redis

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.bindings import MemberState
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.config import Settings

log = logging.getLogger(__name__)

CLAIM_TTL = 300
"""Seconds a sweeper's claim on ejecting one member lasts (covers tx + indexer lag)."""

Ejector = Callable[[int, str], str | None]
"""`eject(pool_id, node)` -> tx hash (0x-hex), or None when the chain says it is no longer active."""

Outcome = Literal["ejected", "not_active_on_chain", "refused", "dry_run"]


@dataclass(frozen=True)
class Ejection:
    """What the sweeper did about one dead member."""

    pool_id: int
    node: str
    provider: str | None
    silent_for: float | None
    outcome: Outcome
    tx_hash: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Watch:
    """What a starting sweeper watches, told once so an operator sees the key, the pools and the
    timing are the ones meant. Pools the manager creates later are swept too."""

    manager: str
    pools: dict[int, str]
    """Pool id -> status of every indexed pool the manager key manages."""
    dead_after: float
    interval: float
    dry_run: bool


def chain_ejector(client: ChainClient) -> Ejector:
    """An ejector sending `ComputePool.ejectNode` as `client`'s account (the pool manager)."""

    def eject(pool_id: int, node: str) -> str | None:
        if client.pool.get_member(pool_id, node).state is not MemberState.ACTIVE:
            return None
        receipt = client.pool.eject_node(pool_id, node)
        return "0x" + bytes(receipt["transactionHash"]).hex()

    return eject


def _claim_key(pool_id: int, node: str) -> str:
    return f"proofpool:ejecting:{pool_id}:{node}"


async def dead_members(
    conn: AsyncConnection, redis: Redis, manager: str, *, now: float, thresholds: Liveness
) -> list[tuple[db.ActiveMember, float | None]]:
    """Active members of `manager`'s pools that are Dead, with how long they have been silent."""
    members = await db.active_members(conn, manager)
    if not members:
        return []
    heartbeats = await liveness.last_heartbeats(redis, sorted({m.node for m in members}))
    since = await liveness.tracking_since(redis, now)
    dead = []
    for member in members:
        seen = latest(heartbeats[member.node], member.joined_at, since)
        state = node_state(membership="active", blacklisted=False, last_seen=seen, now=now, liveness=thresholds)
        if state is NodeState.DEAD:
            dead.append((member, None if seen is None else now - seen))
    return dead


async def sweep_once(
    conn: AsyncConnection,
    redis: Redis,
    manager: str,
    eject: Ejector | None,
    *,
    now: float,
    thresholds: Liveness,
) -> list[Ejection]:
    """Eject every Dead member once; `eject=None` only reports what would be done."""
    done = []
    for member, silent in await dead_members(conn, redis, manager, now=now, thresholds=thresholds):
        fields = {"pool": member.pool_id, "node": member.node, "provider": member.provider, "silent_s": silent}
        if eject is None:
            done.append(Ejection(member.pool_id, member.node, member.provider, silent, "dry_run"))
            continue
        if not await redis.set(_claim_key(member.pool_id, member.node), repr(now), nx=True, ex=CLAIM_TTL):
            continue  # another sweeper, or our own earlier sweep, is on it
        try:
            tx_hash = await asyncio.to_thread(eject, member.pool_id, member.node)
        except ContractRevert as revert:
            log.warning("eject refused by the chain: %s", revert.name, extra=fields)
            done.append(Ejection(member.pool_id, member.node, member.provider, silent, "refused", reason=revert.name))
            continue
        outcome: Outcome = "ejected" if tx_hash else "not_active_on_chain"
        log.warning("dead member %s", outcome.replace("_", " "), extra={**fields, "tx": tx_hash})
        done.append(Ejection(member.pool_id, member.node, member.provider, silent, outcome, tx_hash))
    return done


async def run_sweeper(
    settings: Settings,
    *,
    interval: float,
    once: bool = False,
    dry_run: bool = False,
    report: Callable[[Ejection], None] | None = None,
    started: Callable[[Watch], None] | None = None,
) -> None:
    """Sweep every `interval` seconds until cancelled (or one sweep with `once`); `started` hears
    what is watched once the database answers."""
    manager = manager_key(settings)
    if manager is None:
        raise ConfigError("the sweeper needs the pool manager key: set PROOFPOOL_MANAGER_PRIVATE_KEY")
    eject = None
    if not dry_run:
        client = await asyncio.to_thread(
            ChainClient.from_settings, manager, rpc_url=settings.rpc_url, deployments_dir=settings.deployments_dir
        )
        eject = chain_ejector(client)
    thresholds = Liveness(settings.unhealthy_after, settings.dead_after)
    redis = Redis.from_url(settings.redis_url)
    try:
        async with await AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
            pools = {pool.pool_id: pool.status for pool in await db.managed_pools(conn, manager.address)}
            watch = Watch(manager.address, pools, settings.dead_after, interval, dry_run)
            log.info("sweeper started", extra=watch.__dict__)
            if started is not None:
                started(watch)
            while True:
                for ejection in await sweep_once(
                    conn, redis, manager.address, eject, now=time.time(), thresholds=thresholds
                ):
                    if report is not None:
                        report(ejection)
                if once:
                    return
                await asyncio.sleep(interval)
    finally:
        await redis.aclose()
