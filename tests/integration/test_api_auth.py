"""Replaying signed requests where they were not meant to go: to another host of the same
deployment, to a backend of another deployment, and to the same backend after its Redis lost
the nonces. Real app, PostgreSQL and Redis (dbs 5 and 6, used by no other test); every
refusal is a 401 naming the reason and leaves no trace (no heartbeat recorded)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from fastapi.testclient import TestClient
from httpx import Response
from proofpool.backend.orchestrator.liveness import HEARTBEATS_KEY
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from proofpool.core.auth.signed_request import Audience, AuthError, Deployment, SignedHeaders, TimeWindow, sign_request
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.http.node_api import NodeApi
from proofpool.infra.nonce_store import EPOCH_KEY, NonceStore
from tests.fixtures.backend import (
    API_POOL_CONTRACT,
    CHAIN_ID,
    ApiHarness,
    empty_redis,
    signing_settings,
    write_address_book,
)

HOST_A, HOST_B = "backend-a.example:8000", "backend-b.example:8000"
REDIS_DB_A, REDIS_DB_B = 5, 6
HEARTBEAT = "/v1/heartbeat"
OTHER_CONTRACT = "0x" + "cd" * 20
MAX_AHEAD = 1
"""`signature_max_ahead` of these backends: after a loss of the nonce store, fresh requests are
held off this long (1 s keeps the test that waits it out short)."""


def redis_url(db: int) -> str:
    return get_settings().redis_url.rsplit("/", 1)[0] + f"/{db}"


def backend_settings(api_settings: Settings, host: str, redis_db: int, **overrides: object) -> Settings:
    return api_settings.model_copy(
        update={
            **signing_settings(host),
            "redis_url": redis_url(redis_db),
            "signature_max_ahead": MAX_AHEAD,
            **overrides,
        }
    )


@pytest.fixture(scope="module")
def backend_a(api_settings: Settings) -> Iterator[TestClient]:
    """A backend of the test deployment reached at HOST_A, its nonces in Redis db 5."""
    from proofpool.backend.app import create_app

    with TestClient(create_app(backend_settings(api_settings, HOST_A, REDIS_DB_A)), base_url=f"http://{HOST_A}") as c:
        yield c


@pytest.fixture(scope="module")
def backend_b(api_settings: Settings) -> Iterator[TestClient]:
    """A second host of the same deployment, HOST_B, with its own nonce store (Redis db 6)."""
    from proofpool.backend.app import create_app

    with TestClient(create_app(backend_settings(api_settings, HOST_B, REDIS_DB_B)), base_url=f"http://{HOST_B}") as c:
        yield c


@pytest.fixture
def stores() -> Iterator[tuple[Redis, Redis]]:
    """Redis dbs 5 and 6, emptied (and marked complete) for this test."""
    clients = Redis.from_url(redis_url(REDIS_DB_A)), Redis.from_url(redis_url(REDIS_DB_B))
    for client in clients:
        empty_redis(client)
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


@pytest.fixture
def node(api: ApiHarness) -> LocalAccount:
    """A registered, announced node (in the shared test database)."""
    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    api.conn.execute(
        "INSERT INTO node_announcements (address, provider, specs) VALUES (%s, %s, '{}')",
        (node.address, provider.address),
    )
    return node


def audience(host: str, chain_id: int = CHAIN_ID, pool: str = API_POOL_CONTRACT) -> Audience:
    return Audience(Deployment(chain_id, pool), host)


def heartbeat(client: TestClient, headers: dict[str, str], host: str | None = None) -> Response:
    """POST /v1/heartbeat with exactly `headers` (and an explicit Host header if given)."""
    extra = {"Host": host} if host else {}
    return client.post(HEARTBEAT, content=b"{}", headers={**headers, **extra, "Content-Type": "application/json"})


def refusal(reply: Response) -> tuple[int, str]:
    body = reply.json()
    assert set(body) == {"error", "detail"} and body["detail"], body
    return reply.status_code, body["error"]


def beats(store: Redis, node: LocalAccount) -> float | None:
    return store.zscore(HEARTBEATS_KEY, node.address)


# --------------------------------------------------------------------------- hosts


@pytest.mark.timeout(20)
def test_request_signed_for_host_a_is_refused_by_host_b(
    backend_a: TestClient, backend_b: TestClient, stores: tuple[Redis, Redis], node: LocalAccount
) -> None:
    captured = sign_request(node, audience(HOST_A), "POST", HEARTBEAT, b"{}")
    assert heartbeat(backend_a, captured).status_code == 200

    # replayed at B as captured (Host: A): B is not A
    assert refusal(heartbeat(backend_b, captured, host=HOST_A)) == (401, "wrong_host")
    # replayed at B under B's own name: the signature names A
    assert refusal(heartbeat(backend_b, captured)) == (401, "address_mismatch")
    # a fresh request for A, sent to B first, is refused there too, and B keeps no trace of it
    fresh = sign_request(node, audience(HOST_A), "POST", HEARTBEAT, b"{}")
    assert refusal(heartbeat(backend_b, fresh)) == (401, "address_mismatch")
    assert beats(stores[1], node) is None
    # what B takes: a request signed for B
    assert heartbeat(backend_b, sign_request(node, audience(HOST_B), "POST", HEARTBEAT, b"{}")).status_code == 200


@pytest.mark.timeout(20)
def test_host_is_compared_without_case_or_default_port(
    api_settings: Settings, stores: tuple[Redis, Redis], node: LocalAccount
) -> None:
    from proofpool.backend.app import create_app

    settings = backend_settings(api_settings, "API.Example.org:443", REDIS_DB_A)
    with TestClient(create_app(settings), base_url="https://api.example.org") as client:
        client_side = Audience.for_base_url(
            "https://API.example.org:443/", chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT
        )
        assert client_side.host == "api.example.org"
        reply = heartbeat(client, sign_request(node, client_side, "POST", HEARTBEAT, b"{}"))
        assert reply.status_code == 200, reply.text


# --------------------------------------------------------------------------- deployments


@pytest.mark.parametrize(
    "signed_for",
    [audience(HOST_A, chain_id=1), audience(HOST_A, pool=OTHER_CONTRACT), audience(HOST_A, 10, OTHER_CONTRACT)],
    ids=["other-chain", "other-pool-contract", "other-both"],
)
@pytest.mark.timeout(20)
def test_request_signed_for_another_deployment_is_refused(
    backend_a: TestClient, stores: tuple[Redis, Redis], node: LocalAccount, signed_for: Audience
) -> None:
    reply = heartbeat(backend_a, sign_request(node, signed_for, "POST", HEARTBEAT, b"{}"))
    assert refusal(reply) == (401, "address_mismatch")
    assert f"chain {CHAIN_ID}" in reply.json()["detail"]  # the detail names the deployment we serve
    assert beats(stores[0], node) is None
    assert heartbeat(backend_a, sign_request(node, audience(HOST_A), "POST", HEARTBEAT, b"{}")).status_code == 200


@pytest.mark.timeout(20)
def test_unconfigured_backend_binds_to_the_indexed_chain_and_its_address_book(
    api: ApiHarness, api_settings: Settings, stores: tuple[Redis, Redis], node: LocalAccount
) -> None:
    """Without PROOFPOOL_API_CHAIN_ID/POOL_CONTRACT the deployment is the chain the indexer
    follows and the ComputePool of its address book, as for invites; 503 until that is known."""
    from proofpool.backend.app import create_app

    settings = backend_settings(api_settings, HOST_A, REDIS_DB_A, api_chain_id=None, api_pool_contract=None)
    with TestClient(create_app(settings), base_url=f"http://{HOST_A}") as client:
        ours = sign_request(node, audience(HOST_A, CHAIN_ID, OTHER_CONTRACT), "POST", HEARTBEAT, b"{}")
        assert refusal(heartbeat(client, ours)) == (503, "chain_unknown")  # no indexer_state yet
        api.set_chain(CHAIN_ID)
        write_address_book(api_settings.deployments_dir, OTHER_CONTRACT, CHAIN_ID)
        assert heartbeat(client, ours).status_code == 200
        other = sign_request(node, audience(HOST_A), "POST", HEARTBEAT, b"{}")  # API_POOL_CONTRACT
        assert refusal(heartbeat(client, other)) == (401, "address_mismatch")


# --------------------------------------------------------------------------- nonce store loss


@pytest.mark.timeout(20)
def test_captured_request_replayed_after_redis_lost_the_nonces_is_refused(
    backend_a: TestClient, stores: tuple[Redis, Redis], node: LocalAccount
) -> None:
    store = stores[0]
    captured = sign_request(node, audience(HOST_A), "POST", HEARTBEAT, b"{}")
    assert heartbeat(backend_a, captured).status_code == 200
    assert refusal(heartbeat(backend_a, captured)) == (401, "replayed_nonce")

    store.flushdb()  # Redis restarted empty, failed over, or flushed: the nonce is forgotten
    reply = heartbeat(backend_a, captured)
    assert refusal(reply) == (401, "predates_nonce_store")
    assert int(reply.headers["Retry-After"]) >= MAX_AHEAD
    assert beats(store, node) is None  # refused before the handler: no heartbeat recorded
    assert store.exists(EPOCH_KEY)  # the backend noticed the loss and restarted the store's clock
    # (that it stays refused later, while a request signed again passes: the explicit-clock test below)


@pytest.mark.timeout(20)
def test_signed_client_signs_again_when_the_nonce_store_just_restarted(
    backend_a: TestClient, stores: tuple[Redis, Redis], node: LocalAccount
) -> None:
    """Right after a loss even a fresh request falls under the epoch rule; `SignedClient` waits
    the Retry-After and signs again, so workers see no error."""
    stores[0].flushdb()
    stores[0].set(EPOCH_KEY, repr(time.time()))  # lost just now
    api = NodeApi(f"http://{HOST_A}", node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)
    api._client._http = backend_a  # TestClient is an httpx.Client that calls the app in-process
    started = time.monotonic()
    assert api.heartbeat().state == "discovered"
    assert time.monotonic() - started >= 0.5  # it did wait for the store


# --------------------------------------------------------------------------- the store's rule


def headers_at(timestamp: int, nonce: str) -> SignedHeaders:
    return SignedHeaders(Account.create().address, timestamp, nonce, b"\x00" * 65)


@pytest.mark.timeout(20)
def test_nonce_store_rule_with_explicit_times(stores: tuple[Redis, Redis]) -> None:
    """The epoch rule of `proofpool.infra.nonce_store`, clock injected: nonces live as long as
    the window; after a loss nothing timestamped before epoch + max_ahead passes."""
    import asyncio

    window = TimeWindow(max_age=300, max_ahead=5)
    stores[1].delete(EPOCH_KEY)

    async def scenario() -> None:
        redis = AsyncRedis.from_url(redis_url(REDIS_DB_B))
        try:
            nonces = NonceStore(redis, window)
            assert await nonces.open(now=1_000.0) == 1_000.0
            assert await nonces.open(now=2_000.0) == 1_000.0  # start-up never moves an existing epoch
            early = headers_at(1_004, "a")
            with pytest.raises(AuthError) as refused:
                await nonces.claim(early, now=1_003.0)
            assert (refused.value.reason, refused.value.retry_after) == ("predates_nonce_store", 1)
            first = headers_at(1_005, "b")
            await nonces.claim(first, now=1_005.0)
            ttl = await redis.ttl(f"nonce:{first.address}:b")
            assert window.max_age + window.max_ahead <= ttl <= window.nonce_ttl
            with pytest.raises(AuthError, match="used before"):
                await nonces.claim(first, now=1_200.0)

            await redis.flushdb()  # the loss
            with pytest.raises(AuthError) as refused:
                await nonces.claim(first, now=1_250.0)  # inside its window, nonce forgotten
            assert refused.value.reason == "predates_nonce_store"
            assert float(await redis.get(EPOCH_KEY)) == 1_250.0
            with pytest.raises(AuthError):
                await nonces.claim(headers_at(1_254, "c"), now=1_250.0)  # signed after, but within max_ahead
            await nonces.claim(headers_at(1_255, "d"), now=1_255.0)
        finally:
            await redis.aclose()

    asyncio.run(scenario())
