"""The indexer through the challenge game on a real anvil and PostgreSQL: a rejection waiting for its
window is `rejected`, an overturned one is back where it was, an executed one is `invalid`; the
validators' slashes reach the reward ledger; and a rebuild from raw events gives the same rows."""

from __future__ import annotations

import dataclasses
import hashlib

import psycopg
from eth_account import Account
from proofpool.backend.indexer.rebuild import rebuild_projections
from proofpool.devnet.market import Cast, devnet_pool_params, onboard_node, open_market
from web3 import Web3

from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts, grant_validator
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from tests.fixtures.indexer import PROJECTIONS, make_indexer, query, snapshot

WINDOW = 600


def test_rejections_overturns_and_validator_slashes_are_projected(fresh_anvil, clean_database):
    cast = Cast()
    w3 = connect(fresh_anvil.url)
    book = deploy_contracts(w3, TxSender(w3, cast.admin))
    admin = ChainClient.build(w3, book, cast.admin)
    params = dataclasses.replace(devnet_pool_params(cast), challenge_window=WINDOW, contest_quorum=1)
    pool_id = open_market(admin, cast, params)
    bob = onboard_node(admin, cast.bob, cast.bob_node, 200 * TOKEN, 4, pools=(pool_id,))
    expiry = w3.eth.get_block("latest")["timestamp"] + 3600
    bob.pool.join_pool(
        sign_invite(cast.manager, pool_id, cast.bob_node.address, 1, expiry, w3.eth.chain_id, book.compute_pool)
    )
    contester = Account.from_key(Web3.keccak(text="proofpool-test-contester"))
    TxSender(w3, cast.admin).transfer_eth(contester.address, 10**18)
    grant_validator(w3, TxSender(w3, cast.admin), book, contester.address)

    node, validator = admin.as_account(cast.bob_node), admin.as_account(cast.validator)
    overturned, executed, waiting = (hashlib.sha256(label).digest() for label in (b"over", b"exec", b"wait"))
    for key in (overturned, executed, waiting):
        node.pool.submit_work(pool_id, cast.bob_node.address, key, 5, 0)
        validator.pool.invalidate_work(pool_id, key, "made_up", hashlib.sha256(key).digest())
    admin.as_account(contester).pool.contest_rejection(pool_id, overturned, hashlib.sha256(b"fine").digest())
    late = hashlib.sha256(b"late").digest()
    node.pool.submit_work(pool_id, cast.bob_node.address, late, 5, 0)  # before the execution ejects the node
    w3.provider.make_request("evm_increaseTime", [WINDOW])
    w3.provider.make_request("evm_mine", [])
    admin.pool.execute_rejection(pool_id, executed)
    # a rejection made after the window moved on waits in its own window
    admin.as_account(contester).pool.invalidate_work(pool_id, late, "made_up", hashlib.sha256(late).digest())
    # The pool closes; after its wind-up the creator takes the budget back and the overturned,
    # never re-judged file expires.
    manager = admin.as_account(cast.manager)
    manager.pool.close_pool(pool_id)
    w3.provider.make_request("evm_increaseTime", [params.dispute_window])
    w3.provider.make_request("evm_mine", [])
    manager.pool.refund_budget(pool_id)
    admin.pool.expire_work(pool_id, [overturned])

    make_indexer(w3, book, clean_database, batch_blocks=2).run(once=True)

    statuses = dict(query(clean_database, "SELECT work_key, status FROM submissions WHERE pool_id = %s", (pool_id,)))
    assert {bytes(k): s for k, s in statuses.items()} == {
        overturned: "expired",
        executed: "invalid",
        waiting: "rejected",
        late: "rejected",
    }
    for key, status in statuses.items():
        assert admin.pool.get_work(pool_id, bytes(key)).status is WorkStatus[status.upper()]
    balances = dict(
        query(
            clean_database,
            "SELECT account, sum(CASE WHEN kind = 'withdrawal' THEN -amount ELSE amount END) FROM rewards"
            " GROUP BY account",
        )
    )
    ((indexed_budget,),) = query(clean_database, "SELECT budget FROM pools WHERE pool_id = %s", (pool_id,))
    assert int(indexed_budget) == admin.pool.get_pool(pool_id).budget == 0
    for account in (cast.validator.address, contester.address):
        assert int(balances.get(account, 0)) == admin.pool.reward_balance(account) > 0, account

    incremental = snapshot(clean_database)
    with psycopg.connect(clean_database, autocommit=True) as conn, conn.transaction():
        rebuild_projections(conn)
    assert {t: snapshot(clean_database)[t] for t in PROJECTIONS} == {t: incremental[t] for t in PROJECTIONS}
