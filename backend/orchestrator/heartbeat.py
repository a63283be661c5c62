"""One heartbeat: record liveness, derive the node's state, and hand out its assignment.

The cost is one Redis round trip (nonce, context tag and liveness in one script) and, at most once
a second per node and API process, one SQL round trip (plus one small UPDATE when the node reports
a finished batch, and one indexed count once its batch counter passes the unsubmitted bound), so
the backend keeps up with thousands of nodes per second (docs/api-nodes.md "Performance").

**The context cache.** What a heartbeat reads from PostgreSQL (registration, announcement,
membership, pool, latest checkpoint, batch counter: `db.heartbeat_context`) is kept in the API
process for `CONTEXT_TTL` seconds per (node, pool_id) (`ContextCache`). The bound: a change the
indexer commits at time t (a node ejected, slashed, deregistered; a pool closed; a new checkpoint)
is in the answer of every heartbeat that starts after t + `CONTEXT_TTL`. Only a context that passes
the checks is kept, so a refusal is never cached. The batch counter, which the heartbeat itself moves
and another API process may be asked for a second later, is also guarded by a per-node tag in Redis
(`context_tag_key`): the claim of every cached heartbeat reads it in the same round trip, and
advancing a batch replaces it, so no process answers with a batch counter older than the last
advance. Losing Redis's keys loses the tags too, which only makes every process read again.

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
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from proofpool.backend.api.errors import ApiError
from proofpool.backend.db import nodes as db
from proofpool.backend.db.nodes import HeartbeatContext
from proofpool.backend.orchestrator import liveness
from proofpool.backend.orchestrator import unservable as unservable_reports
from proofpool.backend.orchestrator.states import Liveness, NodeState, node_state
from proofpool.backend.orchestrator.unservable import UnservableReport
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from proofpool.core.assignment import Assignment, Checkpoint, assign
from proofpool.core.auth.signed_request import SignedHeaders
from proofpool.core.environment import Environment
from proofpool.core.errors import ProofpoolError
from proofpool.envs import pool_assignment, pool_environment
from proofpool.infra.config import BackendSettings
from proofpool.infra.nonce_store import Alongside, NonceStore
from proofpool.training.published import is_training_pool

log = logging.getLogger(__name__)

CONTEXT_TTL = 1.0
"""Seconds a heartbeat context is answered from the API process's memory (module docstring)."""
CONTEXT_CACHE_SIZE = 65_536
"""Most (node, pool_id) contexts one process keeps; past it, expired ones are dropped first."""
CONTEXT_TAG_PREFIX = "proofpool:heartbeat-tag:"
CONTEXT_TAG_TTL = 86_400
"""Seconds a node's tag lives once set (a node gone for good leaves no key; a tag that expired is
replaced at the next heartbeat, which costs each process one read)."""
ASSIGNMENT_CACHE_SIZE = 16_384
"""Assignments remembered per process: a node asks for the same batch every heartbeat until done."""


@dataclass(frozen=True)
class CompletedBatch:
    """A node's report that it finished batch `batch` of checkpoint `version`."""

    version: int
    batch: int


@dataclass(frozen=True)
class Beat:
    """One heartbeat's request (the pool it names, what it reports) and the settings it is answered
    under, as the route read them."""

    now: float
    thresholds: Liveness
    pool_id: int | None = None
    completed: CompletedBatch | None = None
    unservable: UnservableReport | None = None
    max_unsubmitted: int | None = None
    """The bound on handed-out batches without a submission (module docstring); None: no bound."""

    @classmethod
    def under(
        cls,
        settings: BackendSettings,
        now: float,
        pool_id: int | None,
        completed: CompletedBatch | None,
        unservable: UnservableReport | None,
    ) -> Beat:
        """The heartbeat answered under the backend's liveness thresholds and unsubmitted bound."""
        thresholds = Liveness(settings.unhealthy_after, settings.dead_after)
        return cls(now, thresholds, pool_id, completed, unservable, settings.max_unsubmitted_batches)


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


def checked(ctx: HeartbeatContext | None, node: str, pool_id: int | None) -> HeartbeatContext:
    """`ctx` if the node may heartbeat at all (registered, announced, a member of `pool_id` when it
    names one); the refusal otherwise."""
    if ctx is None or not ctx.registry_active:
        raise not_registered(node)
    if not ctx.announced:
        raise ApiError(403, "node_not_announced", f"node {node} must announce itself with PUT /v1/nodes first")
    if pool_id is not None and ctx.membership is None and not ctx.blacklisted:
        raise ApiError(403, "not_pool_member", f"node {node} is not a member of pool {pool_id}")
    return ctx


def context_tag_key(node: str) -> str:
    """The Redis key of `node`'s context tag, replaced whenever its batch counter moves."""
    return CONTEXT_TAG_PREFIX + node


@dataclass(frozen=True)
class _Cached:
    ctx: HeartbeatContext
    tag: bytes
    expires: float
    """`time.monotonic()` after which the entry is not used: read start + `CONTEXT_TTL`."""


class ContextCache:
    """Heartbeat contexts of one API process, per (node, pool_id), for `ttl` seconds each."""

    def __init__(self, ttl: float = CONTEXT_TTL, max_entries: int = CONTEXT_CACHE_SIZE) -> None:
        self.ttl, self.max_entries = ttl, max_entries
        self._entries: dict[tuple[str, int | None], _Cached] = {}

    def get(self, node: str, pool_id: int | None) -> _Cached | None:
        entry = self._entries.get((node, pool_id))
        if entry is None or entry.expires <= time.monotonic():
            return None
        return entry

    def put(self, node: str, pool_id: int | None, ctx: HeartbeatContext, tag: bytes, read_started: float) -> None:
        """Keep `ctx`, read from PostgreSQL starting at `read_started` (monotonic) under `tag`."""
        if self.ttl <= 0:
            return
        if len(self._entries) >= self.max_entries:
            now = time.monotonic()
            self._entries = {k: e for k, e in self._entries.items() if e.expires > now}
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
        self._entries[(node, pool_id)] = _Cached(ctx, tag, read_started + self.ttl)

    def clear(self) -> None:
        """Forget every context (tests that change the projections under a running app)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class _Assignments:
    """Assignments by all their inputs, least recently used dropped first. `assign` is a pure
    function of these inputs, so a remembered answer is the answer."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[Any, ...], Assignment] = OrderedDict()

    def get(self, key: tuple[Any, ...]) -> Assignment | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: tuple[Any, ...], assignment: Assignment) -> None:
        self._entries[key] = assignment
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)


_ASSIGNMENTS = _Assignments(ASSIGNMENT_CACHE_SIZE)
_ENVIRONMENTS: dict[tuple[str, bytes], Environment] = {}
"""Environments found before, by (model URI, spec hash): later lookups skip the worker thread."""


class LazyConnection:
    """A pooled connection taken only when a heartbeat needs one (most answer from the cache)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._held: Any = None
        self._conn: AsyncConnection | None = None

    async def get(self) -> AsyncConnection:
        if self._conn is None:
            self._held = self._pool.connection()
            self._conn = await self._held.__aenter__()
        return self._conn

    async def __aenter__(self) -> LazyConnection:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held is not None:
            held, self._held, self._conn = self._held, None, None
            await held.__aexit__(kind, exc, tb)


async def heartbeat(conn: AsyncConnection, redis: Redis, node: str, beat: Beat) -> HeartbeatResult:
    """Answer the heartbeat of `node` (already authenticated as the signer, its nonce claimed),
    reading its context afresh."""
    ctx = checked(await db.heartbeat_context(conn, node, beat.pool_id), node, beat.pool_id)
    await liveness.record_heartbeat(redis, node, beat.now)

    async def same() -> AsyncConnection:
        return conn

    return await answer(same, redis, node, ctx, beat)


async def signed_heartbeat(
    pool: AsyncConnectionPool,
    redis: Redis,
    nonces: NonceStore,
    contexts: ContextCache,
    signed: SignedHeaders,
    beat: Beat,
) -> HeartbeatResult:
    """Answer a heartbeat whose signature is verified but whose nonce is not claimed yet: claim it,
    and answer from the context cache when it holds the node (module docstring).

    A cached node's claim also records its liveness, so the whole heartbeat is one Redis round
    trip; an uncached one is read from PostgreSQL first and its liveness recorded only once it
    passed the checks, so a refused node leaves no trace. A heartbeat that reports something
    (`completed`, `unservable`) always reads afresh."""
    node, now, pool_id = signed.address, beat.now, beat.pool_id
    plain = beat.completed is None and beat.unservable is None
    cached = contexts.get(node, pool_id) if plain else None
    tag_key = context_tag_key(node)
    new_tag = secrets.token_hex(8)
    async with LazyConnection(pool) as conn:
        if cached is not None:
            tag = await nonces.claim(
                signed,
                now,
                Alongside(tag_key, new_tag, CONTEXT_TAG_TTL, liveness.HEARTBEATS_KEY, node, now),
            )
            if tag == cached.tag:
                ctx = cached.ctx
            else:  # its batch moved since: read again (liveness is recorded: it passed the checks < ttl ago)
                started = time.monotonic()
                ctx = checked(await db.heartbeat_context(await conn.get(), node, pool_id), node, pool_id)
                contexts.put(node, pool_id, ctx, tag or b"", started)
        else:
            tag = await nonces.claim(signed, now, Alongside(tag_key, new_tag, CONTEXT_TAG_TTL))
            started = time.monotonic()
            ctx = checked(await db.heartbeat_context(await conn.get(), node, pool_id), node, pool_id)
            await liveness.record_heartbeat(redis, node, now)
            if plain:
                contexts.put(node, pool_id, ctx, tag or b"", started)
        return await answer(conn.get, redis, node, ctx, beat)


async def answer(
    conn: Callable[[], Awaitable[AsyncConnection]],
    redis: Redis,
    node: str,
    ctx: HeartbeatContext,
    beat: Beat,
) -> HeartbeatResult:
    """The answer to a heartbeat of `node` that passed the checks and whose liveness is recorded;
    `conn` gives the connection for the writes and counts some answers need."""
    completed, unservable, max_unsubmitted = beat.completed, beat.unservable, beat.max_unsubmitted
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
        last_seen=beat.now,
        now=beat.now,
        liveness=beat.thresholds,
    )
    member_pool = ctx.pool_id if ctx.membership is not None or ctx.blacklisted else None
    if state is not NodeState.HEALTHY or ctx.pool_status != "active" or ctx.pool_id is None:
        return HeartbeatResult(node, state, member_pool, None)
    if is_training_pool(ctx.model_uri or ""):
        return HeartbeatResult(node, state, ctx.pool_id, None)

    version = ctx.checkpoint_version or 0
    batch = ctx.batch if ctx.batch is not None and ctx.batch_version == version else 0
    if completed is not None and completed.version == version and completed.batch == batch:
        await db.advance_batch(await conn(), ctx.pool_id, node, version, batch)
        # every process holding this node's context reads it again (module docstring)
        await redis.set(context_tag_key(node), secrets.token_hex(8), ex=CONTEXT_TAG_TTL)
        batch += 1  # advanced by us or by a racing retry of the same report: either way it moved on
        log.info("node finished a batch", extra={"pool": ctx.pool_id, "node": node, "version": version, "batch": batch})
    if max_unsubmitted is not None and batch > max_unsubmitted:
        unsubmitted = batch - await db.submitted_files(await conn(), ctx.pool_id, node, version)
        if unsubmitted > max_unsubmitted:
            log.info(
                "next batch withheld until earlier ones are submitted",
                extra={"pool": ctx.pool_id, "node": node, "version": version, "batch": batch},
            )
            return HeartbeatResult(node, state, ctx.pool_id, None, Withheld(batch, unsubmitted, max_unsubmitted))
    return HeartbeatResult(node, state, ctx.pool_id, await _assignment(ctx, ctx.pool_id, node, version, batch))


async def _assignment(ctx: HeartbeatContext, pool_id: int, node: str, version: int, batch: int) -> Assignment:
    """The assignment of `node` for `batch` of checkpoint `version`, remembered by all its inputs."""
    model_uri = ctx.model_uri or ""
    spec_sha256 = bytes(ctx.spec_sha256 or b"")  # NOT NULL for an indexed pool; empty would be refused
    manifest = None if ctx.manifest_sha256 is None else bytes(ctx.manifest_sha256)
    knobs = (ctx.batch_size, ctx.group_size, ctx.max_tokens, ctx.temperature)
    key = (model_uri, spec_sha256, pool_id, node, version, manifest, ctx.checkpoint_uri, batch, knobs)
    found = _ASSIGNMENTS.get(key)
    if found is not None:
        return found
    environment = _ENVIRONMENTS.get((model_uri, spec_sha256))
    if environment is None:
        try:
            # In a thread: a spec pool's first lookup fetches its spec and base model.
            environment = await asyncio.to_thread(pool_environment, model_uri, spec_sha256)
        except ProofpoolError as exc:  # no such environment installed, a spec refused or unreachable, or
            # the pool's spec hash and model URI disagree. Not the node's fault: it keeps its membership.
            raise ApiError(503, "environment_unavailable", f"pool {pool_id}: {exc}") from exc
        _ENVIRONMENTS[(model_uri, spec_sha256)] = environment
    config = pool_assignment(environment, *knobs)
    checkpoint = Checkpoint(version=version, manifest_sha256=manifest, uri=ctx.checkpoint_uri)
    assignment = assign(environment.taskset, pool_id, node, checkpoint, batch, config)
    _ASSIGNMENTS.put(key, assignment)
    return assignment
