"""Hostile and broken requests to discovery and the orchestrator: each is a 4xx with a JSON
`{"error", "detail"}` naming the reason, never a 5xx."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from httpx import Response

from proofpool.core.auth.signed_request import Audience, Deployment, sign_request
from tests.fixtures.backend import API_POOL_CONTRACT, CHAIN_ID, MANAGER_KEY, TEST_AUDIENCE, ApiHarness, api_redis_url

MANAGER = Account.from_key(MANAGER_KEY)
HEARTBEAT = "/v1/heartbeat"


def healthy_member(api: ApiHarness) -> tuple[LocalAccount, LocalAccount]:
    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    api.add_pool(1, MANAGER.address)
    api.add_pool(2, MANAGER.address)
    api.add_member(1, node.address, provider.address)
    assert api.announce(node, provider.address).status_code == 200
    return node, provider


def send(api: ApiHarness, method: str, path: str, body: bytes, headers: dict[str, str]) -> Response:
    return api.client.request(method, path, content=body, headers={"Content-Type": "application/json", **headers})


def bad_signature(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    headers["X-Signature"] = "0x" + "00" * 65
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def non_hex_signature(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    headers["X-Signature"] = "0xnothex"
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def wrong_address(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(Account.create(), TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    headers["X-Address"] = node.address
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def tampered_body(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    return send(api, "POST", HEARTBEAT, b'{"pool_id": 1}', headers)


def other_path(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "PUT", "/v1/nodes", b"{}")
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def stale_timestamp(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {}, now=time.time() - api.settings.signature_max_skew - 60)


def future_timestamp(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {}, now=time.time() + api.settings.signature_max_skew + 60)


def sent_to_another_host(api: ApiHarness, node: LocalAccount) -> Response:
    """Signed for this backend, sent with the Host of another one (a proxy or a replayer's choice)."""
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    return send(api, "POST", HEARTBEAT, b"{}", {**headers, "Host": "other-backend.example:8000"})


def signed_for_another_host(api: ApiHarness, node: LocalAccount) -> Response:
    """Signed for another host of the same deployment, replayed here."""
    other = Audience(TEST_AUDIENCE.deployment, "other-backend.example:8000")
    return send(api, "POST", HEARTBEAT, b"{}", sign_request(node, other, "POST", HEARTBEAT, b"{}"))


def signed_for_another_chain(api: ApiHarness, node: LocalAccount) -> Response:
    other = Audience(Deployment(CHAIN_ID + 1, API_POOL_CONTRACT), TEST_AUDIENCE.host)
    return send(api, "POST", HEARTBEAT, b"{}", sign_request(node, other, "POST", HEARTBEAT, b"{}"))


def signed_for_another_pool_contract(api: ApiHarness, node: LocalAccount) -> Response:
    other = Audience(Deployment(CHAIN_ID, "0x" + "ef" * 20), TEST_AUDIENCE.host)
    return send(api, "POST", HEARTBEAT, b"{}", sign_request(node, other, "POST", HEARTBEAT, b"{}"))


def replayed_nonce(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    assert send(api, "POST", HEARTBEAT, b"{}", headers).status_code == 200
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def missing_headers(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    del headers["X-Nonce"]
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def no_headers(api: ApiHarness, node: LocalAccount) -> Response:
    return send(api, "POST", HEARTBEAT, b"{}", {})


def malformed_address_header(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    headers["X-Address"] = "0x1234"
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def unknown_node(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(Account.create(), "POST", HEARTBEAT, {})


def node_of_another_pool(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {"pool_id": 2})


def announce_as_other_nodes_provider(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(Account.create(), "PUT", "/v1/nodes", {"provider": node.address})


def malformed_json(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, b'{"pool_id": 1,')


def malformed_announcement(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "PUT", "/v1/nodes", b"[1, 2")


def wrong_types(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {"pool_id": "one"})


def unknown_field(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {"pool": 1})


def out_of_range_pool(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "POST", HEARTBEAT, {"pool_id": 2**64})


def nan_in_specs(api: ApiHarness, node: LocalAccount) -> Response:
    body = b'{"provider": "' + node.address.encode() + b'", "specs": {"x": NaN}}'
    return api.signed(node, "PUT", "/v1/nodes", body)


def nul_in_specs(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "PUT", "/v1/nodes", {"provider": node.address, "specs": {"os": "linux\u0000"}})


def nul_in_spec_key(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "PUT", "/v1/nodes", {"provider": node.address, "specs": {"a\u0000": 1}})


def nul_in_endpoint(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "PUT", "/v1/nodes", {"provider": node.address, "endpoint": "http://a\u0000b"})


def huge_body(api: ApiHarness, node: LocalAccount) -> Response:
    body = json.dumps({"pool_id": 1, "pad": "x" * (api.settings.request_max_bytes + 1)}).encode()
    return api.signed(node, "POST", HEARTBEAT, body)


def huge_declared_length(api: ApiHarness, node: LocalAccount) -> Response:
    headers = sign_request(node, TEST_AUDIENCE, "POST", HEARTBEAT, b"{}")
    headers["Content-Length"] = str(10**12)
    return send(api, "POST", HEARTBEAT, b"{}", headers)


def bad_path_address(api: ApiHarness, node: LocalAccount) -> Response:
    return api.client.get("/v1/nodes/not-an-address")


def invite_unsigned(api: ApiHarness, node: LocalAccount) -> Response:
    return api.client.get(f"/v1/invites/{node.address}")


def invite_bad_pool(api: ApiHarness, node: LocalAccount) -> Response:
    return api.signed(node, "GET", f"/v1/invites/{node.address}?pool_id=-1")


CASES: list[tuple[Callable[[ApiHarness, LocalAccount], Response], int, str]] = [
    (bad_signature, 401, "bad_signature"),
    (non_hex_signature, 401, "bad_signature"),
    (wrong_address, 401, "address_mismatch"),
    (tampered_body, 401, "address_mismatch"),
    (other_path, 401, "address_mismatch"),
    (stale_timestamp, 401, "stale_timestamp"),
    (future_timestamp, 401, "future_timestamp"),
    (sent_to_another_host, 401, "wrong_host"),
    (signed_for_another_host, 401, "address_mismatch"),
    (signed_for_another_chain, 401, "address_mismatch"),
    (signed_for_another_pool_contract, 401, "address_mismatch"),
    (replayed_nonce, 401, "replayed_nonce"),
    (missing_headers, 401, "missing_header"),
    (no_headers, 401, "missing_header"),
    (malformed_address_header, 401, "bad_address"),
    (unknown_node, 403, "node_not_registered"),
    (node_of_another_pool, 403, "not_pool_member"),
    (announce_as_other_nodes_provider, 403, "node_not_registered"),
    (malformed_json, 422, "invalid_request"),
    (malformed_announcement, 422, "invalid_request"),
    (wrong_types, 422, "invalid_request"),
    (unknown_field, 422, "invalid_request"),
    (out_of_range_pool, 422, "invalid_request"),
    (nan_in_specs, 422, "invalid_request"),
    (nul_in_specs, 422, "invalid_request"),
    (nul_in_spec_key, 422, "invalid_request"),
    (nul_in_endpoint, 422, "invalid_request"),
    (huge_body, 413, "body_too_large"),
    (huge_declared_length, 413, "body_too_large"),
    (bad_path_address, 422, "invalid_request"),
    (invite_unsigned, 401, "missing_header"),
    (invite_bad_pool, 422, "invalid_request"),
]


@pytest.mark.parametrize("attack, status, error", CASES, ids=[case[0].__name__ for case in CASES])
def test_bad_input_is_a_json_4xx(api: ApiHarness, attack, status: int, error: str) -> None:
    node, _ = healthy_member(api)
    reply = attack(api, node)
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    assert body["detail"]


def test_refused_heartbeats_leave_no_liveness(api: ApiHarness) -> None:
    """Only an authenticated, registered node may move its own liveness."""
    node, _ = healthy_member(api)
    for attack in (bad_signature, wrong_address, stale_timestamp, node_of_another_pool):
        attack(api, node)
    assert api.redis.zscore("proofpool:heartbeats", node.address) is None


DEEP_JSON_PROBE = """
import json
import web3  # noqa: F401 - raises the recursion limit, as in the real backend process
from fastapi.testclient import TestClient
from proofpool.backend.app import create_app
client = TestClient(create_app())
reply = client.post("/v1/heartbeat", content="[" * 200_000 + "]" * 200_000,
                    headers={"content-type": "application/json"})
print(json.dumps([reply.status_code, reply.json()["error"]]))
"""


def test_deeply_nested_json_is_a_400_not_a_crashed_process() -> None:
    """Run in a child: without the recursion guard the parser overflows the C stack (SIGSEGV)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "REDIS_URL": api_redis_url(), "PROOFPOOL_METRICS_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-c", DEEP_JSON_PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    status, error = json.loads(done.stdout.strip().splitlines()[-1])
    assert (status, error) == (400, "http_error")
