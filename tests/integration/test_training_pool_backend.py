"""A training pool (`diloco://<sha256>`) on the real backend, PostgreSQL and Redis: its members'
heartbeats record liveness and state as any pool's, and hand out no assignment (members derive
their round and shard from the chain), without the backend ever resolving an environment for the
pool (it has none: an RL pool's URI it could not resolve would be a 503)."""

from __future__ import annotations

import hashlib
import time

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.fixtures.backend import ApiHarness

SPEC_SHA = hashlib.sha256(b"a training pool spec").digest()
TRAINING_URI = f"diloco://{SPEC_SHA.hex()}"


def training_member(
    api: ApiHarness, pool_id: int = 1, *, state: str = "active", status: str = "active"
) -> LocalAccount:
    """A registered, announced node, member of the training pool `pool_id`."""
    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    api.add_pool(pool_id, provider.address, status)
    api.conn.execute(
        "UPDATE pools SET model_uri = %s, spec_sha256 = %s WHERE pool_id = %s", (TRAINING_URI, SPEC_SHA, pool_id)
    )
    api.add_member(pool_id, node.address, provider.address, state)
    assert api.announce(node, provider.address).status_code == 200
    return node


@pytest.fixture
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any environment lookup by the in-process backend fails the test."""
    import proofpool.backend.orchestrator.heartbeat as heartbeat

    def refuse(model_uri: str, _spec: bytes) -> None:
        pytest.fail(f"the backend resolved an environment for {model_uri}")

    monkeypatch.setattr(heartbeat, "pool_environment", refuse)


def test_a_healthy_member_of_a_training_pool_gets_its_state_and_no_assignment(
    api: ApiHarness, no_environment: None
) -> None:
    node = training_member(api, pool_id=4)
    before = time.time()
    for body in ({}, {"pool_id": 4}, {"completed": {"checkpoint_version": 0, "batch": 0}}):
        reply = api.signed(node, "POST", "/v1/heartbeat", body)
        assert reply.status_code == 200, reply.text
        beat = reply.json()
        assert (beat["state"], beat["pool_id"], beat["assignment"], beat["withheld"]) == ("healthy", 4, None, None)
        assert beat["heartbeat_interval"] == api.settings.heartbeat_interval
    status = api.client.get(f"/v1/nodes/{node.address}").json()
    assert status["state"] == "healthy" and status["last_heartbeat"] >= before
    batches = api.conn.execute("SELECT count(*) FROM node_batches WHERE node = %s", (node.address,)).fetchone()
    assert batches == (0,)  # a training pool hands out no batches, so a reported one moves nothing


@pytest.mark.parametrize(
    ("state", "status", "expected"),
    [("ejected", "active", "ejected"), ("slashed", "active", "ejected"), ("active", "closed", "healthy")],
)
def test_a_training_pool_member_outside_an_active_membership_gets_its_state(
    api: ApiHarness, no_environment: None, state: str, status: str, expected: str
) -> None:
    node = training_member(api, state=state, status=status)
    beat = api.signed(node, "POST", "/v1/heartbeat", {}).json()
    assert (beat["state"], beat["pool_id"], beat["assignment"]) == (expected, 1, None)


def test_an_rl_pool_still_gets_its_assignment_beside_a_training_pool(api: ApiHarness) -> None:
    training = training_member(api, pool_id=1)
    rl, provider = Account.create(), Account.create()
    api.add_node(rl.address, provider.address)
    api.add_pool(2, provider.address)  # devnet://m: the arithmetic environment
    api.add_member(2, rl.address, provider.address)
    assert api.announce(rl, provider.address).status_code == 200

    assert api.signed(training, "POST", "/v1/heartbeat", {}).json()["assignment"] is None
    work = api.signed(rl, "POST", "/v1/heartbeat", {}).json()["assignment"]
    assert work is not None and (work["pool_id"], work["batch"]) == (2, 0)
