"""The request body cap, enforced as bytes arrive, for every request and every route.

A cap that checks only a declared Content-Length misses chunked bodies (`Transfer-Encoding:
chunked` has none), and a cap inside a route runs too late: FastAPI reads a route's whole
JSON body before any dependency, the signature check included, so an unauthenticated client
could make the backend hold hundreds of MiB (measured: RSS 191 MiB -> 1.8 GiB for one 400 MiB
chunked request). `BodyLimit` wraps the ASGI `receive` instead: the moment the count passes
`request_max_bytes` the read fails with `BodyTooLarge`, the app answers 413
`{"error": "body_too_large"}`, and the connection is closed rather than drained, so the rest
of the body is never read.
"""

from __future__ import annotations

from proofpool.backend.api.errors import error_response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLOSE = (b"connection", b"close")


class BodyTooLarge(HTTPException):
    """Raised from `receive` when the body passes the cap. An `HTTPException`, so FastAPI's body
    parsing lets it through (it turns other exceptions into 400) and the app's handler for
    HTTP errors renders it as 413 `body_too_large` (`proofpool.backend.api.errors`)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"body over {max_bytes} bytes")


class _Guard:
    """One request's byte count, wrapped around its `receive` and `send`."""

    def __init__(self, receive: Receive, send: Send, max_bytes: int, body_expected: bool) -> None:
        self._receive, self._send, self.max_bytes = receive, send, max_bytes
        self.received = 0
        self.body_done = not body_expected
        self.response_started = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            if not message.get("more_body", False):
                self.body_done = True
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
            if not self.body_done:
                # Answered before the body was read in full (refused, or a route that reads none):
                # close the connection instead of letting the server read and discard the rest.
                message = {**message, "headers": [*message.get("headers", []), CLOSE]}
        await self._send(message)


class BodyLimit:
    """ASGI middleware: 413 JSON for a body over `max_bytes`, declared or counted as it arrives."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)  # before a single byte of it is read
            return
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        guard = _Guard(receive, send, self.max_bytes, body_expected=chunked or (declared or "0") != "0")
        try:
            await self.app(scope, guard.receive, guard.send)
        except BodyTooLarge:
            # The app's exception handlers answer it; this is for an app that lets it escape.
            if guard.response_started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "body_too_large", f"body over {self.max_bytes} bytes")
        response.headers["connection"] = "close"
        await response(scope, receive, send)
