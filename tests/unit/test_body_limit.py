"""`proofpool.backend.body_limit.BodyLimit` at the ASGI level, in-process: a small FastAPI app with the
backend's error handlers, driven with hand-made `receive`/`send` so the test sees exactly how
many body chunks the app pulled and what it answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from fastapi import FastAPI
from proofpool.backend.api.errors import install_error_handlers
from proofpool.backend.body_limit import BodyLimit
from pydantic import BaseModel
from starlette.types import Message

CAP = 1024 * 1024
CHUNK = 64 * 1024


class Payload(BaseModel):
    pad: str = ""


def small_app() -> FastAPI:
    """A JSON-body route (FastAPI reads the whole body before any dependency, as on the backend's
    signed routes) and a route that never reads its body, behind the cap."""
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/json")
    async def take_json(body: Payload) -> dict[str, int]:
        return {"pad": len(body.pad)}

    @app.post("/ignores-body")
    async def ignore_body() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(BodyLimit, max_bytes=CAP)
    return app


@dataclass
class Exchange:
    """One request through the app: the chunks it pulled and the messages it sent."""

    pulled: int = 0
    sent: list[Message] = field(default_factory=list)

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")

    @property
    def headers(self) -> dict[bytes, bytes]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return dict(start["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def run(app: FastAPI, path: str, chunks: Iterator[bytes], headers: list[tuple[bytes, bytes]]) -> Exchange:
    exchange = Exchange()
    frames = iter(chunks)
    pending = next(frames, None)

    async def receive() -> Message:
        nonlocal pending
        if pending is None:
            return {"type": "http.disconnect"}
        chunk, pending = pending, next(frames, None)
        exchange.pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": pending is not None}

    async def send(message: Message) -> None:
        exchange.sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    asyncio.run(app(scope, receive, send))
    return exchange


ATTACK = 64 * 1024 * 1024


def attack_body(total: int = ATTACK) -> Iterator[bytes]:
    """64 MiB in 64 KiB chunks, made as they are pulled: a cap that only trusts Content-Length
    (there is none with chunked encoding) lets the app read all 1,024 of them."""
    for _ in range(total // CHUNK):
        yield b"x" * CHUNK


CHUNKED = [(b"transfer-encoding", b"chunked")]


@pytest.mark.timeout(20)
def test_chunked_body_past_the_cap_is_413_after_reading_just_past_it() -> None:
    exchange = run(small_app(), "/json", attack_body(), CHUNKED)
    assert exchange.status == 413
    assert json.loads(exchange.body) == {"error": "body_too_large", "detail": f"body over {CAP} bytes"}
    assert exchange.headers[b"connection"] == b"close"
    assert exchange.pulled == CAP // CHUNK + 1  # the chunk that crossed the cap, not one more


@pytest.mark.timeout(20)
def test_body_at_the_cap_reaches_the_route() -> None:
    body = b'{"pad": "' + b"y" * (CAP - 11) + b'"}'
    assert len(body) == CAP
    chunks = (body[i : i + CHUNK] for i in range(0, len(body), CHUNK))
    exchange = run(small_app(), "/json", chunks, CHUNKED)
    assert (exchange.status, json.loads(exchange.body)) == (200, {"pad": CAP - 11})
    assert b"connection" not in exchange.headers  # read in full: the connection may be reused


@pytest.mark.parametrize("declared", [str(CAP + 1).encode(), b"10" * 20, b"-1", b"12abc"])
@pytest.mark.timeout(20)
def test_declared_length_over_the_cap_or_malformed_is_413_before_any_read(declared: bytes) -> None:
    exchange = run(small_app(), "/json", attack_body(), [(b"content-length", declared)])
    assert exchange.status == 413
    assert json.loads(exchange.body)["error"] == "body_too_large"
    assert exchange.headers[b"connection"] == b"close"
    assert exchange.pulled == 0


@pytest.mark.timeout(20)
def test_answer_before_the_body_is_read_closes_the_connection() -> None:
    """A route that never reads its body answers; the rest of the body is not read, and the
    connection is closed instead of the server draining it."""
    exchange = run(small_app(), "/ignores-body", attack_body(), CHUNKED)
    assert (exchange.status, json.loads(exchange.body)) == (200, {"ok": True})
    assert exchange.headers[b"connection"] == b"close"
    assert exchange.pulled == 0
