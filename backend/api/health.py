"""`/healthz`: what the backend depends on, and how far the indexer lags the chain.
(Prometheus metrics are served on an internal address of their own: `proofpool.backend.metrics`.)"""

from __future__ import annotations

import psycopg
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from proofpool.backend.api.deps import get_object_store
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.rpc import connect

router = APIRouter(tags=["health"])

INDEXER_NEXT_BLOCK = "SELECT next_block FROM indexer_state WHERE id = 1"
DATABASE_WAIT = 3.0
"""Seconds /healthz waits for a pooled connection before it reports the database as down."""


class Health(BaseModel):
    """`ok` is true when every dependency answers; `chain_lag_blocks` is null until indexed."""

    ok: bool
    checks: dict[str, str]
    chain_head: int | None = None
    indexed_through: int | None = None
    chain_lag_blocks: int | None = None


def _chain_head(request: Request) -> int:
    w3 = getattr(request.app.state, "w3", None)
    if w3 is None:
        settings = request.app.state.settings
        w3 = connect(settings.rpc_url, timeout=min(settings.rpc_timeout, 3.0), check=False)
        request.app.state.w3 = w3
    return int(w3.eth.block_number)


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
async def healthz(request: Request) -> JSONResponse:
    """Database, Redis, object store and chain round trips; 503 when one fails."""
    health = Health(ok=False, checks={})
    # Taken from the app, not through the `Conn`/`RedisDep` dependencies: a service that is down is
    # reported in the body here, not answered with the API's 503 error.
    pool: AsyncConnectionPool = request.app.state.db
    redis: Redis = request.app.state.redis
    try:
        async with pool.connection(timeout=DATABASE_WAIT) as conn:
            row = await (await conn.execute(INDEXER_NEXT_BLOCK)).fetchone()
        health.indexed_through = None if row is None else int(row[0]) - 1
        health.checks["database"] = "ok"
    except psycopg.Error as exc:  # report, do not crash: this endpoint says what is down
        health.checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        await redis.ping()
        health.checks["redis"] = "ok"
    except (redis_errors.RedisError, OSError) as exc:
        health.checks["redis"] = f"error: {exc.__class__.__name__}"
    try:
        store = await run_in_threadpool(get_object_store, request)
        await run_in_threadpool(store.check)
        health.checks["storage"] = "ok"
    except ProofpoolError as exc:
        health.checks["storage"] = f"error: {exc.__class__.__name__}"
    try:
        health.chain_head = await run_in_threadpool(_chain_head, request)
        health.checks["chain"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any transport failure means the chain is not reachable
        health.checks["chain"] = f"error: {exc.__class__.__name__}"
    if health.chain_head is not None and health.indexed_through is not None:
        health.chain_lag_blocks = max(0, health.chain_head - health.indexed_through)
    health.ok = all(v == "ok" for v in health.checks.values())
    return JSONResponse(status_code=200 if health.ok else 503, content=health.model_dump())
