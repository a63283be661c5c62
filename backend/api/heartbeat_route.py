"""`POST /v1/heartbeat` without FastAPI's per-request machinery: the hottest route, answered as a
plain ASGI endpoint placed ahead of the documented FastAPI route (`proofpool.backend.api.orchestrator`).

At thousands of heartbeats a second, dependency resolution, the `Request` object and pydantic
in and out cost more CPU than the signature check (docs/api-nodes.md "Performance"). This endpoint
does the same checks in the same order with the same code (`verify_request`, the nonce store,
`proofpool.backend.orchestrator.heartbeat`), and hands every request it does not recognise as an
ordinary heartbeat to the FastAPI route, body and all: a body that is not JSON, not an object, not
a valid `HeartbeatIn`, or sent with another content type. So the refusals, 422s included, are the
FastAPI route's own, and the OpenAPI document stays the one that route declares. What this
endpoint answers is the FastAPI route's answer, byte for byte in meaning
(tests/integration/test_api_nodes.py checks it against `HeartbeatOut`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from proofpool.backend.api.deps import deployment_of
from proofpool.backend.api.orchestrator import HEARTBEATS, HeartbeatIn
from proofpool.backend.orchestrator import heartbeat as beats
from proofpool.backend.orchestrator import unservable
from proofpool.backend.orchestrator.states import NodeState
from pydantic import ValidationError
from pydantic_core import to_json
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match
from starlette.types import Message, Receive, Scope, Send

from proofpool.core.auth.signed_request import request_target, verify_request
from proofpool.infra.config import Settings

PATH = "/v1/heartbeat"
_BY_STATE = {state: HEARTBEATS.labels(state.value) for state in NodeState}
_PLAIN = HeartbeatIn()
_JSON_HEADERS = [(b"content-type", b"application/json")]


def parse_body(body: bytes, content_type: str | None) -> HeartbeatIn | None:
    """The heartbeat's facts when the body is one FastAPI would read the same way and accept (none,
    or a JSON object that validates); None for anything else, which the FastAPI route answers."""
    if not body or (body == b"{}" and content_type in (None, "application/json")):
        return _PLAIN
    if content_type not in (None, "application/json"):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit
        return None
    if not isinstance(value, dict):
        return None
    try:
        return HeartbeatIn.model_validate(value)
    except ValidationError:
        return None


def reply_body(result: beats.HeartbeatResult, interval: float, now: float) -> bytes:
    """`HeartbeatOut` of `result` as JSON, built without a model (the values are checked already)."""
    assignment: dict[str, Any] | None = None
    if (a := result.assignment) is not None:
        manifest = a.checkpoint.manifest_sha256
        assignment = {
            "pool_id": a.pool_id,
            "checkpoint_version": a.checkpoint.version,
            "manifest_sha256": None if manifest is None else manifest.hex(),
            "checkpoint_uri": a.checkpoint.uri,
            "batch": a.batch,
            "task_ids": list(a.task_ids),
            "sampling_seed": str(a.sampling_seed),
            "group_size": a.group_size,
            "max_tokens": a.max_tokens,
            "temperature": float(a.temperature),
        }
    w = result.withheld
    return to_json(
        {
            "node": result.node,
            "state": result.state.value,
            "pool_id": result.pool_id,
            "assignment": assignment,
            "withheld": None
            if w is None
            else {"batch": w.batch, "unsubmitted": w.unsubmitted, "max_unsubmitted": w.max_unsubmitted},
            "heartbeat_interval": float(interval),
            "server_time": now,
        }
    )


class HeartbeatEndpoint:
    """The ASGI endpoint of `Route(PATH, HeartbeatEndpoint(fastapi_route), methods=["POST"])`."""

    def __init__(self, fallback: BaseRoute) -> None:
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        headers = Headers(scope=scope)
        facts = parse_body(body, headers.get("content-type"))
        if facts is None:
            await self._fall_back(scope, body, send)
            return
        app = scope["app"]
        state = app.state
        settings: Settings = state.settings
        target = request_target(scope.get("raw_path") or scope["path"].encode(), scope["query_string"])
        now = time.time()
        signed = verify_request(
            "POST",
            target,
            body,
            headers,
            deployment=await deployment_of(state),
            hosts=state.signed_hosts,
            window=state.nonces.window,
            now=now,
        )
        completed = None
        if (c := facts.completed) is not None:
            completed = beats.CompletedBatch(c.checkpoint_version, c.batch)
        report = None
        if (u := facts.unservable) is not None:
            report = unservable.UnservableReport(u.checkpoint_version, u.batch, u.reason, u.detail, now)
        result = await beats.signed_heartbeat(
            state.db,
            state.redis,
            state.nonces,
            state.heartbeat_contexts,
            signed,
            beats.Beat.under(settings, now, facts.pool_id, completed, report),
        )
        _BY_STATE[result.state].inc()
        content = reply_body(result, settings.heartbeat_interval, now)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(content)).encode()), *_JSON_HEADERS],
            }
        )
        await send({"type": "http.response.body", "body": content})

    async def _fall_back(self, scope: Scope, body: bytes, send: Send) -> None:
        """Let the FastAPI route answer, with the body already read handed to it again."""
        match, child = self.fallback.matches(scope)
        if match is not Match.FULL:  # cannot happen: same path and method
            raise RuntimeError(f"the FastAPI heartbeat route does not match {scope['method']} {scope['path']}")
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.fallback.handle({**scope, **child}, replay, send)


async def _read_body(receive: Receive) -> bytes:
    """The whole body (its size capped by `proofpool.backend.body_limit.BodyLimit` as it arrives)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
