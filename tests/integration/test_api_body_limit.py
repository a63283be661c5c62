"""The body cap against a real uvicorn on loopback: an unauthenticated chunked body far over
`request_max_bytes` (no Content-Length, so nothing to refuse up front) is answered 413 while
the client is still sending, the server stops reading it, and the backend goes on serving.

The client is a raw socket that writes chunk frames only while the socket is writable and
stops the moment the response is readable, so "bytes sent" is what the server took in (plus
what the kernel buffers hold), not what a blocking client forced through.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from eth_account import Account

from proofpool.infra.chain.anvil import free_port
from proofpool.infra.config import Settings
from proofpool.infra.http.node_api import NodeApi
from tests.fixtures.backend import API_POOL_CONTRACT, CHAIN_ID, ApiHarness, serve_app, signing_settings

CAP = 1024 * 1024
"""The default `request_max_bytes` (1 MiB), as in production."""
ATTACK_BYTES = 64 * 1024 * 1024
CHUNK = 64 * 1024
SENT_BOUND = 16 * 1024 * 1024
"""What the server may have taken in before refusing: the cap plus what the kernel buffers of
both ends hold on loopback (a few MiB). Reading the whole body would be 64 MiB."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int
    """Body bytes the client got onto the socket before the answer came (or the server closed)."""


def attack_chunks(total: int = ATTACK_BYTES) -> Iterator[bytes]:
    """`total` bytes of body in 64 KiB chunks, made as they are sent (nothing held in memory)."""
    for _ in range(total // CHUNK):
        yield b"x" * CHUNK


def send_chunked(port: int, path: str, chunks: Iterator[bytes], timeout: float = 20.0) -> Answer:
    """POST a chunked body, writing while the server reads and stopping when it answers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    pending, sent, frames, last = head, 0, iter(chunks), False
    sock.setblocking(False)
    while not (last and not pending):  # until the final frame is out; then wait for the answer
        readable, writable, _ = select.select([sock], [sock], [], timeout)
        if readable:
            break  # the answer (or the close) came while we were still sending
        if not writable:
            raise TimeoutError("the server neither read nor answered")
        if not pending:
            chunk = next(frames, None)
            last = chunk is None
            pending = b"0\r\n\r\n" if last else b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            sent += 0 if last else len(chunk)
        try:
            pending = pending[sock.send(pending) :]
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.setblocking(True)
    sock.settimeout(timeout)
    reply = http.client.HTTPResponse(sock)
    try:
        reply.begin()
        body = reply.read()
    finally:
        sock.close()
    return Answer(reply.status, {k.lower(): v for k, v in reply.getheaders()}, body, sent)


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def served(api_settings: Settings, port: int) -> Iterator[str]:
    """The real app under uvicorn with the production body cap, signed requests bound to its URL."""
    from proofpool.backend.app import create_app

    settings = api_settings.model_copy(
        update={"request_max_bytes": CAP, **signing_settings(f"127.0.0.1:{port}")},
    )
    with serve_app(create_app(settings), port) as base_url:
        yield base_url


@pytest.mark.timeout(60)
def test_chunked_body_over_the_cap_is_refused_while_it_arrives(api: ApiHarness, served: str, port: int) -> None:
    answer = send_chunked(port, "/v1/heartbeat", attack_chunks())

    assert answer.status == 413, answer.body[:300]
    assert json.loads(answer.body) == {"error": "body_too_large", "detail": f"body over {CAP} bytes"}
    assert answer.headers.get("connection") == "close"
    assert CAP < answer.sent < SENT_BOUND, f"sent {answer.sent} bytes before the answer"


@pytest.mark.timeout(60)
def test_the_backend_serves_on_after_refusing(api: ApiHarness, served: str, port: int) -> None:
    for _ in range(3):
        assert send_chunked(port, "/v1/heartbeat", attack_chunks()).status == 413
    assert httpx.get(f"{served}/v1/ledger/pools", timeout=5).status_code == 200

    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    with NodeApi(served, node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT) as client:
        client.announce(provider.address, {"cores": 2})
        assert client.heartbeat().state == "discovered"


@pytest.mark.timeout(60)
def test_chunked_body_under_the_cap_is_read_and_checked(api: ApiHarness, served: str, port: int) -> None:
    """Chunked bodies are not refused as such: one under the cap reaches the signature check."""
    answer = send_chunked(port, "/v1/heartbeat", iter([b'{"pool_id":', b" 1}"]))
    assert answer.status == 401, answer.body
    assert json.loads(answer.body)["error"] == "missing_header"
