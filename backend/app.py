"""The FastAPI application factory. Nothing is built at import time: `create_app(settings)`
wires routers, error handlers, the body cap, the OpenAPI error documentation and a lifespan
that opens the PostgreSQL pool, Redis (with the nonce store) and the internal metrics server."""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from proofpool.backend.api import health, ledger, ledger_checks, nodes, orchestrator, uploads
from proofpool.backend.api.errors import install_error_handlers
from proofpool.backend.api.heartbeat_route import HeartbeatEndpoint
from proofpool.backend.api.openapi import install_error_docs
from proofpool.backend.body_limit import BodyLimit
from proofpool.backend.metrics import MetricsServer, mark_process_dead
from proofpool.backend.orchestrator.heartbeat import ContextCache
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.routing import Route

from proofpool.core.auth.signed_request import TimeWindow
from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.nonce_store import NonceStore

log = logging.getLogger(__name__)

API_PREFIX = "/v1"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    # autocommit: a request is one or a few independent statements, so implicit BEGIN/COMMIT would
    # only add two round trips to every heartbeat; a handler that needs atomicity opens
    # `conn.transaction()` explicitly.
    pool = AsyncConnectionPool(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        kwargs={"autocommit": True},
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=10)
    except Exception as exc:
        raise ServiceUnavailable(
            f"PostgreSQL not reachable at {settings.database_url}: {exc}. Start it, e.g. "
            "`pg_ctlcluster 15 main start`, and run `proofpool db upgrade`"
        ) from exc
    redis = Redis.from_url(settings.redis_url)
    nonces = NonceStore(redis, TimeWindow(settings.signature_max_skew, settings.signature_max_ahead))
    metrics = None if settings.metrics_bind is None else MetricsServer(*settings.metrics_bind)
    try:
        try:
            await nonces.open(time.time())
        except RedisError as exc:
            raise ServiceUnavailable(f"Redis not reachable at {settings.redis_url}: {exc}") from exc
        if metrics is not None:
            metrics.start()
        app.state.db, app.state.redis, app.state.nonces, app.state.metrics = pool, redis, nonces, metrics
        freeze_startup_heap()
        log.info(
            "backend started",
            extra={
                "database": settings.database_url,
                "redis": settings.redis_url,
                "signed_hosts": sorted(app.state.signed_hosts),
                "metrics": None if metrics is None else metrics.url,
            },
        )
        yield
    finally:
        await _close(pool, redis, metrics)


async def _close(pool: AsyncConnectionPool, redis: Redis, metrics: MetricsServer | None) -> None:
    if metrics is not None:
        metrics.stop()
    mark_process_dead()
    await redis.aclose()
    await pool.close()


def freeze_startup_heap() -> None:
    """Move everything allocated at start-up out of the garbage collector's reach.

    The backend imports web3, eth_account and pydantic models: several hundred thousand
    long-lived objects that every full (generation 2) collection walks again. Measured in
    `bench/heartbeat.py`, such a collection stalled a worker's event loop for 120-170 ms, which
    was the whole of the heartbeat p99 at 750-1,000 requests/s; after `gc.freeze()` a full
    collection takes 2-11 ms. Frozen objects are never freed, which is what start-up state is for.
    """
    gc.collect()
    gc.freeze()


SAFE_RECURSION_LIMIT = 1_000
"""web3 imports py_ecc, which raises Python's recursion limit to 100,000. Far below that the C
stack overflows, so `json.loads` of a deeply nested body (100 KB of `[`, well under the size cap)
would kill the process with SIGSEGV instead of raising. At Python's default limit the parser
raises and the request gets a 400."""


def create_app(settings: Settings | None = None) -> FastAPI:
    """The backend app; routers by audience, all under /v1 except /healthz. Metrics are not
    served here but on `metrics_address` (`proofpool.backend.metrics`)."""
    sys.setrecursionlimit(min(sys.getrecursionlimit(), SAFE_RECURSION_LIMIT))
    app = FastAPI(
        title="proofpool backend",
        version="0.1.0",
        description="Discovery, orchestration, uploads and the public contribution ledger of proofpool.",
        lifespan=lifespan,
        generate_unique_id_function=lambda route: f"{route.tags[0]}-{route.name}" if route.tags else route.name,
    )
    app.state.settings = settings = settings or get_settings()
    app.state.signed_hosts = settings.signed_request_hosts
    app.add_middleware(BodyLimit, max_bytes=settings.request_max_bytes)
    install_error_handlers(app)
    app.include_router(health.router)
    for router in (nodes.router, orchestrator.router, uploads.router, ledger.router, ledger_checks.router):
        app.include_router(router, prefix=API_PREFIX)
    install_lean_heartbeat(app)
    install_error_docs(app)
    return app


def install_lean_heartbeat(app: FastAPI) -> None:
    """Answer `POST /v1/heartbeat` with `proofpool.backend.api.heartbeat_route` ahead of the FastAPI
    route, which stays the documented one and answers whatever the lean endpoint hands it. The
    heartbeat contexts it caches live on `app.state.heartbeat_contexts` (one cache per process)."""
    path = API_PREFIX + "/heartbeat"
    documented = next(
        r for r in app.router.routes if getattr(r, "path", None) == path and "POST" in getattr(r, "methods", ())
    )
    app.state.heartbeat_contexts = ContextCache()
    app.router.routes.insert(0, Route(path, HeartbeatEndpoint(documented), methods=["POST"], include_in_schema=False))
