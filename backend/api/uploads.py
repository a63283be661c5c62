"""Uploads: signed `POST /v1/uploads` hands an active pool member a presigned S3 PUT for one
rollout file, or (`"format": "update"`) for one training pool update file.

The URL is the whole authorization the node gets: it names exactly
`pools/{pool}/rollouts/{node}/{sha256}.parquet` (an update:
`pools/{pool}/updates/{node}/{sha256}.safetensors`), one Content-Length and the sha256 checksum
header, and expires after `upload_url_ttl`. The store refuses any other key, length or body,
so the backend never proxies file bytes and a node can only ever write its own file for a
pool it is an active member of. Size cap and a per-node rate limit bound what one key can
make us sign.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Final, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from proofpool.backend.api.deps import Conn, RedisDep, SettingsDep, SignedCaller, StoreDep
from proofpool.backend.api.errors import ApiError, error_response
from proofpool.backend.db import memberships
from pydantic import BaseModel, ConfigDict, Field
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.storage import (
    ROLLOUT_CONTENT_TYPE,
    UPDATE_CONTENT_TYPE,
    normalize_sha256,
    rollout_key,
    update_key,
)

log = logging.getLogger(__name__)

router = APIRouter(prefix="/uploads", tags=["uploads"])

UPLOAD_URLS = Counter("proofpool_upload_urls_total", "Upload URL requests, by outcome.", ["outcome"])
RATE_WINDOW = 60
"""Seconds over which `upload_rate_per_minute` applies."""
INT64_MAX = 2**63 - 1

GCRA_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - burst
if now < allow_at then return allow_at - now end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return 0
"""
"""Generic cell rate algorithm; KEYS[1] holds the theoretical arrival time in microseconds.
Returns 0 when the request is allowed, else the microseconds to wait."""

UploadFormat = Literal["rollouts", "update"]
LAYOUTS: Final[dict[str, tuple[Callable[[int, str, str], str], str]]] = {
    "rollouts": (rollout_key, ROLLOUT_CONTENT_TYPE),
    "update": (update_key, UPDATE_CONTENT_TYPE),
}
"""Each format's object key (`proofpool.infra.storage`) and the Content-Type signed into its URL."""


class UploadRequest(BaseModel):
    """The file a node is about to upload (the signer is the node)."""

    model_config = ConfigDict(extra="forbid")

    pool_id: int = Field(ge=0, le=INT64_MAX, description="Pool the rollouts belong to.")
    sha256: str = Field(
        pattern=r"^(0x)?[0-9a-fA-F]{64}$",
        description="sha256 of the file (hex); also the work key the node will submit on-chain.",
    )
    size: int = Field(ge=1, le=INT64_MAX, description="Exact size of the file in bytes (at most upload_max_bytes).")
    format: UploadFormat = Field(
        "rollouts",
        description="`rollouts`: a rollout file (Parquet) of an RL pool; `update`: a training pool's update "
        "file (safetensors: one round's quantized pseudo-gradient).",
    )


class UploadTicket(BaseModel):
    """A presigned PUT: send `headers` exactly, with the file as the body, before `expires_at`."""

    method: Literal["PUT"]
    url: str
    headers: dict[str, str] = Field(description="Signed headers: Content-Length, x-amz-checksum-sha256, Content-Type.")
    bucket: str
    key: str
    pool_id: int
    node: str
    sha256: str
    size: int
    expires_at: datetime


_RESPONSES: dict[int | str, dict] = {
    403: {"description": "`not_active_member`: the signer is not an active member of an active pool `pool_id`."},
    413: {"description": "`upload_too_large`: `size` is over the upload limit."},
    422: {"description": "Malformed body (pool id, sha256 hex, size, format)."},
    429: {
        "description": "`rate_limited`: too many upload URLs for this node; wait `Retry-After` seconds.",
        "headers": {"Retry-After": {"description": "Seconds until the next URL.", "schema": {"type": "integer"}}},
    },
}
"""This route's own refusals; the ones every signed route shares are added by `proofpool.backend.api.openapi`."""


@router.post("", response_model=UploadTicket, responses=_RESPONSES)
async def create_upload(
    body: UploadRequest,
    caller: SignedCaller,
    conn: Conn,
    redis: RedisDep,
    settings: SettingsDep,
    store: StoreDep,
) -> UploadTicket | JSONResponse:
    """A presigned PUT for the signer's rollout file `pools/{pool}/rollouts/{node}/{sha256}.parquet`,
    or with `"format": "update"` its update file `pools/{pool}/updates/{node}/{sha256}.safetensors`."""
    node, sha = caller.address, normalize_sha256(body.sha256)
    context = {"pool_id": body.pool_id, "node": node, "work_key": sha, "size": body.size, "format": body.format}
    if body.size > settings.upload_max_bytes:
        UPLOAD_URLS.labels("too_large").inc()
        log.info("upload refused: too large", extra=context)
        raise ApiError(413, "upload_too_large", f"size {body.size} is over the limit of {settings.upload_max_bytes}")

    retry_after = await _take_rate_slot(redis, node, settings.upload_rate_per_minute)
    if retry_after is not None:
        UPLOAD_URLS.labels("rate_limited").inc()
        log.info("upload refused: rate limited", extra=context)
        detail = f"more than {settings.upload_rate_per_minute} upload URLs per minute for {node}; retry later"
        reply = error_response(429, "rate_limited", detail)
        reply.headers["Retry-After"] = str(retry_after)
        return reply

    membership = await memberships.get_membership(conn, body.pool_id, node)
    if membership is None or not membership.may_submit:
        UPLOAD_URLS.labels("not_member").inc()
        log.info("upload refused: not an active member", extra=context)
        raise ApiError(403, "not_active_member", _refusal(body.pool_id, node, membership))

    key_of, content_type = LAYOUTS[body.format]
    key = key_of(body.pool_id, node, sha)
    upload = store.presign_put(key, body.size, sha, settings.upload_url_ttl, content_type=content_type)
    UPLOAD_URLS.labels("issued").inc()
    log.info("upload url issued", extra={**context, "key": key, "expires_at": upload.expires_at.isoformat()})
    return UploadTicket(
        method="PUT",
        url=upload.url,
        headers=upload.headers,
        bucket=store.bucket,
        key=key,
        pool_id=body.pool_id,
        node=node,
        sha256=sha,
        size=body.size,
        expires_at=upload.expires_at,
    )


async def _take_rate_slot(redis: Redis, node: str, per_minute: int) -> int | None:
    """Spend one of the node's upload slots; None if allowed, else seconds until the next slot.

    GCRA (a token bucket in one Redis key, evaluated atomically on Redis's clock): a node may
    take `per_minute` URLs at once, then one every 60/per_minute seconds; never more than
    `per_minute` in any 60-second span, with no burst at window edges.
    """
    interval_us = RATE_WINDOW * 1_000_000 // per_minute
    try:
        wait_us = await redis.eval(GCRA_LUA, 1, f"ratelimit:uploads:{node}", interval_us, RATE_WINDOW * 1_000_000)
    except (redis_errors.RedisError, OSError) as exc:
        raise ServiceUnavailable(f"Redis unreachable for the upload rate limit: {exc.__class__.__name__}") from exc
    wait_us = int(wait_us)
    return None if wait_us <= 0 else max(1, -(-wait_us // 1_000_000))


def _refusal(pool_id: int, node: str, membership: memberships.Membership | None) -> str:
    """Why a node may not upload for a pool, in words a provider can act on."""
    if membership is None or membership.state is None:
        return f"node {node} is not a member of pool {pool_id} (as indexed); join it first"
    if membership.blacklisted:
        return f"node {node} is blacklisted in pool {pool_id}"
    if membership.state != "active":
        return f"node {node} is no longer a member of pool {pool_id} (state: {membership.state})"
    return f"pool {pool_id} is not active (status: {membership.pool_status or 'not indexed yet'})"
