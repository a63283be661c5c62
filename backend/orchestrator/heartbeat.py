"""One heartbeat: record liveness, derive the node's state, and hand out its assignment.

The cost is one Redis write and one SQL round trip (plus one small UPDATE when the node
reports a finished batch, and one indexed count once its batch counter passes the unsubmitted
bound), so the backend keeps up with thousands of nodes per second.

A training pool (`diloco://`, `proofpool.training.published`) hands out no assignment: its members
train on the round's checkpoint and a shard they derive from the chain themselves, so their heartbeat
is liveness and state only, and the backend never loads a training pool's environment (it has none).

A node must answer every batch it is handed, in any order: batch n of a checkpoint is handed out
only while at most `max_unsubmitted` of the n before it lack an on-chain submission. Otherwise a
node could report batches finished without submitting them and keep only the problems it does
well on; with the bound it can leave at most `max_unsubmitted` batches per checkpoint unanswered.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from proofpool.backend.api.errors import ApiError
from proofpool.backend.db import nodes as db
from proofpool.backend.orchestrator import liveness
from proofpool.backend.orchestrator import unservable as unservable_reports
from proofpool.backend.orchestrator.states import Liveness, NodeState, node_state
from proofpool.backend.orchestrator.unservable import UnservableReport
from psycopg import AsyncConnection
from redis.asyncio import Redis

from proofpool.core.assignment import Assignment, Checkpoint, assign
from proofpool.core.errors import ProofpoolError
from proofpool.envs import pool_assignment, pool_environment
from proofpool.training.published import is_training_pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompletedBatch:
    """A node's report that it finished batch `batch` of checkpoint `version`."""

    version: int
    batch: int


@dataclass(frozen=True)
class HeartbeatResult:
    node: str
    state: NodeState
    pool_id: int | None
    assignment: Assignment | None
    withheld: Withheld | None = None
    """Why a healthy member of an active RL pool got no assignment (None otherwise)."""


@dataclass(frozen=True)
class Withheld:
    """The next batch is held back until the node submits the batches it was handed before."""

    batch: int
    unsubmitted: int
    max_unsubmitted: int


def not_registered(node: str) -> ApiError:
    """The refusal for a node the registry projection does not know (or knows as removed)."""
    return ApiError(
        403,
        "node_not_registered",
        f"node {node} is not registered and active on-chain; if it was added moments ago the indexer "
        "may not have indexed it yet: retry in a few seconds",
    )


async def heartbeat(
    conn: AsyncConnection,
    redis: Redis,
    node: str,
    *,
    now: float,
    thresholds: Liveness,
    pool_id: int | None = None,
    completed: CompletedBatch | None = None,
    unservable: UnservableReport | None = None,
    max_unsubmitted: int | None = None,
) -> HeartbeatResult:
    """Answer the heartbeat of `node` (already authenticated as the signer). `max_unsubmitted`:
    the bound on handed-out batches without a submission (module docstring); None: no bound."""
    ctx = await db.heartbeat_context(conn, node, pool_id)
    if ctx is None or not ctx.registry_active:
        raise not_registered(node)
    if not ctx.announced:
        raise ApiError(403, "node_not_announced", f"node {node} must announce itself with PUT /v1/nodes first")
    if pool_id is not None and ctx.membership is None and not ctx.blacklisted:
        raise ApiError(403, "not_pool_member", f"node {node} is not a member of pool {pool_id}")

    await liveness.record_heartbeat(redis, node, now)
    if unservable is not None:
        await unservable_reports.record(redis, node, unservable)
        log.warning(
            "node cannot serve its assignment",
            extra={
                "pool": ctx.pool_id,
                "node": node,
                "version": unservable.checkpoint_version,
                "batch": unservable.batch,
                "reason": unservable.reason,
                "detail": unservable.detail,
            },
        )
    elif completed is not None:
        await unservable_reports.clear(redis, node)
    state = node_state(
        membership=ctx.membership,  # type: ignore[arg-type]  # CHECK constraint limits the values
        blacklisted=ctx.blacklisted,
        last_seen=now,
        now=now,
        liveness=thresholds,
    )
    member_pool = ctx.pool_id if ctx.membership is not None or ctx.blacklisted else None
    if state is not NodeState.HEALTHY or ctx.pool_status != "active" or ctx.pool_id is None:
        return HeartbeatResult(node, state, member_pool, None)
    if is_training_pool(ctx.model_uri or ""):
        return HeartbeatResult(node, state, ctx.pool_id, None)

    version = ctx.checkpoint_version or 0
    batch = ctx.batch if ctx.batch is not None and ctx.batch_version == version else 0
    if completed is not None and completed.version == version and completed.batch == batch:
        await db.advance_batch(conn, ctx.pool_id, node, version, batch)
        batch += 1  # advanced by us or by a racing retry of the same report: either way it moved on
        log.info("node finished a batch", extra={"pool": ctx.pool_id, "node": node, "version": version, "batch": batch})
    if max_unsubmitted is not None and batch > max_unsubmitted:
        unsubmitted = batch - await db.submitted_files(conn, ctx.pool_id, node, version)
        if unsubmitted > max_unsubmitted:
            log.info(
                "next batch withheld until earlier ones are submitted",
                extra={"pool": ctx.pool_id, "node": node, "version": version, "batch": batch},
            )
            return HeartbeatResult(node, state, ctx.pool_id, None, Withheld(batch, unsubmitted, max_unsubmitted))
    checkpoint = Checkpoint(
        version=version,
        manifest_sha256=None if ctx.manifest_sha256 is None else bytes(ctx.manifest_sha256),
        uri=ctx.checkpoint_uri,
    )
    spec_sha256 = bytes(ctx.spec_sha256 or b"")  # NOT NULL for an indexed pool; empty would be refused
    try:
        # In a thread: a spec pool's first lookup fetches its spec and base model.
        environment = await asyncio.to_thread(pool_environment, ctx.model_uri or "", spec_sha256)
    except ProofpoolError as exc:  # no such environment installed, a spec refused or unreachable, or
        # the pool's spec hash and model URI disagree. Not the node's fault: it keeps its membership.
        raise ApiError(503, "environment_unavailable", f"pool {ctx.pool_id}: {exc}") from exc
    config = pool_assignment(environment, ctx.batch_size, ctx.group_size, ctx.max_tokens, ctx.temperature)
    assignment = assign(environment.taskset, ctx.pool_id, node, checkpoint, batch, config)
    return HeartbeatResult(node, state, ctx.pool_id, assignment)
