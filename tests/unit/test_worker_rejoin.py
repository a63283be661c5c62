"""A node that (re)joins a pool is refused by the backend until its indexer sees the join: uploads
answer `403 not_active_member (state: ejected)`, heartbeats answer state `ejected`. The worker
waits that out with backoff and a log line, never longer than its bound, and then stops with one
clear line. Chain, API and store are fakes; the journal is the real SQLite one."""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from eth_account import Account
from proofpool.worker.console import WorkerConsole
from proofpool.worker.journal import Journal
from proofpool.worker.membership import JoinIndexWait, JoinNotIndexed
from proofpool.worker.node import WorkerConfig, WorkerNode
from proofpool.worker.retry import Backoff
from proofpool.worker.submit import upload
from rich.console import Console

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import MemberState, PoolApproval
from proofpool.infra.http.node_api import Heartbeat, UploadTicket
from proofpool.infra.http.signed_client import ApiRefused

NODE = Account.from_key(ANVIL_KEYS[6])
PROVIDER = Account.from_key(ANVIL_KEYS[5]).address
FAST = Backoff(initial=0.001, maximum=0.002)
EJECTED_REFUSAL = ApiRefused(
    403, "not_active_member", f"node {NODE.address} is no longer a member of pool 1 (state: ejected)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- the bounded wait


def test_a_not_active_member_refusal_is_waited_for_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    wait = JoinIndexWait(1, NODE.address, "upload requests", timeout=300, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="proofpool.worker.membership"):
        assert wait.transient(EJECTED_REFUSAL) is True
    assert "waiting for the backend's indexer to see the node's join to pool 1" in caplog.text
    assert "state: ejected" in caplog.text


@pytest.mark.parametrize(
    "error",
    [ApiRefused(403, "not_pool_member", ""), ApiRefused(403, "provider_mismatch", ""), ValueError("a bug")],
)
def test_other_failures_are_not_this_wait(error: Exception) -> None:
    assert JoinIndexWait(1, NODE.address, "upload requests").transient(error) is False


def test_the_wait_gives_up_after_its_bound_with_one_clear_line() -> None:
    clock = Clock()
    wait = JoinIndexWait(1, NODE.address, "upload requests", timeout=300, clock=clock)
    assert wait.waiting("state: ejected") == 0
    clock.now = 299.0
    assert wait.waiting("state: ejected") == 1
    clock.now = 300.0
    with pytest.raises(JoinNotIndexed) as gave_up:
        wait.waiting("state: ejected")
    message = str(gave_up.value)
    assert "\n" not in message
    assert f"upload requests of node {NODE.address}" in message and "pool 1 after 300 s" in message
    assert "chain_lag_blocks" in message


def test_an_answer_as_a_member_starts_the_next_wait_afresh() -> None:
    clock = Clock()
    wait = JoinIndexWait(1, NODE.address, "heartbeats", timeout=300, clock=clock)
    wait.waiting("heartbeat state ejected")
    clock.now = 250.0
    wait.seen()
    clock.now = 400.0  # 400 s after the first refusal, but the node was seen as a member in between
    assert wait.waiting("heartbeat state ejected") == 0
    clock.now = 699.0
    wait.waiting("heartbeat state ejected")  # still within 300 s of this wait's start


# --------------------------------------------------------------------------- uploads


class RefusingApi:
    """`request_upload` refuses as `not_active_member` `refusals` times, then hands out a ticket."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.calls = refusals, 0

    def request_upload(self, pool_id: int, work_key: bytes, size: int, format: str = "rollouts") -> UploadTicket:
        self.calls += 1
        if self.calls <= self.refusals:
            raise EJECTED_REFUSAL
        return UploadTicket(url=f"http://store.test/{work_key.hex()}", headers={}, key=f"pools/{pool_id}/k")


@pytest.fixture
def entry(tmp_path: Path):
    data = b"a rollout file"
    return Journal(tmp_path / "journal").record_written(1, 0, 0, hashlib.sha256(data).digest(), data, 10, 4), data


@pytest.fixture
def store() -> httpx.Client:
    """An object store that takes every PUT."""
    return httpx.Client(transport=httpx.MockTransport(lambda _request: httpx.Response(200)))


def test_an_upload_refused_until_the_join_is_indexed_goes_through(entry: tuple, store: httpx.Client) -> None:
    journaled, data = entry
    api = RefusingApi(refusals=3)
    wait = JoinIndexWait(1, NODE.address, "upload requests")
    key = upload(api, journaled, data, threading.Event(), FAST, store, wait)  # type: ignore[arg-type]
    assert key == "pools/1/k" and api.calls == 4


def test_an_upload_refused_past_the_bound_stops_the_worker(entry: tuple, store: httpx.Client) -> None:
    journaled, data = entry
    api = RefusingApi(refusals=10**6)
    wait = JoinIndexWait(1, NODE.address, "upload requests", timeout=0.05)
    with pytest.raises(JoinNotIndexed, match="after 0 s"):
        upload(api, journaled, data, threading.Event(), Backoff(initial=0.01, maximum=0.01), store, wait)  # type: ignore[arg-type]
    assert api.calls > 1


def test_without_the_wait_the_refusal_is_not_retried(entry: tuple, store: httpx.Client) -> None:
    journaled, data = entry
    api = RefusingApi(refusals=1)
    with pytest.raises(ApiRefused, match="not_active_member"):
        upload(api, journaled, data, threading.Event(), FAST, store)  # type: ignore[arg-type]
    assert api.calls == 1


# --------------------------------------------------------------------------- heartbeats after an ejection


class Pool:
    """The chain's view of the node: ejected until `joinPool`, then active."""

    def __init__(self, state: MemberState) -> None:
        self.state, self.joins = state, 0

    def get_member(self, _pool: int, _node: str) -> SimpleNamespace:
        return SimpleNamespace(state=self.state, blacklisted=False)

    def pool_approval(self, _pool: int, _provider: str) -> PoolApproval:
        return PoolApproval(max_slash=100, slashed=0, approved=True)

    def join_pool(self, _invite: object) -> None:
        self.joins += 1
        self.state = MemberState.ACTIVE


class LaggingBackend:
    """Heartbeats answer state `ejected` (the indexer has not seen the join) until told otherwise."""

    def __init__(self) -> None:
        self.state = "ejected"
        self.beats = 0

    def heartbeat(self, pool_id: int, completed: object = None, unservable: object = None) -> Heartbeat:
        self.beats += 1
        return Heartbeat(NODE.address, self.state, pool_id, None, heartbeat_interval=0.001, server_time=0.0)

    def get_invite(self, _node: str, _pool: int) -> SimpleNamespace:
        return SimpleNamespace(invite=SimpleNamespace(nonce=7))

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} must not be used while the node has no assignment")


def worker(tmp_path: Path, pool: Pool, api: LaggingBackend, timeout: float) -> WorkerNode:
    registry = SimpleNamespace(active_node_provider=lambda _node: PROVIDER)
    client = SimpleNamespace(pool=pool, registry=registry, address=NODE.address)
    config = WorkerConfig(
        pool_id=1,
        state_dir=tmp_path / "state",
        checkpoint_cache_dir=tmp_path / "cache",
        idle_interval=0.001,
        backoff=FAST,
        join_index_timeout=timeout,
    )
    console = WorkerConsole(NODE.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    return WorkerNode(config, NODE, client, api, lambda: None, console)  # type: ignore[arg-type]


def test_an_ejected_node_joins_again_and_waits_for_the_indexer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pool, api = Pool(MemberState.EJECTED), LaggingBackend()
    node = worker(tmp_path, pool, api, timeout=60)
    with caplog.at_level(logging.WARNING, logger="proofpool.worker.membership"):
        for _ in range(3):
            node.turn()
    assert pool.joins == 1  # joined once; the later "ejected" answers are the backend lagging
    assert caplog.text.count("waiting for the backend's indexer") == 3
    api.state = "healthy"  # indexed: a healthy member with no work (the pool is paused, say)
    node.turn()
    api.state = "ejected"
    node.turn()  # the backend lags again: waited for, and no second join while the chain has the node
    assert pool.joins == 1


def test_a_backend_that_never_sees_the_join_stops_the_worker(tmp_path: Path) -> None:
    pool, api = Pool(MemberState.ACTIVE), LaggingBackend()
    node = worker(tmp_path, pool, api, timeout=0.05)
    with pytest.raises(JoinNotIndexed, match="heartbeats of node"):
        for _ in range(10_000):
            node.turn()
    assert pool.joins == 0 and api.beats > 1
