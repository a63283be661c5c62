"""Discovery and orchestrator API on real PostgreSQL and Redis: announce, status, heartbeat
assignments and batch counters, node states, invites, and the sweeper. Projection rows are
written with SQL the way the indexer writes them; one test runs invite and eject on anvil."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from unittest.mock import ANY

import numpy as np
import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import to_checksum_address
from proofpool.backend.api.orchestrator import HeartbeatOut
from proofpool.backend.orchestrator import heartbeat as beats
from proofpool.backend.orchestrator import liveness
from proofpool.backend.orchestrator.discovery import specs_digest
from proofpool.backend.orchestrator.heartbeat import CONTEXT_TTL, ContextCache
from proofpool.backend.orchestrator.states import Liveness
from proofpool.backend.orchestrator.sweeper import Ejection, chain_ejector, sweep_once
from proofpool_arithmetic import ENVIRONMENT
from psycopg import AsyncConnection
from redis.asyncio import Redis as AsyncRedis

from proofpool.core.assignment import Checkpoint, assign
from proofpool.core.auth.signed_request import sign_request
from proofpool.infra.chain.anvil import ANVIL_KEYS, AnvilProcess
from proofpool.infra.chain.bindings import MemberState, PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import Invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.http.node_api import Heartbeat, NodeApi, Withheld
from tests.fixtures.backend import (
    API_POOL_CONTRACT,
    CHAIN_ID,
    MANAGER_KEY,
    TEST_AUDIENCE,
    ApiHarness,
    api_redis_url,
    write_address_book,
)

TASKS = ENVIRONMENT.taskset

MANAGER = Account.from_key(MANAGER_KEY)
POOL_CONTRACT = to_checksum_address("0x" + "ab" * 20)


def actors() -> tuple:
    return Account.create(), Account.create()


def indexed(api: ApiHarness) -> None:
    """The projections changed under the running app: heartbeats see it within `CONTEXT_TTL`
    (`proofpool.backend.orchestrator.heartbeat`); the tests that are not about that bound skip the wait."""
    api.client.app.state.heartbeat_contexts.clear()


def member(api: ApiHarness, pool_id: int = 1, *, state: str = "active", status: str = "active", **kw):
    """A registered, announced node that is a member of `pool_id`; returns (node, provider)."""
    node, provider = actors()
    api.add_node(node.address, provider.address)
    if api.conn.execute("SELECT 1 FROM pools WHERE pool_id = %s", (pool_id,)).fetchone() is None:
        api.add_pool(pool_id, MANAGER.address, status)
    api.add_member(pool_id, node.address, provider.address, state, **kw)
    assert api.announce(node, provider.address).status_code == 200
    return node, provider


# --------------------------------------------------------------------------- announce and status


def test_unknown_node_is_refused_with_a_hint_about_indexing(api: ApiHarness) -> None:
    node, provider = actors()
    reply = api.announce(node, provider.address)
    assert reply.status_code == 403
    assert reply.json()["error"] == "node_not_registered"
    assert "indexed" in reply.json()["detail"]


def test_node_removed_from_registry_is_refused(api: ApiHarness) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address, active=False)
    assert api.announce(node, provider.address).json()["error"] == "node_not_registered"


def test_node_claiming_another_provider_is_refused(api: ApiHarness) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address)
    reply = api.announce(node, Account.create().address)
    assert (reply.status_code, reply.json()["error"]) == (403, "provider_mismatch")


def test_announce_then_status(api: ApiHarness) -> None:
    node, provider = actors()
    specs = {"cores": 2, "gpu": "none", "ram_gb": 24.0, "vllm": True}
    api.add_node(node.address, provider.address, specs_hash=specs_digest(specs))
    first = api.signed(
        node, "PUT", "/v1/nodes", {"provider": provider.address.lower(), "specs": specs, "endpoint": "http://n:1"}
    )
    assert first.status_code == 200, first.text
    assert first.json()["provider"] == provider.address
    again = api.announce(node, provider.address, {"cores": 4})
    assert again.json()["announced_at"] == first.json()["announced_at"]
    assert again.json()["specs"] == {"cores": 4}

    status = api.client.get(f"/v1/nodes/{node.address.lower()}").json()
    assert status["address"] == node.address
    assert status["state"] == "discovered"
    assert status["registered"] and status["announced"]
    assert status["specs_match"] is False  # specs changed since registration
    assert status["last_heartbeat"] is None and status["pool_id"] is None


def test_status_of_unknown_node_is_404(api: ApiHarness) -> None:
    reply = api.client.get(f"/v1/nodes/{Account.create().address}")
    assert (reply.status_code, reply.json()["error"]) == (404, "unknown_node")


@pytest.mark.parametrize(
    "specs",
    [{f"k{i}": i for i in range(33)}, {"nested": {"a": 1}}, {"list": [1, 2]}, {"k" * 65: 1}, {"s": "x" * 257}],
    ids=["too-many-keys", "nested", "list", "long-key", "long-value"],
)
def test_specs_are_bounded(api: ApiHarness, specs: dict) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address)
    reply = api.signed(node, "PUT", "/v1/nodes", {"provider": provider.address, "specs": specs})
    assert (reply.status_code, reply.json()["error"]) == (422, "invalid_request")


# --------------------------------------------------------------------------- heartbeat


def test_heartbeat_requires_an_announcement(api: ApiHarness) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address)
    reply = api.signed(node, "POST", "/v1/heartbeat", {})
    assert (reply.status_code, reply.json()["error"]) == (403, "node_not_announced")


def test_discovered_node_gets_no_assignment(api: ApiHarness) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address)
    api.announce(node, provider.address)
    beat = api.signed(node, "POST", "/v1/heartbeat").json()  # no body at all is a plain heartbeat
    assert (beat["state"], beat["assignment"], beat["pool_id"]) == ("discovered", None, None)
    assert beat["heartbeat_interval"] == api.settings.heartbeat_interval


def test_member_gets_deterministic_assignment_and_batches_advance(api: ApiHarness) -> None:
    node, _ = member(api, pool_id=3)
    manifest = hashlib.sha256(b"manifest v2").digest()
    api.add_checkpoint(3, 1, hashlib.sha256(b"manifest v1").digest())
    api.add_checkpoint(3, 2, manifest, "s3://bucket/ckpt/2")

    first = api.signed(node, "POST", "/v1/heartbeat", {"pool_id": 3}).json()
    assert first["state"] == "healthy"
    work = first["assignment"]
    expected = assign(TASKS, 3, node.address, Checkpoint(2, manifest, "s3://bucket/ckpt/2"), 0)
    assert work == {
        "pool_id": 3,
        "checkpoint_version": 2,
        "manifest_sha256": manifest.hex(),
        "checkpoint_uri": "s3://bucket/ckpt/2",
        "batch": 0,
        "task_ids": list(expected.task_ids),
        "sampling_seed": str(expected.sampling_seed),
        "group_size": 8,
        "max_tokens": 8,
        "temperature": 1.0,
    }
    assert api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"] == work  # retries are stable

    def report(version: int, batch: int) -> int:
        body = {"completed": {"checkpoint_version": version, "batch": batch}}
        return api.signed(node, "POST", "/v1/heartbeat", body).json()["assignment"]["batch"]

    assert report(2, 0) == 1
    assert report(2, 0) == 1  # the same report twice moves once
    assert report(1, 1) == 1  # a report about an older version changes nothing
    assert report(2, 5) == 1  # nor one about a batch it was never given
    assert report(2, 1) == 2
    api.add_checkpoint(3, 3, hashlib.sha256(b"manifest v3").digest())
    assert report(2, 2) == 0  # a new checkpoint starts at batch 0
    assert report(3, 0) == 1
    # What validators bound a file's batch by: the highest batch handed out, per version.
    issued = api.conn.execute(
        "SELECT model_version, last_batch FROM issued_batches WHERE pool_id = 3 AND node = %s ORDER BY 1",
        (node.address,),
    ).fetchall()
    assert issued == [(2, 2), (3, 1)]


def test_next_batch_is_withheld_while_too_many_earlier_batches_lack_a_submission(api: ApiHarness) -> None:
    """A node that reports batches finished without submitting them cannot keep drawing new ones."""
    node, _ = member(api, pool_id=3)
    api.add_checkpoint(3, 1, hashlib.sha256(b"manifest v1").digest())
    bound = api.settings.max_unsubmitted_batches

    def report(batch: int) -> dict:
        body = {"completed": {"checkpoint_version": 1, "batch": batch}}
        return api.signed(node, "POST", "/v1/heartbeat", body).json()

    for batch in range(bound):
        assert report(batch)["assignment"]["batch"] == batch + 1  # up to `bound` in flight: handed out
    held = report(bound)
    assert (held["state"], held["assignment"]) == ("healthy", None)
    assert held["withheld"] == {"batch": bound + 1, "unsubmitted": bound + 1, "max_unsubmitted": bound}
    as_node = NodeApi("http://testserver", node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)
    as_node._client._http = api.client  # the worker's client, on the app in-process
    assert as_node.heartbeat() == Heartbeat(  # stays held; the worker reads why
        node.address, "healthy", 3, None, api.settings.heartbeat_interval, ANY, Withheld(bound + 1, bound + 1, bound)
    )

    api.add_submission(3, node.address, 0, b"\x01" * 32)  # another version's file does not count
    assert api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"] is None
    api.add_submission(3, node.address, 1, b"\x02" * 32, status="invalid")  # a slashed file counts
    resumed = api.signed(node, "POST", "/v1/heartbeat", {}).json()
    assert resumed["withheld"] is None and resumed["assignment"]["batch"] == bound + 1


def test_unservable_assignment_is_kept_as_the_nodes_problem_until_it_finishes_a_batch(api: ApiHarness) -> None:
    node, _ = member(api)
    problem = {"checkpoint_version": 0, "batch": 0, "reason": "manifest_hash_mismatch", "detail": "chain has 0xab"}
    beat = api.signed(node, "POST", "/v1/heartbeat", {"unservable": problem}).json()
    assert beat["assignment"]["batch"] == 0  # advisory: the assignment stays
    status = api.client.get(f"/v1/nodes/{node.address}").json()
    assert {k: status["unservable"][k] for k in problem} == problem
    assert status["unservable"]["reported_at"] > 0
    api.signed(node, "POST", "/v1/heartbeat", {"completed": {"checkpoint_version": 0, "batch": 0}})
    assert api.client.get(f"/v1/nodes/{node.address}").json()["unservable"] is None


@pytest.mark.parametrize(
    "problem",
    [
        {"checkpoint_version": 0, "batch": 0, "reason": "Bad Reason"},
        {"checkpoint_version": -1, "batch": 0, "reason": "x"},
        {"checkpoint_version": 0, "batch": 0, "reason": "x", "detail": "d" * 501},
        {"checkpoint_version": 0, "batch": 0, "reason": "x", "extra": 1},
    ],
)
def test_malformed_unservable_report_is_refused(api: ApiHarness, problem: dict) -> None:
    node, _ = member(api)
    reply = api.signed(node, "POST", "/v1/heartbeat", {"unservable": problem})
    assert reply.status_code == 422, reply.text


def test_pool_settings_override_defaults(api: ApiHarness) -> None:
    node, _ = member(api)
    api.conn.execute(
        "INSERT INTO pool_assignment_config (pool_id, batch_size, max_tokens, temperature) VALUES (1, 3, 12, 0.7)"
    )
    work = api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"]
    assert (len(work["task_ids"]), work["group_size"], work["max_tokens"]) == (3, 8, 12)
    assert work["temperature"] == float(np.float32(0.7))  # the pool's, as every row stores it
    assert (work["checkpoint_version"], work["manifest_sha256"]) == (0, None)


def test_a_pool_whose_environment_is_not_installed_gets_a_503_and_the_node_keeps_its_place(api: ApiHarness) -> None:
    node, _ = member(api)
    api.conn.execute("UPDATE pools SET model_uri = 'hf://Qwen/Qwen3-0.6B' WHERE pool_id = 1")
    refused = api.signed(node, "POST", "/v1/heartbeat", {})
    assert refused.status_code == 503
    assert refused.json()["error"] == "environment_unavailable"
    assert "no environment is installed for 'hf://Qwen/Qwen3-0.6B'" in refused.json()["detail"]
    api.conn.execute("UPDATE pools SET model_uri = 'devnet://back' WHERE pool_id = 1")
    indexed(api)
    work = api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"]
    assert work is not None and work["batch"] == 0


def test_a_pool_whose_spec_hash_disagrees_with_its_model_uri_gets_a_503_and_no_work(api: ApiHarness) -> None:
    """A pool that committed on-chain to a spec hash its model URI does not name (or the reverse) is
    served to no one: no assignment, and the node keeps its place for when the pool is put right."""
    node, _ = member(api)
    api.conn.execute("UPDATE pools SET spec_sha256 = %s WHERE pool_id = 1", (b"\x01" * 32,))
    refused = api.signed(node, "POST", "/v1/heartbeat", {})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "environment_unavailable"
    assert "committed on-chain to specSha256 0x" + "01" * 32 in refused.json()["detail"]
    api.conn.execute(
        "UPDATE pools SET model_uri = %s, spec_sha256 = %s WHERE pool_id = 1", ("spec://" + "ab" * 32, bytes(32))
    )
    indexed(api)
    refused = api.signed(node, "POST", "/v1/heartbeat", {})
    assert refused.status_code == 503 and "no spec (specSha256 is zero)" in refused.json()["detail"]
    api.conn.execute("UPDATE pools SET model_uri = 'devnet://back', spec_sha256 = %s WHERE pool_id = 1", (bytes(32),))
    indexed(api)
    work = api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"]
    assert work is not None and work["batch"] == 0


@pytest.mark.parametrize(
    "state, blacklisted, pool_status, expected",
    [
        ("ejected", False, "active", "ejected"),
        ("slashed", False, "active", "ejected"),
        ("active", True, "active", "banned"),
        ("active", False, "created", "healthy"),
        ("active", False, "closed", "healthy"),
    ],
)
def test_no_work_outside_an_active_membership(api: ApiHarness, state, blacklisted, pool_status, expected) -> None:
    node, _ = member(api, state=state, status=pool_status, blacklisted=blacklisted)
    beat = api.signed(node, "POST", "/v1/heartbeat", {}).json()
    assert (beat["state"], beat["pool_id"], beat["assignment"]) == (expected, 1, None)


def test_active_membership_wins_over_old_ones(api: ApiHarness) -> None:
    node, provider = member(api, pool_id=1, state="ejected")
    api.add_pool(2, MANAGER.address)
    api.add_member(2, node.address, provider.address)
    beat = api.signed(node, "POST", "/v1/heartbeat", {}).json()
    assert (beat["state"], beat["assignment"]["pool_id"]) == ("healthy", 2)


def test_status_follows_heartbeats(api: ApiHarness) -> None:
    node, _ = member(api)
    now = time.time()
    api.redis.set(liveness.EPOCH_KEY, repr(now - 10_000))  # tracking started long ago

    def state_after_silence(seconds: float) -> str:
        api.redis.zadd(liveness.HEARTBEATS_KEY, {node.address: now - seconds})
        return api.client.get(f"/v1/nodes/{node.address}").json()["state"]

    assert state_after_silence(1) == "healthy"
    assert state_after_silence(api.settings.unhealthy_after + 5) == "unhealthy"
    assert state_after_silence(api.settings.dead_after + 5) == "dead"
    api.signed(node, "POST", "/v1/heartbeat", {})
    status = api.client.get(f"/v1/nodes/{node.address}").json()
    assert status["state"] == "healthy" and status["last_heartbeat"] >= now


def test_fresh_member_without_heartbeat_counts_from_its_join(api: ApiHarness) -> None:
    node, provider = actors()
    api.add_node(node.address, provider.address)
    api.add_pool(1, MANAGER.address)
    api.add_block(7, time.time() - 5)
    api.add_member(1, node.address, provider.address, block=7)
    api.redis.set(liveness.EPOCH_KEY, repr(time.time() - 10_000))
    assert api.client.get(f"/v1/nodes/{node.address}").json()["state"] == "healthy"


# --------------------------------------------------------------------------- invites


def invite_ready(api: ApiHarness, pool_id: int = 1):
    """A registered, announced node outside any pool, a pool we manage that its provider approved,
    and a known chain."""
    node, provider = actors()
    api.add_node(node.address, provider.address)
    api.announce(node, provider.address)
    api.add_pool(pool_id, MANAGER.address)
    api.add_approval(pool_id, provider.address)
    api.set_chain()
    write_address_book(api.settings.deployments_dir, POOL_CONTRACT)
    return node, provider


def recover_invite_signer(reply: dict) -> str:
    message = encode_typed_data(
        domain_data={
            "name": "ProofpoolComputePool",
            "version": "1",
            "chainId": reply["chain_id"],
            "verifyingContract": reply["pool_contract"],
        },
        message_types={
            "Invite": [
                {"name": "poolId", "type": "uint256"},
                {"name": "node", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "expiry", "type": "uint256"},
            ]
        },
        message_data={
            "poolId": reply["pool_id"],
            "node": reply["node"],
            "nonce": int(reply["nonce"]),
            "expiry": reply["expiry"],
        },
    )
    return Account.recover_message(message, signature=bytes.fromhex(reply["signature"][2:]))


def test_provider_gets_a_manager_signed_invite_once(api: ApiHarness) -> None:
    node, provider = invite_ready(api)
    reply = api.signed(provider, "GET", f"/v1/invites/{node.address}")
    assert reply.status_code == 200, reply.text
    invite = reply.json()
    assert (invite["pool_id"], invite["node"], invite["provider"]) == (1, node.address, provider.address)
    assert (invite["chain_id"], invite["pool_contract"]) == (31337, POOL_CONTRACT)
    assert recover_invite_signer(invite) == MANAGER.address == invite["manager"]
    assert invite["expiry"] > time.time() + 1800
    again = api.signed(provider, "GET", f"/v1/invites/{node.address}?pool_id=1").json()
    assert again == invite  # no new nonce for a repeated request
    by_node = api.signed(node, "GET", f"/v1/invites/{node.address}").json()
    assert by_node == invite  # the node may fetch its own invite and join by itself


def test_invite_expiry_follows_chain_time_when_it_runs_ahead(api: ApiHarness) -> None:
    node, provider = invite_ready(api)
    api.add_block(1, time.time() + 86_400)
    invite = api.signed(provider, "GET", f"/v1/invites/{node.address}").json()
    assert invite["expiry"] > time.time() + 86_400


@pytest.mark.parametrize(
    "setup, status, error",
    [
        ("stranger_signs", 403, "not_node_provider"),
        ("member", 403, "already_member"),
        ("banned", 403, "node_banned"),
        ("slashed", 403, "node_slashed"),
        ("not_announced", 403, "node_not_announced"),
        ("unregistered", 403, "node_not_registered"),
        ("foreign_pool", 403, "pool_not_managed"),
        ("closed_pool", 403, "pool_not_active"),
        ("unknown_pool", 404, "unknown_pool"),
        ("not_approved", 403, "pool_not_approved"),
        ("approval_revoked", 403, "pool_not_approved"),
        ("no_chain", 503, "chain_unknown"),
    ],
)
def test_invite_refusals(api: ApiHarness, setup: str, status: int, error: str) -> None:
    node, provider = invite_ready(api)
    signer, pool_id = provider, 1
    if setup == "stranger_signs":
        signer = Account.create()
    elif setup in ("member", "banned", "slashed"):
        state = {"member": "active", "banned": "left", "slashed": "slashed"}[setup]
        api.add_member(1, node.address, provider.address, state, blacklisted=setup == "banned")
    elif setup == "not_announced":
        api.conn.execute("DELETE FROM node_announcements")
    elif setup == "unregistered":
        api.conn.execute("UPDATE nodes SET active = false")
    elif setup == "foreign_pool":
        api.add_pool(2, Account.create().address)
        pool_id = 2
    elif setup == "closed_pool":
        api.add_pool(2, MANAGER.address, "closed")
        pool_id = 2
    elif setup == "unknown_pool":
        pool_id = 99
    elif setup == "not_approved":
        api.add_pool(2, MANAGER.address)
        pool_id = 2
    elif setup == "approval_revoked":
        api.conn.execute("UPDATE pool_approvals SET approved = false")
    elif setup == "no_chain":
        api.conn.execute("DELETE FROM indexer_state")
    reply = api.signed(signer, "GET", f"/v1/invites/{node.address}?pool_id={pool_id}")
    assert (reply.status_code, reply.json()["error"]) == (status, error), reply.text


def test_invite_is_not_repeated_once_the_membership_changed(api: ApiHarness) -> None:
    """Invites are single use: after the node joined (and was ejected) it needs a new one."""
    node, provider = invite_ready(api)
    first = api.signed(provider, "GET", f"/v1/invites/{node.address}").json()
    api.add_member(1, node.address, provider.address, "ejected", block=9)
    second = api.signed(provider, "GET", f"/v1/invites/{node.address}").json()
    assert int(second["nonce"]) > int(first["nonce"])
    assert api.signed(provider, "GET", f"/v1/invites/{node.address}").json() == second


def test_ejected_node_may_be_invited_again(api: ApiHarness) -> None:
    node, provider = invite_ready(api)
    api.add_member(1, node.address, provider.address, "ejected")
    assert api.signed(provider, "GET", f"/v1/invites/{node.address}").status_code == 200


# --------------------------------------------------------------------------- sweeper


def sweep(api: ApiHarness, eject=None, *, now: float | None = None) -> list[Ejection]:
    async def run() -> list[Ejection]:
        redis = AsyncRedis.from_url(api_redis_url())
        try:
            async with await AsyncConnection.connect(str(api.settings.database_url), autocommit=True) as conn:
                return await sweep_once(
                    conn,
                    redis,
                    MANAGER.address,
                    eject,
                    now=now or time.time(),
                    thresholds=Liveness(api.settings.unhealthy_after, api.settings.dead_after),
                )
        finally:
            await redis.aclose()

    return asyncio.run(run())


def test_sweeper_picks_only_dead_members_of_its_pools(api: ApiHarness) -> None:
    now = time.time()
    api.redis.set(liveness.EPOCH_KEY, repr(now - 10_000))
    dead, _ = member(api)
    alive, _ = member(api)
    silent_never_seen, _ = member(api)
    foreign, foreign_provider = actors()
    api.add_node(foreign.address, foreign_provider.address)
    api.add_pool(2, Account.create().address)
    api.add_member(2, foreign.address, foreign_provider.address)
    api.redis.zadd(liveness.HEARTBEATS_KEY, {dead.address: now - 500, alive.address: now - 1})
    api.redis.zadd(liveness.HEARTBEATS_KEY, {foreign.address: now - 500})

    ejected: list[tuple[int, str]] = []
    outcomes = sweep(api, lambda pool_id, node: ejected.append((pool_id, node)) or "0xabc", now=now)
    assert sorted(ejected) == sorted([(1, dead.address), (1, silent_never_seen.address)])
    assert {e.outcome for e in outcomes} == {"ejected"}
    assert sweep(api, lambda *_: pytest.fail("claimed nodes are not ejected twice"), now=now) == []


def test_sweeper_gives_grace_after_liveness_is_lost(api: ApiHarness) -> None:
    """A flushed Redis restarts the clock instead of making every member Dead at once."""
    member(api)
    assert sweep(api, lambda *_: pytest.fail("nobody is dead right after tracking starts")) == []


# --------------------------------------------------------------------------- on anvil


def test_invite_joins_on_chain_and_sweeper_ejects_the_dead(api: ApiHarness, anvil: AnvilProcess) -> None:
    """The invite the API signs is one `joinPool` takes; the sweeper's eject lands on-chain."""
    w3 = connect(anvil.url)
    admin = Account.from_key(ANVIL_KEYS[0])
    book = deploy_contracts(w3, TxSender(w3, admin))
    chain = ChainClient.build(w3, book, admin)
    provider, node = Account.create(), Account.create()
    TxSender(w3, admin).transfer_eth(provider.address, 10**18)
    chain.token.mint(provider.address, 1_000 * TOKEN)
    pool_id, _ = chain.pool.create_pool(
        PoolParams(
            manager=MANAGER.address,
            treasury=admin.address,
            model_uri="devnet://test",
            reward_per_unit=1,
            validator_fee=1,
            slash_amount=TOKEN,
            dispute_window=3600,
            validator_slash_share_bps=5_000,
        )
    )
    chain.pool.start_pool(pool_id)
    me = chain.as_account(provider)
    me.registry.register_provider()
    me.token.approve(me.stake_manager.address, 500 * TOKEN)
    me.stake_manager.stake(500 * TOKEN)
    me.registry.add_node(4, b"\x00" * 32, me.registry.prove_ownership(node, provider.address))
    me.pool.approve_pool(pool_id, 500 * TOKEN)

    # what the indexer would have written by now
    api.add_node(node.address, provider.address)
    api.add_pool(pool_id, MANAGER.address)
    api.add_approval(pool_id, provider.address)
    api.set_chain(w3.eth.chain_id)
    write_address_book(api.settings.deployments_dir, book.compute_pool, w3.eth.chain_id)
    api.add_block(w3.eth.block_number, w3.eth.get_block("latest")["timestamp"])
    assert api.announce(node, provider.address).status_code == 200

    reply = api.signed(provider, "GET", f"/v1/invites/{node.address}").json()
    invite = Invite(
        reply["pool_id"], reply["node"], int(reply["nonce"]), reply["expiry"], bytes.fromhex(reply["signature"][2:])
    )
    me.pool.join_pool(invite)
    assert chain.pool.get_member(pool_id, node.address).state is MemberState.ACTIVE

    api.add_member(pool_id, node.address, provider.address)
    api.redis.set(liveness.EPOCH_KEY, repr(time.time() - 10_000))
    outcomes = sweep(api, chain_ejector(chain.as_account(MANAGER)))
    assert [(e.node, e.outcome) for e in outcomes] == [(node.address, "ejected")]
    assert chain.pool.get_member(pool_id, node.address).state is MemberState.EJECTED

    # the indexer records the ejection; the provider asks again and the node rejoins
    api.conn.execute("UPDATE memberships SET state = 'ejected', block_number = block_number + 1")
    reply = api.signed(provider, "GET", f"/v1/invites/{node.address}").json()
    me.pool.join_pool(
        Invite(pool_id, node.address, int(reply["nonce"]), reply["expiry"], bytes.fromhex(reply["signature"][2:]))
    )
    assert chain.pool.get_member(pool_id, node.address).state is MemberState.ACTIVE


# --------------------------------------------------------------------------- operator command


@pytest.mark.parametrize(
    "env, message",
    [
        ({"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/proofpool"}, "PostgreSQL is not reachable"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "Redis is not reachable"),
    ],
)
def test_serve_says_which_service_is_down(api: ApiHarness, monkeypatch, env: dict, message: str) -> None:
    from proofpool.cli.main import app
    from typer.testing import CliRunner

    from proofpool.core.errors import ServiceUnavailable
    from proofpool.infra.config import get_settings

    monkeypatch.setenv("DATABASE_URL", str(api.settings.database_url))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["backend", "serve", "--port", "1"])
    finally:
        get_settings.cache_clear()
    assert isinstance(result.exception, ServiceUnavailable)
    assert message in str(result.exception)


# --------------------------------------------------------------------------- worker-side client


def test_node_api_client_round_trip(api: ApiHarness) -> None:
    """`NodeApi` (what workers and providers use) against the real app, in-process."""
    from proofpool.infra.http.node_api import NodeApi
    from proofpool.infra.http.signed_client import ApiRefused

    node, provider = actors()
    api.add_node(node.address, provider.address)
    api.add_pool(1, MANAGER.address)
    api.add_approval(1, provider.address)
    api.set_chain()
    write_address_book(api.settings.deployments_dir, POOL_CONTRACT)

    def client(account) -> NodeApi:
        wrapped = NodeApi("http://testserver", account, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)
        wrapped._client._http = api.client  # TestClient is an httpx.Client that calls the app in-process
        return wrapped

    as_node, as_provider = client(node), client(provider)
    with pytest.raises(ApiRefused) as refused:
        as_node.heartbeat()
    assert refused.value.error == "node_not_announced"
    as_node.announce(provider.address, {"cores": 2}, endpoint="http://127.0.0.1:9000")
    assert as_node.heartbeat().state == "discovered"

    signed = as_provider.get_invite(node.address)
    assert (signed.invite.pool_id, signed.invite.node, signed.manager) == (1, node.address, MANAGER.address)
    assert (
        recover_invite_signer(
            {
                "chain_id": signed.chain_id,
                "pool_contract": signed.pool_contract,
                "pool_id": signed.invite.pool_id,
                "node": signed.invite.node,
                "nonce": str(signed.invite.nonce),
                "expiry": signed.invite.expiry,
                "signature": "0x" + signed.invite.signature.hex(),
            }
        )
        == MANAGER.address
    )

    api.add_member(1, node.address, provider.address)
    beat = as_node.heartbeat(pool_id=1)
    assert beat.state == "healthy" and beat.assignment is not None
    assert beat.assignment.batch == 0 and len(beat.assignment.task_ids) == 8
    assert as_node.heartbeat(completed=beat.assignment).assignment.batch == 1
    assert as_node.node_status(node.address)["state"] == "healthy"


# --------------------------------------------------------------------------- the heartbeat context cache


def contexts(api: ApiHarness) -> ContextCache:
    return api.client.app.state.heartbeat_contexts


def test_an_ejected_or_deregistered_node_is_refused_within_the_cache_bound(api: ApiHarness) -> None:
    """What the indexer commits is in every heartbeat answered `CONTEXT_TTL` s later, cached or not."""
    ejected, _ = member(api)
    removed, _ = member(api)
    for node in (ejected, removed):
        assert api.signed(node, "POST", "/v1/heartbeat", {}).json()["state"] == "healthy"
        assert contexts(api).get(node.address, None) is not None  # answered from memory from now on
    api.conn.execute("UPDATE memberships SET state = 'ejected' WHERE node = %s", (ejected.address,))
    api.conn.execute("UPDATE nodes SET active = false WHERE address = %s", (removed.address,))
    time.sleep(CONTEXT_TTL)
    beat = api.signed(ejected, "POST", "/v1/heartbeat", {}).json()
    assert (beat["state"], beat["assignment"]) == ("ejected", None)
    refused = api.signed(removed, "POST", "/v1/heartbeat", {})
    assert (refused.status_code, refused.json()["error"]) == (403, "node_not_registered")
    assert contexts(api).get(removed.address, None) is None  # a refusal is never cached


def test_a_replayed_heartbeat_is_refused_when_its_node_is_cached(api: ApiHarness) -> None:
    node, _ = member(api)
    assert api.signed(node, "POST", "/v1/heartbeat", {}).status_code == 200
    assert contexts(api).get(node.address, None) is not None
    headers = {**sign_request(node, TEST_AUDIENCE, "POST", "/v1/heartbeat", b"{}"), "Content-Type": "application/json"}
    assert api.client.post("/v1/heartbeat", content=b"{}", headers=headers).status_code == 200
    seen = api.redis.zscore(liveness.HEARTBEATS_KEY, node.address)
    replayed = api.client.post("/v1/heartbeat", content=b"{}", headers=headers)
    assert (replayed.status_code, replayed.json()["error"]) == (401, "replayed_nonce")
    assert api.redis.zscore(liveness.HEARTBEATS_KEY, node.address) == seen  # a refused request is not a sign of life


def test_a_batch_advanced_by_another_process_is_never_answered_stale(api: ApiHarness) -> None:
    """Two API processes: the one holding the node's context in memory (for a minute here, so only
    the Redis tag can tell it) learns of the batch the other advanced at its next heartbeat."""
    from fastapi.testclient import TestClient
    from proofpool.backend.app import create_app

    node, _ = member(api)
    api.add_checkpoint(1, 1, hashlib.sha256(b"manifest v1").digest())
    cache = contexts(api)
    cache.ttl = 60.0
    try:
        with TestClient(create_app(api.settings), raise_server_exceptions=False) as other:
            assert api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"]["batch"] == 0
            report = json.dumps({"completed": {"checkpoint_version": 1, "batch": 0}}).encode()
            headers = sign_request(node, TEST_AUDIENCE, "POST", "/v1/heartbeat", report)
            moved = other.post("/v1/heartbeat", content=report, headers={**headers, "Content-Type": "application/json"})
            assert moved.json()["assignment"]["batch"] == 1
        assert api.signed(node, "POST", "/v1/heartbeat", {}).json()["assignment"]["batch"] == 1
    finally:
        cache.ttl = CONTEXT_TTL
        cache.clear()


def test_the_lean_route_answers_as_the_documented_one(api: ApiHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """`heartbeat_route` answers ordinary heartbeats; what it does not recognise (here a content type
    with a charset) goes to the FastAPI route. Both give the same reply, which is a `HeartbeatOut`."""
    calls = []
    lean = beats.signed_heartbeat

    async def counted(*args: object, **kwargs: object) -> beats.HeartbeatResult:
        calls.append(1)
        return await lean(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(beats, "signed_heartbeat", counted)
    node, _ = member(api)
    api.add_checkpoint(1, 1, hashlib.sha256(b"manifest v1").digest(), "s3://ckpt/1")
    for reported in ({}, {"pool_id": 1}):
        fast = api.signed(node, "POST", "/v1/heartbeat", reported)
        assert len(calls) == 1
        documented = api.signed(
            node, "POST", "/v1/heartbeat", reported, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert len(calls) == 1  # not the lean route
        calls.clear()
        assert (fast.status_code, documented.status_code) == (200, 200)
        assert fast.headers["content-type"] == documented.headers["content-type"] == "application/json"
        mine, theirs = fast.json(), documented.json()
        assert mine.pop("server_time") <= theirs.pop("server_time")
        assert mine == theirs and mine["assignment"]["batch"] == 0
        assert HeartbeatOut.model_validate_json(fast.content).assignment is not None
