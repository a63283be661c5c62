"""`flush_verdicts` against a real anvil and a real PostgreSQL: batching into one attestWork,
invalidation with its reason, keys another validator got first, a crash between a mined
transaction and its commit, an unreachable RPC, reverts between read and send, and two
validators racing for one key. Each test starts from the same chain snapshot and an empty table."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.devnet.market import Cast, devnet_pool_params, onboard_node, open_market
from proofpool.validator import store
from proofpool.validator.verdicts import FlushBusy, FlushResult, flush_verdicts
from web3 import Web3

from proofpool.infra.chain.anvil import ANVIL_KEYS, AnvilProcess, free_port, start_anvil
from proofpool.infra.chain.bindings import NO_EVIDENCE, ComputePool, Work, WorkStatus, reason_text
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import AddressBook, deploy_contracts, grant_validator
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from tests.fixtures.postgres import migrated_database

LEASE = 300.0
ALL_DUE = {"max_wait": 0.0}  # every decided key is due: the batching rule has its own tests


@dataclass
class World:
    anvil: AnvilProcess
    w3: Web3
    book: AddressBook
    cast: Cast
    second: LocalAccount
    pool_id: int
    database_url: str
    serial: itertools.count

    def client(self, account: LocalAccount | None = None) -> ChainClient:
        return ChainClient.build(self.w3, self.book, account)

    @property
    def validator(self) -> ChainClient:
        return self.client(self.cast.validator)

    @property
    def validator2(self) -> ChainClient:
        return self.client(self.second)

    def submit(self, count: int, node: str = "alice") -> list[bytes]:
        """`count` fresh submissions of alice's (or bob's) node, Pending on-chain."""
        account = self.cast.alice_node if node == "alice" else self.cast.bob_node
        sender = self.client(account)
        keys = [hashlib.sha256(f"rollouts-{next(self.serial)}".encode()).digest() for _ in range(count)]
        for key in keys:
            sender.pool.submit_work(self.pool_id, account.address, key, 64, 0)
        return keys

    def status(self, key: bytes) -> Work:
        return self.client().pool.get_work(self.pool_id, key)

    def events(self, name: str, from_block: int) -> list[ChainEvent]:
        """Events `name` of the pool contract from `from_block` on (none if no block was mined since)."""
        if from_block > self.w3.eth.block_number:
            return []
        logs = self.w3.eth.get_logs({"fromBlock": from_block, "toBlock": "latest", "address": self.book.compute_pool})
        return [e for e in self.client().decoder().decode_logs(logs) if e.name == name]

    def nonce(self, account: LocalAccount) -> int:
        return self.w3.eth.get_transaction_count(account.address)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    """A module's own anvil: a started pool with alice's and bob's nodes as members, two validators."""
    with start_anvil() as anvil, migrated_database("proofpool_test_verdicts") as url:
        cast = Cast()
        w3 = connect(anvil.url)
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        admin = ChainClient.build(w3, book, cast.admin)
        pool_id = open_market(admin, cast, devnet_pool_params(cast))
        second = Account.from_key(ANVIL_KEYS[8])
        grant_validator(w3, TxSender(w3, cast.admin), book, second.address)
        expiry = w3.eth.get_block("latest")["timestamp"] + 365 * 24 * 3600
        for provider, node in ((cast.alice, cast.alice_node), (cast.bob, cast.bob_node)):
            me = onboard_node(admin, provider, node, 200 * TOKEN, 4, pools=(pool_id,))
            me.pool.join_pool(sign_invite(cast.manager, pool_id, node.address, 1, expiry, me.chain_id, me.pool.address))
        yield World(anvil, w3, book, cast, second, pool_id, url, itertools.count())


@pytest.fixture(autouse=True)
def _isolate(world: World) -> Iterator[None]:
    """Every test starts from the module's chain and an empty verdict table."""
    snapshot = world.anvil.rpc("evm_snapshot")
    with psycopg.connect(world.database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE validations")
    yield
    world.anvil.rpc("evm_revert", [snapshot])


@pytest.fixture
def conn(world: World) -> Iterator[psycopg.Connection]:
    """The tasks' and the assertions' connection."""
    with psycopg.connect(world.database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def flush_conn(world: World) -> Iterator[psycopg.Connection]:
    """The flusher's own connection (not autocommit: the flush opens and commits its transactions)."""
    with psycopg.connect(world.database_url) as connection:
        yield connection


def decide(
    world: World,
    conn: psycopg.Connection,
    keys: list[bytes],
    verdict: store.VerdictKind = "accepted",
    reason: str | None = None,
    validator: LocalAccount | None = None,
) -> None:
    """What validation tasks do: claim each key, then record the verdict."""
    who = (validator or world.cast.validator).address
    for key in keys:
        assert store.claim(conn, world.pool_id, key, who, lease_seconds=LEASE) is not None
        assert store.record_decision(conn, world.pool_id, key, who, verdict, reason, {"checks": "passed"})


def rows(conn: psycopg.Connection, keys: list[bytes]) -> list[tuple]:
    """(state, tx_hash, attempts, last_error, note) per key, in the order of `keys`."""
    by_key = {
        bytes(r[0]): r[1:]
        for r in conn.execute(
            "SELECT work_key, state, tx_hash, attempts, last_error, note FROM validations WHERE work_key = ANY(%s)",
            (keys,),
        ).fetchall()
    }
    return [by_key[k] for k in keys]


def test_32_accepted_keys_go_out_in_one_attest_work(world, conn, flush_conn):
    keys = world.submit(32)
    decide(world, conn, keys)
    start = world.w3.eth.block_number + 1

    result = flush_verdicts(flush_conn, world.validator)  # default rule: 32 waiting -> due now

    assert result == FlushResult(attested=32, invalidated=0, superseded=0, failed=0, next_due_in=None)
    attested = world.events("WorkAttested", start)
    assert sorted(e["workKey"] for e in attested) == sorted(keys)
    assert {e["validator"] for e in attested} == {world.cast.validator.address}
    assert len({e.tx_hash for e in attested}) == 1  # one transaction
    assert all(world.status(k).status is WorkStatus.ACCEPTED for k in keys)
    assert {(state, tx) for state, tx, *_ in rows(conn, keys)} == {("sent", attested[0].tx_hash)}

    # nothing is ever sent twice
    assert flush_verdicts(flush_conn, world.validator).attested == 0
    assert len(world.events("WorkAttested", start)) == 32


def test_31_accepted_keys_wait_for_max_wait(world, conn, flush_conn):
    keys = world.submit(31)
    decide(world, conn, keys)
    start = world.w3.eth.block_number + 1

    early = flush_verdicts(flush_conn, world.validator, max_wait=60.0)
    assert (early.attested, early.failed) == (0, 0)
    assert early.next_due_in is not None and 0 < early.next_due_in <= 60
    assert world.events("WorkAttested", start) == []
    assert {state for state, *_ in rows(conn, keys)} == {"decided"}

    oldest = conn.execute("SELECT min(decided_at) FROM validations").fetchone()[0]
    late = flush_verdicts(flush_conn, world.validator, max_wait=60.0, now=oldest + timedelta(seconds=60))
    assert late.attested == 31
    assert len({e.tx_hash for e in world.events("WorkAttested", start)}) == 1


def test_invalid_key_is_invalidated_at_once_with_its_reason(world, conn, flush_conn):
    cheat = world.submit(1, node="bob")[0]
    honest = world.submit(1)[0]
    decide(world, conn, [cheat], "invalid", "sampling_mismatch")
    decide(world, conn, [honest])
    start = world.w3.eth.block_number + 1

    result = flush_verdicts(flush_conn, world.validator)  # default max_wait: the accepted key waits

    assert (result.invalidated, result.attested, result.failed) == (1, 0, 0)
    assert result.next_due_in is not None and 0 < result.next_due_in <= 5
    (event,) = world.events("WorkInvalidated", start)
    assert (event["workKey"], event["validator"], event["node"]) == (
        cheat,
        world.cast.validator.address,
        world.cast.bob_node.address,
    )
    assert reason_text(event["reason"]) == "sampling_mismatch"
    assert world.status(cheat).status is WorkStatus.INVALID
    assert world.status(honest).status is WorkStatus.PENDING
    assert [r[:2] for r in rows(conn, [cheat, honest])] == [("sent", event.tx_hash), ("decided", None)]


def test_key_attested_by_another_validator_is_superseded_and_not_sent(world, conn, flush_conn):
    keys = world.submit(3)
    world.validator2.pool.attest_work(world.pool_id, [keys[0]], NO_EVIDENCE)
    decide(world, conn, keys)
    start = world.w3.eth.block_number + 1

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert (result.attested, result.superseded, result.failed) == (2, 1, 0)
    ours = world.events("WorkAttested", start)
    assert sorted(e["workKey"] for e in ours) == sorted(keys[1:])  # nothing sent for keys[0]
    assert world.status(keys[0]).validator == world.second.address
    state, tx, _, _, note = rows(conn, keys)[0]
    assert (state, tx) == ("superseded", None)
    assert world.second.address in note


def test_invalid_key_already_invalidated_by_another_validator_is_superseded(world, conn, flush_conn):
    cheat = world.submit(1, node="bob")[0]
    world.validator2.pool.invalidate_work(world.pool_id, cheat, "toploc_mismatch", NO_EVIDENCE)
    decide(world, conn, [cheat], "invalid", "sampling_mismatch")
    before = world.nonce(world.cast.validator)

    result = flush_verdicts(flush_conn, world.validator)

    assert (result.superseded, result.invalidated) == (1, 0)
    assert world.nonce(world.cast.validator) == before
    assert rows(conn, [cheat])[0][0] == "superseded"


def test_tx_mined_before_a_crash_is_marked_sent_not_sent_again(world, conn, flush_conn):
    accepted = world.submit(3)
    cheat = world.submit(1, node="bob")[0]
    decide(world, conn, accepted)
    decide(world, conn, [cheat], "invalid", "reward_mismatch")
    start = world.w3.eth.block_number + 1
    # the flusher sent both transactions and died before committing their rows
    world.validator.pool.attest_work(world.pool_id, accepted, NO_EVIDENCE)
    world.validator.pool.invalidate_work(world.pool_id, cheat, "reward_mismatch", NO_EVIDENCE)
    before = world.nonce(world.cast.validator)

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert result == FlushResult(0, 0, 0, 0, None, recovered=4)
    assert world.nonce(world.cast.validator) == before  # no second transaction
    assert len(world.events("WorkAttested", start)) == 3 and len(world.events("WorkInvalidated", start)) == 1
    for state, tx, _, _, note in rows(conn, [*accepted, cheat]):
        assert (state, tx) == ("sent", None) and "by this validator" in note


def test_unreachable_rpc_leaves_rows_decided_and_a_later_flush_sends_them(world, conn, flush_conn):
    accepted = world.submit(2)
    cheat = world.submit(1, node="bob")[0]
    decide(world, conn, accepted)
    decide(world, conn, [cheat], "invalid", "eos_missing")
    down = ChainClient.build(connect(world.anvil.url), world.book, world.cast.validator)
    down.w3.provider = connect(f"http://127.0.0.1:{free_port()}", timeout=2, check=False).provider  # RPC gone

    result = flush_verdicts(flush_conn, down, **ALL_DUE)

    assert (result.failed, result.attested, result.invalidated) == (3, 0, 0)
    assert result.next_due_in == 1.0  # retry soon, but not in a hot loop
    for state, tx, attempts, error, _ in rows(conn, [*accepted, cheat]):
        assert (state, tx, attempts) == ("decided", None, 1) and "ConnectionError" in error
    assert store.validator_counts(conn, world.cast.validator.address)["failing"] == 3

    again = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert (again.attested, again.invalidated, again.failed) == (2, 1, 0)
    assert world.status(cheat).status is WorkStatus.INVALID
    assert {world.status(k).status for k in accepted} == {WorkStatus.ACCEPTED}
    assert {r[0] for r in rows(conn, [*accepted, cheat])} == {"sent"}


def test_refused_sends_stay_decided_with_the_error_and_cost_no_gas(world, conn, flush_conn):
    keys = world.submit(3)
    cheat = world.submit(1, node="bob")[0]
    decide(world, conn, keys)
    decide(world, conn, [cheat], "invalid", "bad_schema")
    admin = world.client(world.cast.admin)
    admin.pool.revoke_role("VALIDATOR_ROLE", world.cast.validator.address)
    before = world.nonce(world.cast.validator)

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert (result.failed, result.attested, result.invalidated) == (4, 0, 0)
    assert world.nonce(world.cast.validator) == before  # every estimate reverted: nothing was mined
    for state, _, attempts, error, _ in rows(conn, [*keys, cheat]):
        assert (state, attempts) == ("decided", 1) and "AccessControlUnauthorizedAccount" in error

    admin.pool.grant_role("VALIDATOR_ROLE", world.cast.validator.address)
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).attested == 3


class RacingPool(ComputePool):
    """The real binding, with a real competitor: right after our n-th read of a chosen key finds it
    Pending, the second validator attests that key, so our transaction meets a changed chain (the
    contract skips the taken keys and attests the rest)."""

    def __init__(self, pool: ComputePool, competitor: ComputePool, strike_after: dict[bytes, int]) -> None:
        super().__init__(pool.w3, pool.address, pool.sender)
        self.competitor = competitor
        self.strike_after = dict(strike_after)
        self.reads: dict[bytes, int] = {}

    def get_work(self, pool_id: int, work_key: bytes) -> Work:
        work = super().get_work(pool_id, work_key)
        self.reads[work_key] = self.reads.get(work_key, 0) + 1
        if work.status is WorkStatus.PENDING and self.strike_after.get(work_key) == self.reads[work_key]:
            self.competitor.attest_work(pool_id, [work_key], NO_EVIDENCE)
        return work


@pytest.mark.parametrize(
    "strikes, our_txs",
    [
        pytest.param({0: 1}, 1, id="taken-key-skipped-in-the-batch"),
        pytest.param({0: 1, 1: 1}, 1, id="two-taken-keys-skipped-in-the-batch"),
    ],
)
def test_chain_changing_between_read_and_send(world, conn, flush_conn, strikes, our_txs):
    keys = world.submit(5)
    decide(world, conn, keys)
    racing = RacingPool(world.validator.pool, world.validator2.pool, {keys[i]: n for i, n in strikes.items()})
    client = dataclasses.replace(world.validator, pool=racing)
    start = world.w3.eth.block_number + 1

    result = flush_verdicts(flush_conn, client, **ALL_DUE)

    taken = [keys[i] for i in strikes]
    assert (result.attested, result.superseded, result.failed) == (5 - len(taken), len(taken), 0)
    events = world.events("WorkAttested", start)
    by_validator = {e["workKey"]: e["validator"] for e in events}
    assert len(events) == 5  # one verdict per key on-chain
    assert {k for k, v in by_validator.items() if v == world.second.address} == set(taken)
    assert len({e.tx_hash for e in events if e["validator"] == world.cast.validator.address}) == our_txs
    assert sorted(r[0] for r in rows(conn, keys)) == sorted(["superseded"] * len(taken) + ["sent"] * (5 - len(taken)))


def test_two_validators_deciding_one_key_only_one_claims_it(world):
    key = world.submit(1)[0]
    barrier = threading.Barrier(2)
    claims: dict[str, tuple[bool, bool]] = {}

    def validate(account: LocalAccount) -> None:
        """A validation task: claim, then (whatever the claim said) try to record a verdict."""
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            barrier.wait()
            claimed = store.claim(conn, world.pool_id, key, account.address, lease_seconds=LEASE) is not None
            decided = store.record_decision(conn, world.pool_id, key, account.address, "accepted", None, {})
            claims[account.address] = (claimed, decided)

    threads = [threading.Thread(target=validate, args=(a,)) for a in (world.cast.validator, world.second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(claims.values()) == [(False, False), (True, True)]
    start = world.w3.eth.block_number + 1

    results = {}
    for account in (world.cast.validator, world.second):
        with psycopg.connect(world.database_url) as flush_conn:
            results[account.address] = flush_verdicts(flush_conn, world.client(account), **ALL_DUE)

    winner = next(address for address, (won, _) in claims.items() if won)
    assert {a: r.attested for a, r in results.items()} == {a: int(a == winner) for a in claims}
    (event,) = world.events("WorkAttested", start)
    assert (event["workKey"], event["validator"]) == (key, winner)


def test_a_second_flusher_of_the_same_key_is_refused(world, conn, flush_conn):
    keys = world.submit(1)
    decide(world, conn, keys)
    with psycopg.connect(world.database_url, autocommit=True) as other:
        assert store.try_lock_flusher(other, world.cast.validator.address)
        with pytest.raises(FlushBusy, match=world.cast.validator.address):
            flush_verdicts(flush_conn, world.validator, **ALL_DUE)
        assert rows(conn, keys)[0][0] == "decided"
    # the lock went with the other session
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).attested == 1


def test_flush_refuses_a_connection_inside_a_transaction(world, flush_conn):
    flush_conn.execute("SELECT 1")
    with pytest.raises(ValueError, match="no open transaction"):
        flush_verdicts(flush_conn, world.validator)


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transactions"])
def test_flush_commits_its_rows_and_releases_its_lock(world, conn, autocommit):
    keys = world.submit(2)
    decide(world, conn, keys)
    with psycopg.connect(world.database_url, autocommit=autocommit) as flush_conn:
        assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).attested == 2
        # seen from another session: committed, and the lock is free while this session lives on
        assert {r[0] for r in rows(conn, keys)} == {"sent"}
        assert store.try_lock_flusher(conn, world.cast.validator.address)
        store.unlock_flusher(conn, world.cast.validator.address)


CHALLENGE_WINDOW = 600


def _challenge_pool(world: World) -> int:
    """A second started pool whose rejections wait CHALLENGE_WINDOW seconds; alice's node joined."""
    admin = world.client(world.cast.admin)
    params = dataclasses.replace(devnet_pool_params(world.cast), challenge_window=CHALLENGE_WINDOW, contest_quorum=1)
    pool_id, _ = admin.pool.create_pool(params)
    admin.pool.start_pool(pool_id)
    alice = world.client(world.cast.alice)
    alice.pool.approve_pool(pool_id, 200 * TOKEN)
    expiry = world.w3.eth.get_block("latest")["timestamp"] + 3600
    node = world.cast.alice_node
    alice.pool.join_pool(
        sign_invite(world.cast.manager, pool_id, node.address, 7, expiry, alice.chain_id, alice.pool.address)
    )
    return pool_id


def _rejected_by_us(world: World, conn: psycopg.Connection, pool_id: int, label: str) -> bytes:
    """A fresh submission of alice's node in `pool_id`, decided invalid by our validator with evidence."""
    key = hashlib.sha256(f"challenged-{label}".encode()).digest()
    node = world.cast.alice_node
    world.client(node).pool.submit_work(pool_id, node.address, key, 64, 0)
    me = world.cast.validator.address
    assert store.claim(conn, pool_id, key, me, lease_seconds=LEASE) is not None
    evidence = hashlib.sha256(label.encode()).digest()
    assert store.record_decision(conn, pool_id, key, me, "invalid", "made_up", {"row": 3}, evidence)
    return key


def test_a_rejection_is_executed_once_its_challenge_window_has_passed(world, conn, flush_conn):
    pool_id = _challenge_pool(world)
    key = _rejected_by_us(world, conn, pool_id, "waits")
    start = world.w3.eth.block_number + 1
    alice_stake = world.client().stake_manager.active_stake(world.cast.alice.address)

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert result.invalidated == 1 and result.executed == 0
    assert result.next_due_in is not None and 0 < result.next_due_in <= CHALLENGE_WINDOW  # come back then
    (rejected,) = world.events("WorkRejected", start)
    assert rejected["evidenceHash"] == hashlib.sha256(b"waits").digest()  # the recorded commitment
    assert world.events("WorkInvalidated", start) == []
    assert world.client().pool.get_work(pool_id, key).status is WorkStatus.REJECTED
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).executed == 0  # still inside the window

    world.anvil.rpc("evm_increaseTime", [CHALLENGE_WINDOW])
    world.anvil.rpc("evm_mine")
    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert result.executed == 1 and result.next_due_in is None
    assert world.client().pool.get_work(pool_id, key).status is WorkStatus.INVALID
    assert world.client().stake_manager.active_stake(world.cast.alice.address) == alice_stake - 50 * TOKEN
    note, settled = conn.execute("SELECT note, settled_at FROM validations WHERE work_key = %s", (key,)).fetchone()
    assert settled is not None and "executed by this validator" in note
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).executed == 0  # settled: not looked at again


def test_an_overturned_rejection_is_settled_without_a_slash(world, conn, flush_conn):
    pool_id = _challenge_pool(world)
    key = _rejected_by_us(world, conn, pool_id, "contested")
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).invalidated == 1
    world.validator2.pool.contest_rejection(pool_id, key, hashlib.sha256(b"recomputed: fine").digest())
    assert world.client().pool.get_work(pool_id, key).status is WorkStatus.PENDING

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert (result.overturned, result.executed) == (1, 0)
    (note,) = conn.execute("SELECT note FROM validations WHERE work_key = %s", (key,)).fetchone()
    assert "overturned: on-chain PENDING" in note
    # The overturned verdict cost our validator its slash, credited to the contester.
    assert world.client().pool.reward_balance(world.second.address) == 50 * TOKEN


def test_a_key_without_gas_leaves_its_verdicts_failing_with_the_reason(world, conn, flush_conn):
    keys = world.submit(2)
    cheat = world.submit(1, node="bob")[0]
    decide(world, conn, keys)
    decide(world, conn, [cheat], "invalid", "eos_missing")
    me = world.cast.validator.address
    world.anvil.rpc("anvil_setBalance", [me, "0x0"])

    result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)

    assert (result.failed, result.attested, result.invalidated) == (3, 0, 0)
    assert result.next_due_in == 1.0
    for state, tx, attempts, error, _ in rows(conn, [*keys, cheat]):
        assert (state, tx, attempts) == ("decided", None, 1)
        assert error.startswith(f"InsufficientGas: {me} has 0 ETH for gas (this transaction needs about 0.0")
    assert store.validator_counts(conn, me)["failing"] == 3

    world.anvil.rpc("anvil_setBalance", [me, hex(10**18)])
    again = flush_verdicts(flush_conn, world.validator, **ALL_DUE)
    assert (again.attested, again.invalidated, again.failed) == (2, 1, 0)
    assert store.validator_counts(conn, me)["failing"] == 0


def test_any_error_the_node_answers_leaves_the_verdicts_failing(world, conn, flush_conn):
    keys = world.submit(2)
    decide(world, conn, keys)
    limit = world.w3.eth.get_block("latest")["gasLimit"]
    world.anvil.rpc("evm_setBlockGasLimit", [hex(30_000)])  # no verdict transaction fits in a block
    try:
        result = flush_verdicts(flush_conn, world.validator, **ALL_DUE)
    finally:
        world.anvil.rpc("evm_setBlockGasLimit", [hex(limit)])

    assert (result.failed, result.attested) == (2, 0)
    for state, _, attempts, error, _ in rows(conn, keys):
        assert (state, attempts) == ("decided", 1) and error.startswith("Web3RPCError: ")
    assert store.validator_counts(conn, world.cast.validator.address)["failing"] == 2
    assert flush_verdicts(flush_conn, world.validator, **ALL_DUE).attested == 2
