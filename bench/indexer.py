"""Indexer throughput: events per second from anvil into PostgreSQL.

A fresh anvil gets one active pool with one node, then many `submitWork` transactions (signed
locally and sent in JSON-RPC batches with automine off, 200 per block) and `attestWork`
batches of 128 keys: two events per submission. The indexer (`proofpool.backend.indexer.follow.Indexer`)
then indexes the whole chain into a fresh database three times: in ranges of `--batch-blocks`,
in ranges of 5 blocks (many small transactions), and in ranges of `--batch-blocks` while
dispatching one Celery task per submission to a Redis broker (db 13).
Prints one JSON line per run and writes them to `bench/results/indexer.jsonl`.
Target: >= 1,500 events/s.

Run: `.venv/bin/python bench/indexer.py [--submissions 10000]` (needs PostgreSQL and Redis).
The `Market` workload is also what the indexer fault tests use to make many events quickly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import NO_EVIDENCE, PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import AddressBook, deploy_contracts, grant_validator
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN

RESULTS = Path(__file__).resolve().parent / "results" / "indexer.jsonl"
TARGET_EVENTS_PER_S = 1_500
ATTEST_BATCH = 128
BROKER_DB = 13
"""Redis db of the dispatch run (flushed before and after)."""


def work_key(tag: str, i: int) -> bytes:
    return hashlib.sha256(f"{tag}:{i}".encode()).digest()


@dataclass
class Market:
    """One deployment with one active, funded pool and one member node, ready for bulk work."""

    w3: Web3
    book: AddressBook
    admin: LocalAccount
    validator: LocalAccount
    provider: LocalAccount
    node: LocalAccount
    pool_id: int

    @classmethod
    def deploy(cls, w3: Web3) -> Market:
        """Deploy, grant a validator, create/fund/start a pool, register+stake a provider, join its node."""
        admin, validator, provider, node = (Account.from_key(ANVIL_KEYS[i]) for i in (0, 3, 4, 6))
        book = deploy_contracts(w3, TxSender(w3, admin))
        client = ChainClient.build(w3, book, admin)
        grant_validator(w3, TxSender(w3, admin), book, validator.address)
        for who in (admin, provider):
            client.token.mint(who.address, 1_000_000 * TOKEN)
        params = PoolParams(
            manager=admin.address,
            treasury=admin.address,
            model_uri="bench://indexer",
            reward_per_unit=1,
            validator_fee=1,
            slash_amount=10 * TOKEN,
            dispute_window=60,
            validator_slash_share_bps=5_000,
        )
        pool_id, _ = client.pool.create_pool(params)
        client.token.approve(client.pool.address, 100_000 * TOKEN)
        client.pool.fund_pool(pool_id, 100_000 * TOKEN)
        client.pool.start_pool(pool_id)
        me = client.as_account(provider)
        me.registry.register_provider()
        me.token.approve(me.stake_manager.address, 1_000 * TOKEN)
        me.stake_manager.stake(1_000 * TOKEN)
        me.registry.add_node(4, b"\x01" * 32, me.registry.prove_ownership(node, provider.address))
        me.pool.approve_pool(pool_id, 1_000 * TOKEN)
        expiry = w3.eth.get_block("latest")["timestamp"] + 3600
        me.pool.join_pool(sign_invite(admin, pool_id, node.address, 1, expiry, book.chain_id, book.compute_pool))
        return cls(w3, book, admin, validator, provider, node, pool_id)

    def _contract(self) -> Any:
        return ChainClient.build(self.w3, self.book).pool.contract

    def _send_bulk(self, account: LocalAccount, calls: list[Any], per_block: int, gas: int) -> None:
        """Sign `calls` from `account` locally, send them in JSON-RPC batches with automine off and
        mine `per_block` per block; raises if any transaction reverted."""
        provider = self.w3.provider
        nonce = self.w3.eth.get_transaction_count(account.address)
        fee = {"maxFeePerGas": 10**10, "maxPriorityFeePerGas": 1, "chainId": self.book.chain_id, "gas": gas}
        provider.make_request("evm_setAutomine", [False])
        try:
            last_hash = None
            for first in range(0, len(calls), per_block):
                raw = []
                for offset, call in enumerate(calls[first : first + per_block]):
                    tx = call.build_transaction({**fee, "from": account.address, "nonce": nonce + first + offset})
                    raw.append(("eth_sendRawTransaction", ["0x" + account.sign_transaction(tx).raw_transaction.hex()]))
                replies = provider.make_batch_request(raw)
                errors = [r["error"] for r in replies if "error" in r]
                if errors:
                    raise RuntimeError(f"sending failed: {errors[0]}")
                last_hash = replies[-1]["result"]
                provider.make_request("evm_mine", [])
        finally:
            provider.make_request("evm_setAutomine", [True])
        if last_hash is not None:
            receipt = self.w3.eth.get_transaction_receipt(last_hash)
            if receipt["status"] != 1:
                raise RuntimeError("the last bulk transaction reverted")

    def submit(self, tag: str, count: int, per_block: int = 200) -> list[bytes]:
        """`count` submissions from the node; returns their work keys."""
        pool = self._contract()
        keys = [work_key(tag, i) for i in range(count)]
        calls = [pool.functions.submitWork(self.pool_id, self.node.address, k, 64, 0) for k in keys]
        self._send_bulk(self.node, calls, per_block, gas=150_000)
        return keys

    def attest(self, keys: list[bytes], per_block: int = 8) -> None:
        """Attest `keys` in batches of 128 (one WorkAttested per key)."""
        pool = self._contract()
        calls = [
            pool.functions.attestWork(self.pool_id, keys[i : i + ATTEST_BATCH], NO_EVIDENCE)
            for i in range(0, len(keys), ATTEST_BATCH)
        ]
        self._send_bulk(self.validator, calls, per_block, gas=1_500_000)


def index_once(market: Market, dispatch: bool, batch_blocks: int) -> dict[str, Any]:
    """Index the whole chain of `market` into a fresh database; time it."""
    import redis
    from proofpool.backend.indexer.decode import FastDecoder
    from proofpool.backend.indexer.follow import Indexer, IndexerOptions
    from proofpool.backend.indexer.outbox import Dispatcher, celery_sender
    from proofpool.backend.indexer.source import ChainSource

    from proofpool.infra import db
    from proofpool.infra.broker import make_celery
    from proofpool.infra.config import Settings, get_settings

    url = db.with_database(get_settings().database_url, f"proofpool_bench_{uuid.uuid4().hex[:10]}")
    redis_url = urlsplit(get_settings().redis_url)
    broker_url = urlunsplit(redis_url._replace(path=f"/{BROKER_DB}"))
    db.ensure_database(url)
    try:
        db.upgrade(url)
        dispatcher = None
        if dispatch:
            redis.Redis.from_url(broker_url).flushdb()
            dispatcher = Dispatcher(celery_sender(make_celery(Settings(broker_url=broker_url), "proofpool-bench")))
        source = ChainSource(market.w3, FastDecoder(market.book.addresses))
        indexer = Indexer(source, market.book, url, IndexerOptions(batch_blocks=batch_blocks), dispatcher)
        started = time.monotonic()
        stats = indexer.run(once=True)
        seconds = time.monotonic() - started
        rebuild_s = time_rebuild(url) if not dispatch else None
    finally:
        db.drop_database(url)
        if dispatch:
            redis.Redis.from_url(broker_url).flushdb()
    return {
        "bench": "indexer",
        "dispatch": dispatch,
        "events": stats.new_events,
        "blocks": stats.blocks,
        "ranges": stats.ranges,
        "batch_blocks": batch_blocks,
        "tasks_sent": stats.tasks_sent,
        "seconds": round(seconds, 3),
        "events_per_s": round(stats.new_events / seconds, 1),
        "target_events_per_s": TARGET_EVENTS_PER_S,
        "meets_target": stats.new_events / seconds >= TARGET_EVENTS_PER_S,
        **({"rebuild_seconds": round(rebuild_s, 3)} if rebuild_s is not None else {}),
    }


def time_rebuild(url: str) -> float:
    """Seconds to rebuild every projection from the stored raw events (what a reorg costs)."""
    import psycopg
    from proofpool.backend.indexer.rebuild import rebuild_projections

    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        with conn.transaction():
            rebuild_projections(conn)
        return time.monotonic() - started


def main() -> int:
    from proofpool.infra.chain.anvil import start_anvil
    from proofpool.infra.chain.rpc import connect

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=10_000, help="submitWork transactions (2 events each)")
    parser.add_argument("--batch-blocks", type=int, default=500, help="blocks per eth_getLogs range")
    args = parser.parse_args()
    runs = [(False, args.batch_blocks), (False, 5), (True, args.batch_blocks)]
    rows = []
    with start_anvil() as anvil:
        market = Market.deploy(connect(anvil.url))
        made = time.monotonic()
        market.attest(market.submit("bench", args.submissions))
        workload = {"submissions": args.submissions, "workload_seconds": round(time.monotonic() - made, 1)}
        for dispatch, batch_blocks in runs:
            row = {**index_once(market, dispatch, batch_blocks), **workload}
            print(json.dumps(row), flush=True)
            rows.append(row)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0 if all(row["meets_target"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
