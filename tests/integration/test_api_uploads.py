"""`POST /v1/uploads` through the real app: its own migrated database
(`proofpool_test_uploads_<random>`), Redis db 13, SeaweedFS; membership rows written with SQL
as the indexer would. Every refusal is a 4xx with a JSON reason, never a 5xx."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from eth_account import Account
from eth_account.signers.local import LocalAccount
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from proofpool.core.auth.signed_request import sign_request
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.http.node_api import NodeApi
from proofpool.infra.storage import (
    ROLLOUT_CONTENT_TYPE,
    UPDATE_CONTENT_TYPE,
    ObjectStore,
    parse_update_key,
    put_presigned,
    rollout_key,
    update_key,
)
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.backend import API_POOL_CONTRACT, CHAIN_ID, TEST_AUDIENCE, TEST_HOST, empty_redis, signing_settings
from tests.fixtures.postgres import migrated_database

UPLOADS_REDIS_DB = 13
MAX_BYTES = 64 * 1024
RATE = 5
POOL, OTHER_POOL = 1, 2
PROVIDER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
FILE = b"PAR1" + bytes(range(256)) * 16 + b"PAR1"
FILE_SHA = hashlib.sha256(FILE).hexdigest()


@pytest.fixture(scope="module")
def uploads_database_url() -> Iterator[str]:
    with migrated_database("proofpool_test_uploads") as url:
        yield url


@pytest.fixture(scope="module")
def uploads_settings(uploads_database_url: str, seaweed: SeaweedProcess) -> Settings:
    redis_url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{UPLOADS_REDIS_DB}"
    base = Settings(
        DATABASE_URL=uploads_database_url,
        REDIS_URL=redis_url,
        upload_max_bytes=MAX_BYTES,
        upload_rate_per_minute=RATE,
        db_pool_max=2,
        **signing_settings(),
    )
    return seaweed.settings(base)


@pytest.fixture(scope="module")
def client(uploads_settings: Settings) -> Iterator[TestClient]:
    from proofpool.backend.app import create_app

    with TestClient(create_app(uploads_settings), raise_server_exceptions=False) as test_client:
        yield test_client


@dataclass
class Uploads:
    """The app plus SQL and Redis handles for one test, with clean tables and Redis db."""

    client: TestClient
    conn: psycopg.Connection
    store: ObjectStore

    def request(self, signer: LocalAccount, body: Any, *, headers: dict[str, str] | None = None) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        signed = {**sign_request(signer, TEST_AUDIENCE, "POST", "/v1/uploads", raw), "Content-Type": "application/json"}
        return self.client.post("/v1/uploads", content=raw, headers={**signed, **(headers or {})})

    def ask(
        self, signer: LocalAccount, pool_id: int = POOL, sha: str = FILE_SHA, size: int = len(FILE), **extra: Any
    ) -> httpx.Response:
        return self.request(signer, {"pool_id": pool_id, "sha256": sha, "size": size, **extra})

    def add_pool(self, pool_id: int, status: str = "active") -> None:
        self.conn.execute(
            "INSERT INTO pools (pool_id, creator, manager, treasury, status, model_uri, reward_per_unit,"
            " validator_fee, slash_amount, dispute_window, validator_slash_share_bps, budget, block_number, tx_hash)"
            " VALUES (%s, %s, %s, %s, %s, 'devnet://m', 1, 1, 1, 3600, 5000, 1000, 1, %s)",
            (pool_id, PROVIDER, PROVIDER, PROVIDER, status, b"\x22" * 32),
        )

    def add_member(self, pool_id: int, node: str, state: str | None = "active", blacklisted: bool = False) -> None:
        self.conn.execute(
            "INSERT INTO memberships (pool_id, node, provider, state, blacklisted, block_number, tx_hash)"
            " VALUES (%s, %s, %s, %s, %s, 1, %s)",
            (pool_id, node, PROVIDER, state, blacklisted, b"\x33" * 32),
        )


@pytest.fixture
def uploads(
    client: TestClient, uploads_database_url: str, uploads_settings: Settings, object_store: ObjectStore
) -> Iterator[Uploads]:
    redis = Redis.from_url(uploads_settings.redis_url)
    empty_redis(redis)
    redis.close()
    with psycopg.connect(uploads_database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM memberships")
        conn.execute("DELETE FROM pools")
        harness = Uploads(client, conn, object_store)
        harness.add_pool(POOL)
        harness.add_pool(OTHER_POOL)
        yield harness


@pytest.fixture
def node() -> LocalAccount:
    """A fresh node key per test, so rate-limit buckets never carry over."""
    return Account.create()


def _assert_refused(reply: httpx.Response, status: int, error: str) -> dict:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert body["error"] == error and body["detail"]
    return body


# --- the happy path -------------------------------------------------------------------------


def test_member_gets_a_url_for_exactly_its_key_and_the_put_succeeds(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    reply = uploads.ask(node)
    assert reply.status_code == 200, reply.text
    ticket = reply.json()

    key = rollout_key(POOL, node.address, FILE_SHA)
    assert ticket["key"] == key == f"pools/{POOL}/rollouts/{node.address}/{FILE_SHA}.parquet"
    assert (ticket["method"], ticket["node"], ticket["sha256"], ticket["size"]) == (
        "PUT",
        node.address,
        FILE_SHA,
        len(FILE),
    )
    assert ticket["headers"]["Content-Length"] == str(len(FILE))
    assert ticket["headers"]["Content-Type"] == ROLLOUT_CONTENT_TYPE
    assert "x-amz-checksum-sha256" in ticket["headers"]
    assert httpx.URL(ticket["url"]).path == f"/{ticket['bucket']}/{key}"
    assert httpx.URL(ticket["url"]).params["X-Amz-Expires"] == "900"
    ttl = (datetime.fromisoformat(ticket["expires_at"]) - datetime.now(UTC)).total_seconds()
    assert 890 <= ttl <= 900

    assert httpx.put(ticket["url"], content=FILE[:-1] + b"X", headers=ticket["headers"]).status_code in (400, 403)
    put_presigned(ticket["url"], ticket["headers"], FILE)
    head = uploads.store.head_object(key)
    assert head is not None and head.sha256_hex == FILE_SHA and head.size == len(FILE)


def test_sha256_may_carry_0x_and_upper_case(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    reply = uploads.ask(node, sha="0x" + FILE_SHA.upper())
    assert reply.status_code == 200, reply.text
    assert reply.json()["key"].endswith(f"/{FILE_SHA}.parquet")


def test_the_app_builds_one_s3_client_lazily(client: TestClient, uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    assert uploads.ask(node).status_code == 200
    first = client.app.state.object_store
    assert uploads.ask(node).status_code == 200
    assert client.app.state.object_store is first


def test_size_at_the_limit_is_accepted(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    reply = uploads.ask(node, size=MAX_BYTES)
    assert reply.status_code == 200, reply.text
    assert reply.json()["headers"]["Content-Length"] == str(MAX_BYTES)


# --- training pools: update files ----------------------------------------------------------


def test_an_update_gets_a_url_for_its_update_key_and_the_put_succeeds(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    reply = uploads.ask(node, format="update")
    assert reply.status_code == 200, reply.text
    ticket = reply.json()

    key = update_key(POOL, node.address, FILE_SHA)
    assert ticket["key"] == key == f"pools/{POOL}/updates/{node.address}/{FILE_SHA}.safetensors"
    assert parse_update_key(key).node == node.address
    assert ticket["headers"]["Content-Type"] == UPDATE_CONTENT_TYPE
    assert ticket["headers"]["Content-Length"] == str(len(FILE))
    assert httpx.URL(ticket["url"]).path == f"/{ticket['bucket']}/{key}"
    put_presigned(ticket["url"], ticket["headers"], FILE)
    head = uploads.store.head_object(key)
    assert head is not None and (head.sha256_hex, head.content_type) == (FILE_SHA, UPDATE_CONTENT_TYPE)
    assert uploads.store.head_object(rollout_key(POOL, node.address, FILE_SHA)) is None


def test_rollouts_is_the_default_format(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    named = uploads.ask(node, format="rollouts").json()
    assert named["key"] == uploads.ask(node).json()["key"] == rollout_key(POOL, node.address, FILE_SHA)
    assert named["headers"]["Content-Type"] == ROLLOUT_CONTENT_TYPE


@pytest.mark.parametrize("bad", ["updates", "Update", "parquet", "", None, 1, ["update"]])
def test_an_unknown_format_is_422_naming_the_formats(uploads: Uploads, node: LocalAccount, bad: Any) -> None:
    uploads.add_member(POOL, node.address)
    body = _assert_refused(uploads.ask(node, format=bad), 422, "invalid_request")
    [problem] = body["detail"]
    assert problem["loc"] == ["body", "format"]
    assert "'rollouts'" in problem["msg"] and "'update'" in problem["msg"]


def test_an_update_is_refused_as_a_rollout_file_is(uploads: Uploads, node: LocalAccount) -> None:
    _assert_refused(uploads.ask(node, format="update"), 403, "not_active_member")
    uploads.add_member(POOL, node.address)
    _assert_refused(uploads.ask(node, format="update", size=MAX_BYTES + 1), 413, "upload_too_large")
    for _ in range(RATE - 1):  # the 413 spent no slot; the 403 did (the limit comes before the lookup)
        assert uploads.ask(node, format="update").status_code == 200
    _assert_refused(uploads.ask(node, format="update"), 429, "rate_limited")


def test_the_node_client_asks_for_an_update_url(client: TestClient, uploads: Uploads, node: LocalAccount) -> None:
    """`NodeApi.request_upload(..., format="update")`, the worker's client, through the real app."""
    uploads.add_member(POOL, node.address)
    api = NodeApi(f"http://{TEST_HOST}", node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)
    api._client._http = client  # TestClient is an httpx.Client that calls the app in-process
    update = api.request_upload(POOL, bytes.fromhex(FILE_SHA), len(FILE), format="update")
    rollouts = api.request_upload(POOL, bytes.fromhex(FILE_SHA), len(FILE))
    assert (update.key, rollouts.key) == (
        update_key(POOL, node.address, FILE_SHA),
        rollout_key(POOL, node.address, FILE_SHA),
    )
    put_presigned(update.url, update.headers, FILE)
    assert uploads.store.head_object(update.key) is not None


# --- refusals -------------------------------------------------------------------------------


def test_non_member_is_forbidden(uploads: Uploads, node: LocalAccount) -> None:
    body = _assert_refused(uploads.ask(node), 403, "not_active_member")
    assert "join it first" in body["detail"]


def test_member_of_another_pool_is_forbidden(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(OTHER_POOL, node.address)
    _assert_refused(uploads.ask(node, pool_id=POOL), 403, "not_active_member")
    assert uploads.ask(node, pool_id=OTHER_POOL).status_code == 200


def test_unknown_pool_is_forbidden(uploads: Uploads, node: LocalAccount) -> None:
    _assert_refused(uploads.ask(node, pool_id=999), 403, "not_active_member")


@pytest.mark.parametrize(
    "state, blacklisted, pool_status, words",
    [
        ("left", False, "active", "state: left"),
        ("ejected", False, "active", "state: ejected"),
        ("slashed", False, "active", "state: slashed"),
        ("active", True, "active", "blacklisted"),
        (None, True, "active", "not a member"),
        ("active", False, "closed", "status: closed"),
    ],
)
def test_inactive_membership_is_forbidden_with_the_reason(
    uploads: Uploads, node: LocalAccount, state: str | None, blacklisted: bool, pool_status: str, words: str
) -> None:
    uploads.conn.execute("UPDATE pools SET status = %s WHERE pool_id = %s", (pool_status, POOL))
    uploads.add_member(POOL, node.address, state, blacklisted)
    body = _assert_refused(uploads.ask(node), 403, "not_active_member")
    assert words in body["detail"]


def test_oversized_upload_is_413(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    body = _assert_refused(uploads.ask(node, size=MAX_BYTES + 1), 413, "upload_too_large")
    assert str(MAX_BYTES) in body["detail"]


@pytest.mark.parametrize(
    "payload",
    [
        {"pool_id": POOL, "sha256": FILE_SHA[:-1], "size": 10},
        {"pool_id": POOL, "sha256": FILE_SHA[:-1] + "g", "size": 10},
        {"pool_id": POOL, "sha256": FILE_SHA + "00", "size": 10},
        {"pool_id": POOL, "sha256": "", "size": 10},
        {"pool_id": POOL, "sha256": 12345, "size": 10},
        {"pool_id": POOL, "size": 10},
        {"pool_id": POOL, "sha256": FILE_SHA, "size": 0},
        {"pool_id": POOL, "sha256": FILE_SHA, "size": -5},
        {"pool_id": POOL, "sha256": FILE_SHA, "size": "10x"},
        {"pool_id": -1, "sha256": FILE_SHA, "size": 10},
        {"pool_id": 2**63, "sha256": FILE_SHA, "size": 10},
        {"pool_id": POOL, "sha256": FILE_SHA, "size": 10, "node": "0x" + "11" * 20},
        [],
    ],
)
def test_malformed_body_is_422(uploads: Uploads, node: LocalAccount, payload: Any) -> None:
    uploads.add_member(POOL, node.address)
    _assert_refused(uploads.request(node, payload), 422, "invalid_request")


def test_malformed_json_is_422(uploads: Uploads, node: LocalAccount) -> None:
    _assert_refused(uploads.request(node, b'{"pool_id": 1, "sha256": '), 422, "invalid_request")


def test_rate_limit_is_429_with_retry_after(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    for _ in range(RATE):
        assert uploads.ask(node).status_code == 200
    reply = uploads.ask(node)
    _assert_refused(reply, 429, "rate_limited")
    assert 1 <= int(reply.headers["Retry-After"]) <= 60 // RATE + 1

    other = Account.create()  # the limit is per node
    uploads.add_member(POOL, other.address)
    assert uploads.ask(other).status_code == 200


def test_bad_signature_is_401(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    raw = json.dumps({"pool_id": POOL, "sha256": FILE_SHA, "size": len(FILE)}).encode()
    headers = {**sign_request(node, TEST_AUDIENCE, "POST", "/v1/uploads", raw), "Content-Type": "application/json"}
    signature = bytearray.fromhex(headers["X-Signature"][2:])
    signature[10] ^= 0xFF
    tampered = {**headers, "X-Signature": "0x" + signature.hex()}
    reply = uploads.client.post("/v1/uploads", content=raw, headers=tampered)
    assert reply.status_code == 401, reply.text
    assert reply.json()["error"] in {"bad_signature", "address_mismatch"}


def test_body_changed_after_signing_is_401(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    raw = json.dumps({"pool_id": POOL, "sha256": FILE_SHA, "size": len(FILE)}).encode()
    headers = {**sign_request(node, TEST_AUDIENCE, "POST", "/v1/uploads", raw), "Content-Type": "application/json"}
    bigger = raw.replace(str(len(FILE)).encode(), str(MAX_BYTES).encode())
    _assert_refused(uploads.client.post("/v1/uploads", content=bigger, headers=headers), 401, "address_mismatch")


def test_member_address_signed_by_another_key_is_401(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    intruder = Account.create()
    reply = uploads.request(
        intruder, {"pool_id": POOL, "sha256": FILE_SHA, "size": 10}, headers={"X-Address": node.address}
    )
    _assert_refused(reply, 401, "address_mismatch")


def test_unsigned_and_stale_requests_are_401(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    raw = json.dumps({"pool_id": POOL, "sha256": FILE_SHA, "size": 10}).encode()
    unsigned = uploads.client.post("/v1/uploads", content=raw, headers={"Content-Type": "application/json"})
    _assert_refused(unsigned, 401, "missing_header")
    stale = {
        **sign_request(node, TEST_AUDIENCE, "POST", "/v1/uploads", raw, now=time.time() - 3600),
        "Content-Type": "application/json",
    }
    _assert_refused(uploads.client.post("/v1/uploads", content=raw, headers=stale), 401, "stale_timestamp")


def test_replayed_request_is_401(uploads: Uploads, node: LocalAccount) -> None:
    uploads.add_member(POOL, node.address)
    raw = json.dumps({"pool_id": POOL, "sha256": FILE_SHA, "size": 10}).encode()
    headers = {**sign_request(node, TEST_AUDIENCE, "POST", "/v1/uploads", raw), "Content-Type": "application/json"}
    assert uploads.client.post("/v1/uploads", content=raw, headers=headers).status_code == 200
    _assert_refused(uploads.client.post("/v1/uploads", content=raw, headers=headers), 401, "replayed_nonce")


# --- fuzzing --------------------------------------------------------------------------------


def _upload_operation(client: TestClient):
    schema = schemathesis.openapi.from_dict(client.app.openapi())
    ops = [result.ok() for result in schema.get_all_operations()]
    return next(op for op in ops if op.definition.raw.get("operationId") == "uploads-create_upload")


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda mode: mode.value)
def test_fuzzed_bodies_never_get_a_server_error(uploads: Uploads, node: LocalAccount, mode: GenerationMode) -> None:
    """Schemathesis bodies, signed by an active member, some steered to its pool: 2xx or 4xx only."""
    uploads.add_member(POOL, node.address)
    operation = _upload_operation(uploads.client)
    redis = Redis.from_url(uploads.client.app.state.settings.redis_url)

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        if isinstance(case.body, dict) and data.draw(st.booleans(), label="steer"):
            case.body["pool_id"] = POOL
        redis.delete(f"ratelimit:uploads:{node.address}")  # reach the handler, not the limiter
        kwargs = case.as_transport_kwargs(base_url="http://testserver")
        raw = json.dumps(kwargs["json"]).encode() if "json" in kwargs else (kwargs.get("data") or b"")
        raw = raw.encode() if isinstance(raw, str) else raw
        response = uploads.request(node, raw)
        ok = 200 <= response.status_code < 300
        assert response.status_code < 500, response.text
        assert ok or response.json()["error"], response.text
        checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
        case.validate_response(response, checks=checks)

    try:
        fuzz()
    finally:
        redis.close()
