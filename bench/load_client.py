"""The load generator's instruments: a raw HTTP/1.1 keep-alive client, a chain follower that
timestamps when each transaction is first seen in a block, an outbox poller that reads when the
indexer recorded and dispatched each submission, and per-process CPU accounting from /proc.

Everything here is cheap on purpose: the generator shares two cores with anvil, PostgreSQL,
Redis, SeaweedFS, the backend and the indexer, and every millisecond of Python it burns is a
millisecond the services under test do not get. So requests are bytes prepared before a step
(`bench.load` signs them beforehand), responses are parsed only as far as needed, and the
follower and the poller run in the same event loop as the senders (no threads fighting for
the GIL). See docs/load-test.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from eth_account.signers.local import LocalAccount

from proofpool.core.auth.signed_request import Audience, sign_request

REQUEST_TIMEOUT = 10.0
"""Seconds before one request counts as failed (status 0); its connection is dropped."""


async def read_http(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response (Content-Length or chunked; no body otherwise)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    start = lower.find(b"\r\ncontent-length:")
    if start >= 0:
        start += 17
        length = int(lower[start : lower.index(b"\r\n", start)])
        return status, await reader.readexactly(length)
    if b"\r\ntransfer-encoding: chunked" in lower:
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    return status, b""


class HttpPool:
    """Keep-alive connections to one host:port, handed out one request at a time; a connection
    that times out or breaks is replaced by a fresh one on its next use."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = asyncio.Queue()
        for _ in range(size):
            self._idle.put_nowait(None)  # opened lazily, so connects spread over the first requests

    @classmethod
    def for_url(cls, url: str, size: int) -> HttpPool:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 80, size)

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """(status, body) of one raw request; (0, b"") on a timeout or a broken connection."""
        conn = await self._idle.get()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), REQUEST_TIMEOUT)
            conn[1].write(request)
            reply = await asyncio.wait_for(read_http(conn[0]), REQUEST_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            if conn is not None:
                conn[1].close()
            conn = None
            return 0, b""
        finally:
            self._idle.put_nowait(conn)
        return reply

    async def close(self) -> None:
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            if conn is not None:
                conn[1].close()


def http_request(method: str, authority: str, target: str, body: bytes, headers: dict[str, str]) -> bytes:
    """Raw HTTP/1.1 request bytes (keep-alive)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def rpc_request(authority: str, method: str, params: list[Any], request_id: int = 1) -> bytes:
    """A JSON-RPC call as raw HTTP bytes."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    return http_request("POST", authority, "/", body, {"Content-Type": "application/json"})


class ChainFollower:
    """Polls anvil for new blocks and records, for every transaction hash someone `watch`es, the
    wall time it was first seen mined (resolution: the poll interval plus one round trip)."""

    def __init__(self, rpc: HttpPool, interval: float = 0.05) -> None:
        self.rpc, self.interval = rpc, interval
        self.mined: dict[str, float] = {}
        self.blocks = 0
        self._next_block: int | None = None

    async def _call(self, payload: Any) -> Any:
        body = json.dumps(payload).encode()
        status, reply = await self.rpc.send(
            http_request("POST", self.rpc.authority, "/", body, {"Content-Type": "application/json"})
        )
        if status != 200:
            raise ConnectionError(f"anvil answered {status}")
        return json.loads(reply)

    async def poll_once(self) -> None:
        head = int((await self._call({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"}))["result"], 16)
        if self._next_block is None:
            self._next_block = head + 1
            return
        while self._next_block <= head:
            last = min(head, self._next_block + 99)
            batch = [
                {"jsonrpc": "2.0", "id": n, "method": "eth_getBlockByNumber", "params": [hex(n), False]}
                for n in range(self._next_block, last + 1)
            ]
            replies = await self._call(batch)
            seen = time.time()
            for reply in replies:
                for tx_hash in reply["result"]["transactions"]:
                    self.mined.setdefault(tx_hash.lower(), seen)
            self.blocks += len(replies)
            self._next_block = last + 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(ConnectionError, KeyError, ValueError, TypeError):
                await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)


OUTBOX_SINCE = """
    SELECT id, dedupe_key, extract(epoch FROM created_at)::float8, extract(epoch FROM dispatched_at)::float8
      FROM outbox WHERE id > %s ORDER BY id"""


@dataclass
class OutboxPoller:
    """Reads the indexer's outbox: when each submission was recorded (`created_at`, the indexing
    transaction's time) and when its validation task went to the broker (`dispatched_at`).
    Both are PostgreSQL's clock, the same machine clock as the generator's `time.time()`."""

    database_url: str
    interval: float = 0.1
    indexed: dict[str, float] = field(default_factory=dict)
    dispatched: dict[str, float] = field(default_factory=dict)
    _after: int = 0

    async def poll_once(self, conn: psycopg.AsyncConnection) -> None:
        rows = await (await conn.execute(OUTBOX_SINCE, (self._after,))).fetchall()
        settled = True
        for row_id, key, created, dispatched in rows:
            work_key = key.split(":", 1)[1]
            self.indexed.setdefault(work_key, created)
            if dispatched is None:
                settled = False
                continue
            self.dispatched.setdefault(work_key, dispatched)
            if settled:  # every row up to here is dispatched: never read them again
                self._after = row_id

    async def run(self, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
            while not stop.is_set():
                await self.poll_once(conn)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _tree(pid: int, children: dict[int, list[int]]) -> Iterator[int]:
    yield pid
    for child in children.get(pid, ()):
        yield from _tree(child, children)


@dataclass
class CpuMeter:
    """CPU seconds of named process groups (each a list of root pids; their descendants count too).

    A sample keeps every process's own counter, and a delta sums per process: a process that
    exited in between loses only what it ran since the last sample, and one that started counts
    from zero (uvicorn replaces its workers; a sum over the tree would even go negative)."""

    groups: dict[str, list[int]]

    def sample(self) -> dict[str, dict[int, float]]:
        children = _children()
        return {
            name: {p: _cpu_seconds(p) for root in roots for p in _tree(root, children)}
            for name, roots in self.groups.items()
        }

    @staticmethod
    def delta(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict[str, float]:
        """CPU seconds each group ran between two samples."""
        return {
            name: round(sum(max(0.0, cpu - before.get(name, {}).get(pid, 0.0)) for pid, cpu in pids.items()), 2)
            for name, pids in after.items()
        }


def postgres_pids(database_url: str) -> list[int]:
    """Server processes of the connections to this database right now (the backend's and the
    indexer's pools are long-lived, so these are the ones doing its work)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def redis_pid(redis_url: str) -> int | None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def signed_request(account: LocalAccount, audience: Audience, method: str, path: str, body: bytes) -> bytes:
    """Raw bytes of a request signed by `account` for `audience` (a node's `SignedClient` request)."""
    headers = {"Content-Type": "application/json", **sign_request(account, audience, method, path, body)}
    return http_request(method, audience.host, path, body, headers)
