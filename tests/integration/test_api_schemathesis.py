"""Property-based fuzzing of the backend's OpenAPI schema with schemathesis, in-process.

Every request is signed by a registered, announced member node (so generated bodies reach
the handlers instead of stopping at 401), sent to the real app on real PostgreSQL and Redis,
and must never be answered with a 5xx; 2xx answers must match their response schema.

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
from schemathesis.checks import not_a_server_error, response_schema_conformance

from proofpool.auth.signed_request import sign_request
from proofpool.config import Settings
from tests.fixtures.backend import MANAGER_KEY, ApiHarness, write_address_book

MAX_EXAMPLES = 30
"""Per operation and mode; keeps the module well under a minute."""
FUZZED_TAGS = ("nodes", "orchestrator")
"""Operations fuzzed here. Not `/healthz`: its 503 when storage or the chain is down is its job."""


@cache
def api_schema() -> schemathesis.BaseSchema:
    """The app's OpenAPI document (the schema is static: building the app opens nothing)."""
    from backend.app import create_app

    return schemathesis.openapi.from_dict(create_app(Settings()).openapi())


def operations() -> list:
    ops = [result.ok() for result in api_schema().get_all_operations()]
    return [op for op in ops if set(op.definition.raw.get("tags", [])) & set(FUZZED_TAGS)]


@dataclass(frozen=True)
class Actors:
    node: LocalAccount
    provider: LocalAccount
    outsider: LocalAccount


@pytest.fixture
def actors(api: ApiHarness) -> Actors:
    """A healthy member of active pool 1 with a checkpoint, on a chain with an address book, plus
    a second registered node of the same provider that is in no pool (so invites can succeed)."""
    node, provider, outsider = Account.create(), Account.create(), Account.create()
    manager = Account.from_key(MANAGER_KEY)
    api.add_node(node.address, provider.address)
    api.add_node(outsider.address, provider.address)
    api.add_pool(1, manager.address)
    api.add_member(1, node.address, provider.address)
    api.add_checkpoint(1, 1, b"\x07" * 32)
    api.set_chain()
    write_address_book(api.settings.deployments_dir, "0x" + "cd" * 20)
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
    return signer


def send_signed(api: ApiHarness, signer: LocalAccount, case) -> object:
    """Send a generated case signed by `signer`; the signature covers exactly the bytes sent."""
    kwargs = case.as_transport_kwargs(base_url="http://testserver")
    query = kwargs.get("params") or {}
    path = case.formatted_path + ("?" + urlencode(query, doseq=True) if query else "")
    if "json" in kwargs:
        body = json.dumps(kwargs["json"]).encode()
    else:
        raw = kwargs.get("data") or b""
        body = raw.encode() if isinstance(raw, str) else raw
    headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items() if k.lower() != "content-length"}
    headers.update(sign_request(signer, case.method, path, body))
    headers.setdefault("Content-Type", "application/json")
    return api.client.request(case.method, path, content=body, headers=headers)


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
        response = send_signed(api, signer, case)
        # Error bodies are `{"error", "detail"}`, not FastAPI's documented 422 shape: the
        # response schema is checked on successes only.
        ok = 200 <= response.status_code < 300
        case.validate_response(response, checks=[not_a_server_error, *([response_schema_conformance] if ok else [])])

    fuzz()
