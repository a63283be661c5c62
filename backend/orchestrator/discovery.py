"""Discovery: nodes announce themselves, anyone reads a node's status.

Only nodes the chain knows may announce: the registry projection must hold the node, active,
under the provider it names. The backend never trusts a node's word for who owns it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from proofpool.backend.api.errors import ApiError
from proofpool.backend.db import nodes as db
from proofpool.backend.orchestrator import liveness, unservable
from proofpool.backend.orchestrator.heartbeat import not_registered
from proofpool.backend.orchestrator.states import Liveness, NodeState, latest, node_state
from proofpool.backend.orchestrator.unservable import UnservableReport
from psycopg import AsyncConnection
from redis.asyncio import Redis

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeStatus:
    """A node as the orchestrator sees it right now."""

    address: str
    provider: str | None
    registered: bool
    compute_units: int | None
    announced: bool
    specs: dict[str, Any] | None
    endpoint: str | None
    specs_match: bool | None
    state: NodeState | None
    pool_id: int | None
    last_heartbeat: float | None
    unservable: UnservableReport | None


def specs_digest(specs: dict[str, Any]) -> bytes:
    """sha256 of the specs as canonical JSON (sorted keys, no spaces): what a provider may
    register on-chain as the node's `specsHash` so the announced specs can be checked."""
    return hashlib.sha256(json.dumps(specs, sort_keys=True, separators=(",", ":")).encode()).digest()


async def announce(
    conn: AsyncConnection, node: str, provider: str, specs: dict[str, Any], endpoint: str | None
) -> db.Announcement:
    """Record the announcement of `node` (the signer) if the chain registers it under `provider`."""
    registered = await db.registered_node(conn, node)
    if registered is None or not registered.active:
        raise not_registered(node)
    if registered.provider != provider:
        raise ApiError(
            403, "provider_mismatch", f"node {node} is registered under provider {registered.provider}, not {provider}"
        )
    announcement = await db.upsert_announcement(conn, node, provider, specs, endpoint)
    log.info("node announced", extra={"node": node, "provider": provider, "endpoint": endpoint})
    return announcement


async def node_status(
    conn: AsyncConnection, redis: Redis, node: str, *, now: float, thresholds: Liveness
) -> NodeStatus | None:
    """The public status of `node`; None if it is neither registered nor announced."""
    view = await db.node_view(conn, node)
    if view is None:
        return None
    heartbeat = await liveness.last_heartbeat(redis, node)
    state: NodeState | None = None
    if view.registered and view.registry_active and (view.announced or view.membership or view.blacklisted):
        since = await liveness.tracking_since(redis, now) if view.membership == "active" else None
        state = node_state(
            membership=view.membership,  # type: ignore[arg-type]  # CHECK constraint limits the values
            blacklisted=view.blacklisted,
            last_seen=latest(heartbeat, view.joined_at, since),
            now=now,
            liveness=thresholds,
        )
    specs_match = None
    if view.specs_hash is not None and view.specs is not None:
        specs_match = specs_digest(view.specs) == bytes(view.specs_hash)
    return NodeStatus(
        address=node,
        provider=view.provider,
        registered=view.registered and view.registry_active,
        compute_units=view.compute_units,
        announced=view.announced,
        specs=view.specs,
        endpoint=view.endpoint,
        specs_match=specs_match,
        state=state,
        pool_id=view.pool_id if view.membership is not None or view.blacklisted else None,
        last_heartbeat=heartbeat,
        unservable=await unservable.latest(redis, node),
    )
