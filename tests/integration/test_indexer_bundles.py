"""Bundled submissions (`submitWorkBundle`) through the indexer on a real anvil and PostgreSQL: a
bundle is one submissions row keyed by its bundle key with its files in event order, gets one
validation task, follows its verdict and settlement events like any submission, is served with
its files by the ledger API, verifies clean against the chain (a tampered file list does not),
disappears with the block a reorg removes, and counts as many files as it holds for the
orchestrator's batch counter."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from eth_account import Account
from fastapi.testclient import TestClient
from proofpool.backend.db.nodes import submitted_files
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.rebuild import rebuild_projections
from proofpool.backend.indexer.verify import verify_ledger
from proofpool.validator.store import claim, claim_batch, record_decision

from bench.indexer import Market
from proofpool.infra.broker import VALIDATE_SUBMISSION
from proofpool.infra.chain.anvil import advance_time, start_anvil
from proofpool.infra.chain.bindings import NO_EVIDENCE, WorkStatus
from proofpool.infra.chain.bundles import bundle_key, canonical
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.events import EventDecoder
from proofpool.infra.chain.rpc import connect
from proofpool.infra.config import Settings
from tests.fixtures.indexer import PROJECTIONS, make_indexer, outbox_keys, query, snapshot
from tests.fixtures.ledger import ledger_redis_url

VERSION = 0
DISPUTE_WINDOW = 60  # Market's pool


def file_key(tag: str, i: int) -> bytes:
    return hashlib.sha256(f"bundle-file:{tag}:{i}".encode()).digest()


@dataclass(frozen=True)
class Bundle:
    """A bundle as sent: its key and its files in canonical (ascending key) order."""

    key: bytes
    file_keys: list[bytes]
    file_units: list[int]

    @property
    def work_units(self) -> int:
        return sum(self.file_units)


def submit_bundle(market: Market, tag: str, units: list[int]) -> Bundle:
    """Send one bundle of `len(units)` files from the market's node (binding of the contracts helper)."""
    keys, ordered_units = canonical((file_key(tag, i), u) for i, u in enumerate(units))
    node = ChainClient.build(market.w3, market.book, market.node)
    node.pool.submit_work_bundle(market.pool_id, market.node.address, keys, ordered_units, VERSION)
    return Bundle(bundle_key(keys, ordered_units), keys, ordered_units)


def pool_of(market: Market, account=None) -> ChainClient:
    return ChainClient.build(market.w3, market.book, account or market.validator)


def submission_rows(url: str) -> dict[bytes, tuple]:
    """work_key -> (work_units, status, file_keys, file_units) of every submission."""
    rows = query(url, "SELECT work_key, work_units, status, file_keys, file_units FROM submissions")
    return {
        bytes(key): (units, status, None if keys is None else [bytes(k) for k in keys], file_units)
        for key, units, status, keys, file_units in rows
    }


@dataclass(frozen=True)
class BundleWorld:
    """One single-file submission (finalized) and three bundles: `accepted` (attested, then
    finalized), `invalid` (invalidated: the node slashed) and `pending` (never judged)."""

    rpc_url: str
    market: Market
    single: bytes
    accepted: Bundle
    invalid: Bundle
    pending: Bundle


@pytest.fixture(scope="module")
def bundle_world() -> Iterator[BundleWorld]:
    """The module's own anvil with the bundle scenario; read-only for its tests."""
    with start_anvil() as anvil:
        market = Market.deploy(connect(anvil.url))
        (single,) = market.submit("single", 1, per_block=1)
        accepted = submit_bundle(market, "accepted", [5, 7, 9])
        pending = submit_bundle(market, "pending", [1, 2])
        validator = pool_of(market).pool
        validator.attest_work(market.pool_id, [single, accepted.key], NO_EVIDENCE)
        advance_time(market.w3, DISPUTE_WINDOW + 1)
        validator.finalize_work(market.pool_id, [single, accepted.key])
        # The invalid verdict slashes and ejects the node: its bundle is sent last.
        invalid = submit_bundle(market, "invalid", [3, 4, 6, 8])
        validator.invalidate_work(market.pool_id, invalid.key, "sampling_mismatch", NO_EVIDENCE)
        yield BundleWorld(anvil.url, market, single, accepted, invalid, pending)


@pytest.fixture
def indexed(bundle_world: BundleWorld, clean_database: str) -> str:
    """The bundle world indexed into the emptied session database."""
    make_indexer(bundle_world.market.w3, bundle_world.market.book, clean_database, batch_blocks=4).run(once=True)
    return clean_database


def test_the_bundle_event_decodes_as_web3_decodes_it(bundle_world):
    market = bundle_world.market
    logs = market.w3.eth.get_logs({"fromBlock": market.book.deploy_block, "toBlock": "latest"})
    slow = EventDecoder(market.w3, market.book.addresses).decode_logs(logs)
    raw = market.w3.provider.make_request(
        "eth_getLogs", [{"fromBlock": hex(market.book.deploy_block), "toBlock": "latest"}]
    )["result"]
    fast = [e for e in (FastDecoder(market.book.addresses).decode(log) for log in raw) if e is not None]
    slow_bundles = [e for e in slow if e.name == "WorkBundleSubmitted"]
    fast_bundles = [e for e in fast if e.name == "WorkBundleSubmitted"]
    assert len(fast_bundles) == len(slow_bundles) == 3
    for f, s in zip(fast_bundles, slow_bundles, strict=True):
        assert f.args["fileKeys"] == ["0x" + bytes(k).hex() for k in s.args["fileKeys"]]
        assert f.args["fileUnits"] == list(s.args["fileUnits"])
        assert f.args["workKey"] == "0x" + bytes(s.args["workKey"]).hex()
    first = fast_bundles[0].args
    assert first["fileKeys"] == ["0x" + k.hex() for k in bundle_world.accepted.file_keys]
    assert first["workUnits"] == bundle_world.accepted.work_units == 21


def test_a_bundle_is_one_row_with_its_files_and_one_validation_task(bundle_world, indexed):
    w = bundle_world
    rows = submission_rows(indexed)
    assert set(rows) == {w.single, w.accepted.key, w.invalid.key, w.pending.key}
    assert rows[w.single] == (64, "finalized", None, None)
    for bundle, status in ((w.accepted, "finalized"), (w.invalid, "invalid"), (w.pending, "pending")):
        assert rows[bundle.key] == (bundle.work_units, status, bundle.file_keys, bundle.file_units)

    # one validate_submission task per submission, bundle or not, keyed by the submission's key
    pool = w.market.pool_id
    assert outbox_keys(indexed) == [
        (pool, "0x" + key.hex()) for key in (w.single, w.accepted.key, w.pending.key, w.invalid.key)
    ]
    tasks = query(indexed, "SELECT task, dedupe_key FROM outbox ORDER BY id")
    assert {task for task, _ in tasks} == {VALIDATE_SUBMISSION}
    assert tasks[1][1] == f"{pool}:0x{w.accepted.key.hex()}"


def test_later_events_on_the_bundle_key_update_its_row_as_the_chain_says(bundle_world, indexed):
    w = bundle_world
    chain = pool_of(w.market).pool
    rows = submission_rows(indexed)
    for bundle in (w.accepted, w.invalid, w.pending):
        work = chain.get_work(w.market.pool_id, bundle.key)
        assert WorkStatus[rows[bundle.key][1].upper()] is work.status
        assert (work.work_units, work.node) == (bundle.work_units, w.market.node.address)
        assert chain.work_files(w.market.pool_id, bundle.key) == len(bundle.file_keys)
    assert chain.work_files(w.market.pool_id, w.single) == 1

    verdicts = query(indexed, "SELECT work_key, verdict, reason FROM verdicts ORDER BY block_number, log_index")
    assert [(bytes(k), v, r) for k, v, r in verdicts] == [
        (w.single, "accepted", None),
        (w.accepted.key, "accepted", None),
        (w.invalid.key, "invalid", "sampling_mismatch"),
    ]
    # a verdict's lag: blocks from the submission's log to the verdict's, from the chain's own blocks
    lags = query(
        indexed,
        "SELECT v.lag_blocks, v.block_number - s.block_number FROM verdicts v "
        "JOIN submissions s USING (pool_id, work_key) ORDER BY v.block_number, v.log_index",
    )
    assert len(lags) == 3 and all(lag == span and lag >= 0 for lag, span in lags), lags
    assert any(lag > 0 for lag, _ in lags)
    slashes = query(indexed, "SELECT work_key, provider FROM slashes")
    assert [(bytes(k), p) for k, p in slashes] == [(w.invalid.key, w.market.provider.address)]
    # the status change is recorded beside the row's fixed position
    status_block, block = query(
        indexed, "SELECT status_block, block_number FROM submissions WHERE work_key = %s", (w.accepted.key,)
    )[0]
    assert status_block > block
    # a bundle is paid as one submission: the reward per unit over its summed units, the fee per file
    pool = chain.get_pool(w.market.pool_id)
    credits = dict(
        query(indexed, "SELECT kind, amount FROM rewards WHERE work_key = %s ORDER BY kind", (w.accepted.key,))
    )
    assert int(credits["provider_reward"]) == pool.reward_per_unit * w.accepted.work_units
    assert int(credits["validator_fee"]) == pool.validator_fee * len(w.accepted.file_keys)
    member = query(indexed, "SELECT state FROM memberships WHERE node = %s", (w.market.node.address,))
    assert member == [("slashed",)]


def test_a_rebuild_from_chain_events_gives_the_same_bundle_rows(bundle_world, indexed):
    before = snapshot(indexed, PROJECTIONS)
    with psycopg.connect(indexed) as conn, conn.transaction():
        rebuild_projections(conn)
    assert snapshot(indexed, PROJECTIONS) == before


def test_the_batch_counter_counts_every_file_of_a_bundle(bundle_world, indexed):
    w = bundle_world

    async def count() -> int:
        async with await psycopg.AsyncConnection.connect(indexed) as conn:
            return await submitted_files(conn, w.market.pool_id, w.market.node.address, VERSION)

    files = 1 + sum(len(b.file_keys) for b in (w.accepted, w.invalid, w.pending))
    assert asyncio.run(count()) == files == 10


def test_the_ledger_api_serves_a_bundle_with_its_files(bundle_world, indexed):
    from proofpool.backend.app import create_app

    w = bundle_world
    with TestClient(create_app(Settings(DATABASE_URL=indexed, REDIS_URL=ledger_redis_url()))) as api:
        reply = api.get("/v1/ledger/submissions", params={"pool_id": w.market.pool_id})
        assert reply.status_code == 200, reply.text
        items = {item["work_key"]: item for item in reply.json()["items"]}
        assert items["0x" + w.single.hex()]["files"] is None
        accepted = items["0x" + w.accepted.key.hex()]
        expected = [
            {"work_key": "0x" + k.hex(), "work_units": u}
            for k, u in zip(w.accepted.file_keys, w.accepted.file_units, strict=True)
        ]
        assert accepted["files"] == expected
        assert (accepted["work_units"], accepted["status"]) == (21, "finalized")

        detail = api.get(f"/v1/ledger/submissions/{w.market.pool_id}/0x{w.invalid.key.hex()}")
        assert detail.status_code == 200, detail.text
        body = detail.json()
        assert [f["work_units"] for f in body["submission"]["files"]] == w.invalid.file_units
        assert [v["reason"] for v in body["verdicts"]] == ["sampling_mismatch"]
        assert len(body["slashes"]) == 1


def test_ledger_verify_is_clean_and_catches_a_tampered_file_list(bundle_world, indexed):
    w = bundle_world
    market = w.market
    diff = verify_ledger(indexed, w.rpc_url, book=market.book, batch_blocks=5)
    assert diff.ok, diff.to_json()
    counts = {t.table: (t.chain_rows, t.database_rows) for t in diff.tables}
    assert counts["submissions"] == (4, 4)

    forged = [*w.accepted.file_keys[:-1], file_key("forged", 0)]
    with psycopg.connect(indexed) as conn:
        conn.execute("UPDATE submissions SET file_keys = %s WHERE work_key = %s", (forged, w.accepted.key))
        conn.execute(
            "UPDATE submissions SET file_units = %s WHERE work_key = %s", ([9, 9], w.pending.key)
        )  # a forged unit count
    diff = verify_ledger(indexed, w.rpc_url, book=market.book, batch_blocks=5)
    assert not diff.ok
    table = next(t for t in diff.tables if t.table == "submissions")
    assert (table.changed_rows, table.changed_cells) == (2, 2)
    found = {(bytes(d.key["work_key"]), d.column) for d in table.differences}
    assert found == {(w.accepted.key, "file_keys"), (w.pending.key, "file_units")}
    tampered = next(d for d in table.differences if d.column == "file_keys")
    assert [bytes(k) for k in tampered.chain] == w.accepted.file_keys
    assert [bytes(k) for k in tampered.database] == forged


def test_a_reorg_removing_the_bundle_block_removes_its_row_task_and_validator_state(clean_database):
    with start_anvil() as anvil:
        market = Market.deploy(connect(anvil.url))
        (kept,) = market.submit("kept", 1, per_block=1)
        before = anvil.rpc("evm_snapshot")
        dropped = submit_bundle(market, "dropped", [2, 3, 4])
        make_indexer(market.w3, market.book, clean_database, batch_blocks=3).run(once=True)
        assert set(submission_rows(clean_database)) == {kept, dropped.key}
        assert len(outbox_keys(clean_database)) == 2
        # what a validator writes when it accepts the bundle: its validation row and the batch
        # claims of its files (under the bundle key, as the validator claims them, or a file's key)
        with psycopg.connect(clean_database) as conn, conn.transaction():
            pool, node, validator = market.pool_id, market.node.address, market.validator.address
            assert claim(conn, pool, dropped.key, validator, lease_seconds=60) is not None
            assert record_decision(conn, pool, dropped.key, validator, "accepted", None, {})
            for batch, key in enumerate([dropped.key, *dropped.file_keys]):
                assert claim_batch(conn, pool, node, VERSION, batch, key) == key

        anvil.rpc("evm_revert", [before])  # the bundle's block is gone ...
        for _ in range(3):
            anvil.rpc("evm_mine")  # ... and other blocks take its height
        assert pool_of(market).pool.work_files(market.pool_id, dropped.key) == 0
        stats = make_indexer(market.w3, market.book, clean_database, batch_blocks=3).run(once=True)

    assert stats.reorgs >= 1
    assert set(submission_rows(clean_database)) == {kept}
    assert outbox_keys(clean_database) == [(market.pool_id, "0x" + kept.hex())]
    assert query(clean_database, "SELECT count(*) FROM chain_events WHERE name = 'WorkBundleSubmitted'") == [(0,)]
    assert query(clean_database, "SELECT count(*) FROM batch_claims") == [(0,)]
    assert query(clean_database, "SELECT count(*) FROM validations") == [(0,)]


def test_a_heartbeat_counts_a_bundle_as_all_of_its_files(api):
    """The orchestrator withholds new batches while too many handed out lack a submission: a bundle
    of three files answers for three batches, so three more are handed out before it withholds."""
    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    api.add_pool(3, Account.create().address)
    api.add_member(3, node.address, provider.address)
    assert api.announce(node, provider.address).status_code == 200
    api.add_checkpoint(3, 1, hashlib.sha256(b"manifest v1").digest())
    bound = api.settings.max_unsubmitted_batches

    def report(batch: int) -> dict:
        body = {"completed": {"checkpoint_version": 1, "batch": batch}}
        return api.signed(node, "POST", "/v1/heartbeat", body).json()

    for batch in range(bound):
        assert report(batch)["assignment"]["batch"] == batch + 1
    assert report(bound)["withheld"] == {"batch": bound + 1, "unsubmitted": bound + 1, "max_unsubmitted": bound}

    keys, units = canonical((file_key("heartbeat", i), 8) for i in range(3))
    api.conn.execute(
        "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status, submitted_at,"
        " block_number, tx_hash, log_index, file_keys, file_units)"
        " VALUES (3, %s, %s, %s, 24, 1, 'pending', now(), 1, %s, 0, %s, %s)",
        (bundle_key(keys, units), node.address, provider.address, b"\x55" * 32, keys, units),
    )
    resumed = api.signed(node, "POST", "/v1/heartbeat", {}).json()
    assert resumed["withheld"] is None and resumed["assignment"]["batch"] == bound + 1
    assert report(bound + 1)["assignment"]["batch"] == bound + 2
    assert report(bound + 2)["assignment"]["batch"] == bound + 3
    held = report(bound + 3)
    assert held["assignment"] is None
    assert held["withheld"] == {"batch": bound + 4, "unsubmitted": bound + 1, "max_unsubmitted": bound}
