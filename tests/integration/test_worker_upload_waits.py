"""The worker's upload (`proofpool.worker.submit.upload`, its real NodeApi client) against the real
backend app, PostgreSQL, Redis and SeaweedFS, in the two cases where the backend says "not now":

- a node that joined again after an ejection, before the indexer saw the join: `403
  not_active_member (state: ejected)` is waited out, and the file is uploaded once the
  membership row turns active (as the indexer writes it);
- a node over the upload rate limit: `429` with Retry-After, waited exactly (not the worker's
  backoff), and the file is uploaded when the next slot frees.

Own database (`proofpool_test_upload_waits_<random>`), Redis db 6."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from fastapi.testclient import TestClient
from proofpool.worker.journal import Journal, JournalEntry
from proofpool.worker.membership import JoinIndexWait
from proofpool.worker.retry import Backoff
from proofpool.worker.submit import upload
from redis import Redis

from proofpool.infra.config import Settings, get_settings
from proofpool.infra.http.node_api import NodeApi
from proofpool.infra.storage import ObjectStore, rollout_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.backend import API_POOL_CONTRACT, CHAIN_ID, TEST_HOST, empty_redis, signing_settings
from tests.fixtures.postgres import migrated_database

pytestmark = pytest.mark.timeout(60)

WAITS_REDIS_DB = 6
"""Not used by any other test (7-15 are: grep REDIS_DB)."""
RATE = 60
"""Upload URLs per node per minute: after the first 60, one a second (Retry-After: 1)."""
POOL = 1
PROVIDER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
SLOW = Backoff(initial=60.0, maximum=60.0)
"""A backoff no test may sit through: what is waited must be the backend's Retry-After."""


@pytest.fixture(scope="module")
def waits_database_url() -> Iterator[str]:
    with migrated_database("proofpool_test_upload_waits") as url:
        yield url


@pytest.fixture(scope="module")
def app_client(waits_database_url: str, seaweed: SeaweedProcess) -> Iterator[TestClient]:
    from proofpool.backend.app import create_app

    settings = Settings(
        DATABASE_URL=waits_database_url,
        REDIS_URL=get_settings().redis_url.rsplit("/", 1)[0] + f"/{WAITS_REDIS_DB}",
        upload_rate_per_minute=RATE,
        db_pool_max=2,
        **signing_settings(),
    )
    with TestClient(create_app(seaweed.settings(settings)), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def conn(app_client: TestClient, waits_database_url: str) -> Iterator[psycopg.Connection]:
    """SQL on the backend's database, with one active pool and no members; Redis emptied."""
    redis = Redis.from_url(app_client.app.state.settings.redis_url)
    empty_redis(redis)
    redis.close()
    with psycopg.connect(waits_database_url, autocommit=True) as connection:
        connection.execute("DELETE FROM memberships")
        connection.execute("DELETE FROM pools")
        connection.execute(
            "INSERT INTO pools (pool_id, creator, manager, treasury, status, model_uri, reward_per_unit,"
            " validator_fee, slash_amount, dispute_window, validator_slash_share_bps, budget, block_number, tx_hash)"
            " VALUES (%s, %s, %s, %s, 'active', 'devnet://m', 1, 1, 1, 3600, 5000, 1000, 1, %s)",
            (POOL, PROVIDER, PROVIDER, PROVIDER, b"\x22" * 32),
        )
        yield connection


@pytest.fixture
def node() -> LocalAccount:
    return Account.create()


@pytest.fixture
def api(app_client: TestClient, node: LocalAccount) -> NodeApi:
    """The worker's client, signing as the node, calling the app in-process."""
    client = NodeApi(f"http://{TEST_HOST}", node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)
    client._client._http = app_client  # TestClient is an httpx.Client that calls the app in-process
    return client


def journaled(tmp_path: Path, content: bytes) -> tuple[JournalEntry, bytes]:
    return Journal(tmp_path / "journal").record_written(
        POOL, 0, 0, hashlib.sha256(content).digest(), content, 8, 4
    ), content


def set_membership(conn: psycopg.Connection, node: str, state: str) -> None:
    """What the indexer writes for the node's `NodeEjected` / `NodeJoined`."""
    conn.execute(
        "INSERT INTO memberships (pool_id, node, provider, state, blacklisted, block_number, tx_hash)"
        " VALUES (%s, %s, %s, %s, false, 1, %s)"
        " ON CONFLICT (pool_id, node) DO UPDATE SET state = EXCLUDED.state",
        (POOL, node, PROVIDER, state, b"\x33" * 32),
    )


class IndexerCatchesUp(JoinIndexWait):
    """The wait of a worker whose backend's indexer writes the join right after the first refusal."""

    def __init__(self, conn: psycopg.Connection, node: str) -> None:
        super().__init__(POOL, node, "upload requests")
        self.conn = conn
        self.refusals: list[str] = []

    def waiting(self, answer: str) -> int:
        self.refusals.append(answer)
        set_membership(self.conn, self.node, "active")
        return super().waiting(answer)


def test_an_upload_right_after_a_rejoin_waits_for_the_indexer(
    api: NodeApi, conn: psycopg.Connection, node: LocalAccount, object_store: ObjectStore, tmp_path: Path
) -> None:
    set_membership(conn, node.address, "ejected")  # the backend's view; on-chain the node joined again
    entry, data = journaled(tmp_path, b"rows of a batch generated before the ejection")
    wait = IndexerCatchesUp(conn, node.address)
    key = upload(api, entry, data, threading.Event(), Backoff(initial=0.01), membership=wait)

    assert len(wait.refusals) == 1
    assert wait.refusals[0].startswith("403 not_active_member") and "(state: ejected)" in wait.refusals[0]
    assert key == rollout_key(POOL, node.address, hashlib.sha256(data).hexdigest())
    head = object_store.head_object(key)
    assert head is not None and head.size == len(data)


def test_an_upload_over_the_rate_limit_waits_the_retry_after(
    api: NodeApi, conn: psycopg.Connection, node: LocalAccount, object_store: ObjectStore, tmp_path: Path
) -> None:
    set_membership(conn, node.address, "active")
    for i in range(RATE):  # the node's whole burst
        api.request_upload(POOL, hashlib.sha256(b"earlier file %d" % i).digest(), 10)
    entry, data = journaled(tmp_path, b"rows of a batch over the limit")

    started = time.monotonic()
    key = upload(api, entry, data, threading.Event(), SLOW)
    waited = time.monotonic() - started

    assert 0.5 <= waited < 10  # the Retry-After (1 s for one slot a second), not the 60 s backoff
    head = object_store.head_object(key)
    assert head is not None and head.size == len(data)
