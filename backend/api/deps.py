"""Dependencies shared by the routers: settings, database connection, Redis, and the
verified caller of a signed request. Authorization stays here, out of the handlers."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from proofpool.backend.api.errors import ApiError
from proofpool.backend.db import nodes as nodes_db
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from starlette.datastructures import State

from proofpool.core.auth.signed_request import Deployment, SignedHeaders, request_target, verify_request
from proofpool.core.errors import ConfigError
from proofpool.infra.chain.deploy import load_address_book
from proofpool.infra.config import Settings
from proofpool.infra.nonce_store import NonceStore
from proofpool.infra.storage import ObjectStore

log = logging.getLogger(__name__)


# Plain attribute reads are `async` so FastAPI does not hop to a worker thread for them.
async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_conn(request: Request) -> AsyncIterator[AsyncConnection]:
    """A pooled autocommit connection (see `proofpool.backend.app.lifespan`)."""
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


async def read_body(request: Request) -> bytes:
    """The raw body. Its size is capped as it arrives by `proofpool.backend.body_limit.BodyLimit`, which
    refuses it with 413 before it grows past `request_max_bytes`."""
    return await request.body()


RawBody = Annotated[bytes, Depends(read_body)]


async def get_nonce_store(request: Request) -> NonceStore:
    return request.app.state.nonces


async def signing_deployment(request: Request) -> Deployment:
    """The deployment signed requests must be made for: `api_chain_id` + `api_pool_contract`
    when set, else the chain the indexer follows and its ComputePool from the address book (what
    invites are signed for). Resolved once per process; 503 `chain_unknown` until it can be."""
    return await deployment_of(request.app.state)


async def deployment_of(state: State) -> Deployment:
    """`signing_deployment` for the app whose `state` this is (routes without a `Request`)."""
    deployment: Deployment | None = getattr(state, "deployment", None)
    if deployment is not None:
        return deployment
    settings: Settings = state.settings
    deployment = await resolve_deployment(settings, state.db)
    state.deployment = deployment
    log.info("signed requests are bound to %s", deployment.describe())
    return deployment


async def resolve_deployment(settings: Settings, pool: AsyncConnectionPool) -> Deployment:
    """See `signing_deployment`; `ApiError` 503 `chain_unknown` saying what is missing."""
    if settings.api_chain_id is not None and settings.api_pool_contract is not None:
        return Deployment(settings.api_chain_id, settings.api_pool_contract)
    async with pool.connection() as conn:
        chain_id = await nodes_db.chain_id(conn)
    if chain_id is None:
        raise ApiError(
            503,
            "chain_unknown",
            "the indexer has not recorded which chain it follows yet, so signed requests cannot be checked "
            "(or set PROOFPOOL_API_CHAIN_ID and PROOFPOOL_API_POOL_CONTRACT)",
        )
    try:
        book = load_address_book(chain_id, settings.deployments_dir)
    except ConfigError as exc:
        raise ApiError(503, "chain_unknown", str(exc)) from exc
    return Deployment(chain_id, book.compute_pool)


NonceStoreDep = Annotated[NonceStore, Depends(get_nonce_store)]
DeploymentDep = Annotated[Deployment, Depends(signing_deployment)]


async def signed_caller(
    request: Request, body: RawBody, nonces: NonceStoreDep, deployment: DeploymentDep
) -> SignedHeaders:
    """The verified signer of this request: made for our deployment and sent to one of our hosts,
    signature, timestamp window, and a nonce the store has not seen (`proofpool.auth`)."""
    target = request_target(request.scope.get("raw_path") or request.url.path.encode(), request.scope["query_string"])
    now = time.time()
    signed = verify_request(
        request.method,
        target,
        body,
        request.headers,
        deployment=deployment,
        hosts=request.app.state.signed_hosts,
        window=nonces.window,
        now=now,
    )
    await nonces.claim(signed, now)
    return signed


SignedCaller = Annotated[SignedHeaders, Depends(signed_caller)]
