"""Property-based fuzzing of the backend's OpenAPI schema with schemathesis, in-process.

Every operation of the document (but /healthz, whose 503 while storage or the chain is down is
its job) is fuzzed. Every request is signed for the test deployment by a registered, announced
member node, or its provider (so generated bodies reach the handlers instead of stopping at
401), sent to the real app on real PostgreSQL and Redis, and must never be answered with a
5xx; and every answer, refusals included, must be one the document lists for that operation:
its status code, content type and body schema (`ErrorBody` for refusals).

Cases come from schemathesis's per-operation Hypothesis strategies, driven by a plain
`@given` (its pytest plugin does not run under pytest 9 yet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlencode

import pytest
import schemathesis
from eth_account import Account
from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from proofpool.core.auth.signed_request import request_target, sign_request
from proofpool.infra.config import Settings
from tests.fixtures.backend import API_POOL_CONTRACT, MANAGER_KEY, TEST_AUDIENCE, ApiHarness, write_address_book

pytestmark = pytest.mark.timeout(60)

MAX_EXAMPLES = 30
"""Per operation and mode; keeps each case well under 20 seconds."""
NOT_FUZZED = ("/healthz",)
"""Its 503 when storage or the chain is down (as here) is its job, not a server error."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
"""No 5xx, and the status, content type and body of every answer are documented."""


@cache
def api_schema() -> schemathesis.BaseSchema:
    """The app's OpenAPI document (the schema is static: building the app opens nothing)."""
    from proofpool.backend.app import create_app

    return schemathesis.openapi.from_dict(create_app(Settings()).openapi())


def operations() -> list:
    ops = [result.ok() for result in api_schema().get_all_operations()]
    return [op for op in ops if op.path not in NOT_FUZZED]


@dataclass(frozen=True)
class Actors:
    node: LocalAccount
    provider: LocalAccount
    outsider: LocalAccount


@pytest.fixture
def actors(api: ApiHarness) -> Actors:
    """A healthy member of active pool 1 with a checkpoint, on a chain with an address book, plus
    a second registered node of the same provider that is in no pool, and the provider's approval
    of pool 1 (so invites can succeed)."""
    node, provider, outsider = Account.create(), Account.create(), Account.create()
    manager = Account.from_key(MANAGER_KEY)
    api.add_node(node.address, provider.address)
    api.add_node(outsider.address, provider.address)
    api.add_pool(1, manager.address)
    api.add_member(1, node.address, provider.address)
    api.add_approval(1, provider.address)
    api.add_checkpoint(1, 1, b"\x07" * 32)
    api.set_chain()
    write_address_book(api.settings.deployments_dir, API_POOL_CONTRACT)
    assert api.announce(node, provider.address).status_code == 200
    assert api.announce(outsider, provider.address).status_code == 200
    return Actors(node, provider, outsider)


def steer(case, actors: Actors, data: st.DataObject) -> LocalAccount:
    """Point some cases at known nodes and providers, so the fuzzer gets past "unknown node"
    into the handlers' deeper branches; returns who signs the case."""
    signer = actors.node
    if data.draw(st.booleans(), label="steer"):
        params = case.path_parameters or {}
        if "address" in params:
            params["address"] = actors.node.address
        if "node" in params:  # an invite: asked by the provider for its node that is in no pool
            params["node"], signer = actors.outsider.address, actors.provider
        if isinstance(case.body, dict) and "provider" in case.body:
            case.body["provider"] = actors.provider.address
        if isinstance(case.body, dict) and "pool_id" in case.body:
            case.body["pool_id"] = 1
    return signer


def send_signed(api: ApiHarness, signer: LocalAccount, case) -> object:
    """Send a generated case signed by `signer`; the signature covers exactly the bytes sent
    (the request is built first, so its target is signed as percent-encoded on the wire)."""
    kwargs = case.as_transport_kwargs(base_url="http://testserver")
    query = kwargs.get("params") or {}
    path = case.formatted_path + ("?" + urlencode(query, doseq=True) if query else "")
    if "json" in kwargs:
        body = json.dumps(kwargs["json"]).encode()
    else:
        raw = kwargs.get("data") or b""
        body = raw.encode() if isinstance(raw, str) else raw
    headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items() if k.lower() != "content-length"}
    headers.setdefault("Content-Type", "application/json")
    request = api.client.build_request(case.method, path, content=body, headers=headers)
    raw_path, _, raw_query = request.url.raw_path.partition(b"?")
    target = request_target(raw_path, raw_query)
    request.headers.update(sign_request(signer, TEST_AUDIENCE, case.method, target, body))
    return api.client.send(request)


def has_inputs(operation) -> bool:
    """Negative cases need something to break: a parameter or a body."""
    return any(len(group) for group in (operation.path_parameters, operation.query, operation.headers, operation.body))


CASES = [
    pytest.param(op, mode, id=f"{op.label}-{mode.value}")
    for op in operations()
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or has_inputs(op)
]


@pytest.mark.parametrize("operation, mode", CASES)
def test_no_server_errors(operation, mode: GenerationMode, api: ApiHarness, actors: Actors) -> None:
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        signer = steer(case, actors, data)
        api.redis.delete(f"ratelimit:uploads:{signer.address}")  # reach the upload handler, not only the limiter
        response = send_signed(api, signer, case)
        case.validate_response(response, checks=CHECKS)

    fuzz()


def test_every_operation_documents_the_refusals_it_can_answer() -> None:
    """What the fuzzing above relies on, stated per operation: the body cap's 413 everywhere,
    401 and 503 on signed routes, 422 where there are inputs, and `ErrorBody` for every refusal."""
    document = api_schema().raw_schema
    signed = {("put", "/v1/nodes"), ("post", "/v1/heartbeat"), ("get", "/v1/invites/{node}"), ("post", "/v1/uploads")}
    assert "/metrics" not in document["paths"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "413" in responses, (method, path)
            if (method, path) in signed:
                assert {"401", "503"} <= set(responses), (method, path)
                assert "wrong_host" in responses["401"]["description"]
            if operation.get("parameters") or operation.get("requestBody"):
                assert responses["422"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }
            for status, response in responses.items():
                if status[0] in "45" and path != "/healthz":
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorBody"
                    }, (method, path, status)
    assert document["components"]["schemas"]["ErrorBody"]["required"] == ["error", "detail"]
