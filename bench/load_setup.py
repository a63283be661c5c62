"""Onboarding a fleet of simulated nodes on the bench market's chain, as fast as anvil allows.

Node and provider keys are derived from a seed (anvil's mnemonic funds only 20 accounts), given
ETH with `anvil_setBalance` (one JSON-RPC batch), and the providers stake through the ordinary
bindings (a handful of transactions). The bulk, `addNode` and `joinPool` for every node, is
signed here and sent in JSON-RPC batches with automine off, then mined in full blocks: one
round trip per few hundred transactions instead of one wait per receipt. Invites are signed with
the pool manager's key directly (what the backend's orchestrator would sign). The nodes then
announce themselves (`PUT /v1/nodes`, signed by each node) once the indexer has seen them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.devnet.market import NODE_COMPUTE_UNITS

from bench.load_client import HttpPool, signed_request
from bench.market import BenchMarket
from proofpool.core.auth.signed_request import Audience, Deployment
from proofpool.infra.chain.calls import AbiFunction
from proofpool.infra.chain.signing import sign_invite, sign_node_ownership
from proofpool.infra.config import get_settings
from proofpool.infra.nonce_store import EPOCH_KEY as NONCE_EPOCH_KEY

NODE_ETH = 10**18
"""Wei each node gets for its `submitWork` gas (about 1,200 submissions at the bench's fees)."""
FEES = {"maxFeePerGas": 10**10, "maxPriorityFeePerGas": 1}
"""Fixed fees for everything the bench signs itself: 10 gwei covers anvil's base fee (1 gwei at
start, falling with the nearly empty blocks of automine)."""
BULK_GAS = 400_000
"""Gas limit of one `addNode` or `joinPool` (each uses well under half of it)."""
RPC_BATCH = 250


def derived_account(seed: str, kind: str, index: int) -> LocalAccount:
    """A deterministic bench key (`kind` "node" or "provider"): the same seed gives the same fleet."""
    return Account.from_key(hashlib.sha256(f"proofpool-load/{seed}/{kind}/{index}".encode()).digest())


@dataclass
class Fleet:
    """The simulated nodes, their providers (`provider_of[i]` is node i's), and the chain ids the
    nodes sign for."""

    nodes: list[LocalAccount]
    providers: list[LocalAccount]
    provider_of: list[int]
    pool_id: int
    chain_id: int
    pool_contract: str


def _batch(w3: Any, calls: list[tuple[str, list[Any]]]) -> list[Any]:
    """Results of JSON-RPC calls sent in batches; the first error raises."""
    results = []
    for start in range(0, len(calls), RPC_BATCH):
        replies = w3.provider.make_batch_request(calls[start : start + RPC_BATCH])
        for reply in replies:
            if "error" in reply:
                raise RuntimeError(f"anvil refused a bench call: {reply['error']}")
            results.append(reply["result"])
    return results


def _send_bulk(w3: Any, raw: list[str]) -> list[str]:
    """Send signed transactions with automine off, mine full blocks until the pool is empty, turn
    automine back on; returns the hashes after checking every receipt succeeded."""
    w3.provider.make_request("evm_setAutomine", [False])
    try:
        hashes = _batch(w3, [("eth_sendRawTransaction", [tx]) for tx in raw])
        while int(w3.provider.make_request("txpool_status", [])["result"]["pending"], 16) > 0:
            w3.provider.make_request("evm_mine", [])
    finally:
        w3.provider.make_request("evm_setAutomine", [True])
    receipts = _batch(w3, [("eth_getTransactionReceipt", [h]) for h in hashes])
    failed = [h for h, r in zip(hashes, receipts, strict=True) if r is None or int(r["status"], 16) != 1]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(hashes)} onboarding transactions failed, e.g. {failed[0]}")
    return hashes


def onboard_fleet(
    market: BenchMarket, nodes: int, providers: int, seed: str, say: Callable[[str], None] = print
) -> tuple[Fleet, dict[str, float]]:
    """Register, stake, add and join `nodes` nodes under `providers` providers; returns the fleet
    and the seconds each phase took."""
    stack = market.stack
    admin, w3, book = stack.admin, stack.admin.w3, stack.admin.book
    fleet = Fleet(
        nodes=[derived_account(seed, "node", i) for i in range(nodes)],
        providers=[derived_account(seed, "provider", p) for p in range(providers)],
        provider_of=[i % providers for i in range(nodes)],
        pool_id=stack.pool_id,
        chain_id=book.chain_id,
        pool_contract=book.compute_pool,
    )
    timings: dict[str, float] = {}
    started = time.monotonic()

    _batch(w3, [("anvil_setBalance", [a.address, hex(NODE_ETH)]) for a in fleet.nodes + fleet.providers])
    per_provider = -(-nodes // providers)
    stake = admin.stake_manager.required_stake_for(per_provider * NODE_COMPUTE_UNITS)
    for provider in fleet.providers:
        admin.token.mint(provider.address, stake)
        me = admin.as_account(provider)
        me.registry.register_provider()
        me.token.approve(me.stake_manager.address, stake)
        me.stake_manager.stake(stake)
        me.pool.approve_pool(fleet.pool_id, stake)
    timings["providers_s"] = time.monotonic() - started

    t0 = time.monotonic()
    add_node = AbiFunction.of(admin.registry.contract.abi, "addNode")
    join_pool = AbiFunction.of(admin.pool.contract.abi, "joinPool")
    now = int(w3.eth.get_block("latest")["timestamp"])
    nonces = [
        int(n, 16) for n in _batch(w3, [("eth_getTransactionCount", [p.address, "pending"]) for p in fleet.providers])
    ]
    specs = hashlib.sha256(b"cpu-2-cores").digest()
    raw: list[str] = []
    for phase in ("add", "join"):
        for i, node in enumerate(fleet.nodes):
            p = fleet.provider_of[i]
            provider = fleet.providers[p]
            if phase == "add":
                own = sign_node_ownership(
                    node, provider.address, fleet.chain_id, book.compute_registry, nonce=0, deadline=now + 3600
                )
                to = book.compute_registry
                data = add_node.encode(node.address, NODE_COMPUTE_UNITS, specs, own.deadline, own.signature)
            else:
                invite = sign_invite(
                    stack.cast.manager,
                    fleet.pool_id,
                    node.address,
                    10**9 + i,
                    now + 3600,
                    fleet.chain_id,
                    book.compute_pool,
                )
                to = book.compute_pool
                data = join_pool.encode(fleet.pool_id, node.address, invite.nonce, invite.expiry, invite.signature)
            tx = {
                "to": to,
                "data": data,
                "value": 0,
                "gas": BULK_GAS,
                "chainId": fleet.chain_id,
                "nonce": nonces[p],
                **FEES,
            }
            nonces[p] += 1
            raw.append("0x" + provider.sign_transaction(tx).raw_transaction.hex())
    timings["sign_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    _send_bulk(w3, raw)
    timings["add_join_s"] = time.monotonic() - t0
    say(f"{nodes} nodes added and joined pool {fleet.pool_id} in {len(raw)} transactions")

    t0 = time.monotonic()
    wait_indexed(stack.env["DATABASE_URL"], fleet, timeout=120)
    timings["indexed_s"] = time.monotonic() - t0
    wait_for_nonce_store(stack.env["REDIS_URL"])
    t0 = time.monotonic()
    asyncio.run(announce(fleet, stack.backend_url))
    timings["announce_s"] = time.monotonic() - t0
    timings["total_s"] = time.monotonic() - started
    return fleet, {k: round(v, 2) for k, v in timings.items()}


def wait_for_nonce_store(redis_url: str) -> None:
    """Sleep until requests signed now pass the nonce store's epoch rule: the backend refuses
    requests timestamped within `max_ahead` seconds of the epoch it set at start-up
    (`proofpool.infra.nonce_store`), and the bench can be that quick."""
    client = redis.Redis.from_url(redis_url)
    try:
        epoch = client.get(NONCE_EPOCH_KEY)
    finally:
        client.close()
    if epoch is not None:
        valid_from = math.ceil(float(epoch) + get_settings().signature_max_ahead) + 1
        time.sleep(max(0.0, valid_from - time.time()))


def wait_indexed(database_url: str, fleet: Fleet, timeout: float) -> None:
    """Until the indexer has every node as an active member of the pool."""
    addresses = [n.address for n in fleet.nodes]
    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            (count,) = conn.execute(
                "SELECT count(*) FROM memberships WHERE pool_id = %s AND state = 'active' AND node = ANY(%s)",
                (fleet.pool_id, addresses),
            ).fetchone()
            if count == len(addresses):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the indexer has {count} of {len(addresses)} members after {timeout:.0f} s")
            time.sleep(0.2)


async def announce(fleet: Fleet, backend_url: str, connections: int = 16) -> None:
    """`PUT /v1/nodes` for every node, signed by it; raises on any refusal."""
    http = HttpPool.for_url(backend_url, connections)
    audience = Audience(Deployment(fleet.chain_id, fleet.pool_contract), http.authority)

    async def one(i: int) -> None:
        provider = fleet.providers[fleet.provider_of[i]].address
        body = json.dumps({"provider": provider, "specs": {"cores": 2, "gpu": "none"}}).encode()
        status, reply = await http.send(signed_request(fleet.nodes[i], audience, "PUT", "/v1/nodes", body))
        if status != 200:
            raise RuntimeError(f"announcing node {i} failed: {status} {reply[:200]!r}")

    try:
        for start in range(0, len(fleet.nodes), 200):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 200, len(fleet.nodes)))))
    finally:
        await http.close()
