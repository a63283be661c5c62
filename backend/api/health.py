"""`/healthz` (liveness of what the backend depends on) and `/metrics` (Prometheus)."""

from __future__ import annotations

import psycopg
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis import exceptions as redis_errors

from backend.api.deps import Conn, RedisDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(conn: Conn, redis: RedisDep) -> JSONResponse:
    """Database and Redis round trips; 503 when one fails."""
    checks: dict[str, str] = {}
    try:
        await (await conn.execute("SELECT 1")).fetchone()
        checks["database"] = "ok"
    except (psycopg.Error, OSError) as exc:  # report, do not crash: this endpoint says what is down
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        await redis.ping()
        checks["redis"] = "ok"
    except (redis_errors.RedisError, OSError) as exc:
        checks["redis"] = f"error: {exc.__class__.__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(status_code=200 if ok else 503, content={"ok": ok, "checks": checks})


@router.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
