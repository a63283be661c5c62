"""Dependencies shared by the routers: settings, database connection, Redis, and the
verified caller of a signed request. Authorization stays here, out of the handlers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from backend.api.errors import ApiError
from proofpool.auth.signed_request import AuthError, SignedHeaders, verify_request
from proofpool.config import Settings
from proofpool.storage import ObjectStore


# Plain attribute reads are `async` so FastAPI does not hop to a worker thread for them.
async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_conn(request: Request) -> AsyncIterator[AsyncConnection]:
    """A pooled autocommit connection (see `backend.app.lifespan`)."""
    pool: AsyncConnectionPool = request.app.state.db
    async with pool.connection() as conn:
        yield conn


async def get_redis(request: Request) -> Redis:
    return request.app.state.redis


def get_object_store(request: Request) -> ObjectStore:
    """The app's S3 client, built on first use and kept on `app.state` (never at import).

    A sync dependency on purpose: FastAPI runs it in a worker thread, so building the boto3
    client the first time does not stall the event loop.
    """
    store: ObjectStore | None = getattr(request.app.state, "object_store", None)
    if store is None:
        store = ObjectStore.from_settings(request.app.state.settings)
        request.app.state.object_store = store
    return store


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
StoreDep = Annotated[ObjectStore, Depends(get_object_store)]
Conn = Annotated[AsyncConnection, Depends(get_conn)]
RedisDep = Annotated[Redis, Depends(get_redis)]


async def read_body(request: Request, settings: SettingsDep) -> bytes:
    """The raw body, refused with 413 once it grows past the cap (a declared Content-Length over
    the cap never gets here: `backend.app.BodyLimit` refuses it before any route runs)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > settings.request_max_bytes:
            raise ApiError(413, "body_too_large", f"body over {settings.request_max_bytes} bytes")
    return body


RawBody = Annotated[bytes, Depends(read_body)]


async def signed_caller(request: Request, body: RawBody, settings: SettingsDep, redis: RedisDep) -> SignedHeaders:
    """The verified signer of this request: signature, clock skew, and a nonce never seen before."""
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    try:
        signed = verify_request(request.method, path, body, request.headers, max_skew=settings.signature_max_skew)
    except AuthError:
        raise
    fresh = await redis.set(
        f"nonce:{signed.address}:{signed.nonce}", 1, nx=True, ex=2 * settings.signature_max_skew + 1
    )
    if not fresh:
        raise AuthError("replayed_nonce", "this nonce was used before")
    return signed


SignedCaller = Annotated[SignedHeaders, Depends(signed_caller)]
