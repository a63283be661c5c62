"""TxSender against a real anvil: nonces under threads and processes, timeouts, resync."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import pytest
from eth_account import Account
from web3 import Web3

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.errors import TxTimeout
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender

SINK = "0x000000000000000000000000000000000000dEaD"


def _send_many(url: str, key: str, count: int) -> list[int]:
    sender = TxSender(connect(url), Account.from_key(key))
    return [sender.transfer_eth(SINK, 1)["blockNumber"] for _ in range(count)]


def _nonces_of(w3: Web3, address: str, receipts_blocks: list[int]) -> list[int]:
    nonces = []
    for number in sorted(set(receipts_blocks)):
        block = w3.eth.get_block(number, full_transactions=True)
        nonces += [tx["nonce"] for tx in block["transactions"] if tx["from"] == address]
    return nonces


def test_one_key_from_many_threads_gets_distinct_consecutive_nonces(anvil):
    w3 = connect(anvil.url)
    account = Account.from_key(ANVIL_KEYS[7])
    start = w3.eth.get_transaction_count(account.address)
    with ThreadPoolExecutor(max_workers=4) as pool:
        blocks = [b for chunk in pool.map(lambda _: _send_many(anvil.url, ANVIL_KEYS[7], 6), range(4)) for b in chunk]
    assert len(blocks) == 24
    assert sorted(_nonces_of(w3, account.address, blocks)) == list(range(start, start + 24))


def test_one_key_from_many_processes_loses_no_transaction(anvil):
    w3 = connect(anvil.url)
    account = Account.from_key(ANVIL_KEYS[8])
    start = w3.eth.get_transaction_count(account.address)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.starmap(_send_many, [(anvil.url, ANVIL_KEYS[8], 4)] * 3)
    blocks = [b for chunk in results for b in chunk]
    assert len(blocks) == 12
    assert w3.eth.get_transaction_count(account.address) == start + 12


def test_transactions_sent_behind_the_senders_back_do_not_break_it(anvil):
    w3 = connect(anvil.url)
    account = Account.from_key(ANVIL_KEYS[9])
    sender = TxSender(w3, account)
    sender.transfer_eth(SINK, 1)
    # another client spends the next nonce directly
    nonce = w3.eth.get_transaction_count(account.address, "pending")
    raw = account.sign_transaction(
        {"to": SINK, "value": 1, "gas": 21_000, "gasPrice": w3.eth.gas_price * 2, "nonce": nonce, "chainId": 31337}
    ).raw_transaction
    w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(raw))
    receipt = sender.transfer_eth(SINK, 1)
    assert receipt["status"] == 1
    assert w3.eth.get_transaction(receipt["transactionHash"])["nonce"] == nonce + 1


def test_unmined_transaction_times_out_with_a_clear_error(anvil):
    w3 = connect(anvil.url)
    sender = TxSender(w3, Account.from_key(ANVIL_KEYS[6]), receipt_timeout=0.5)
    w3.provider.make_request("evm_setAutomine", [False])
    try:
        with pytest.raises(TxTimeout, match="not mined"):
            sender.transfer_eth(SINK, 1)
    finally:
        w3.provider.make_request("evm_setAutomine", [True])
        w3.provider.make_request("evm_mine", [])


def test_a_mined_revert_is_replayed_and_named(anvil):
    from proofpool.infra.chain.bindings import PoolToken
    from proofpool.infra.chain.deploy import deploy_contracts
    from proofpool.infra.chain.errors import ContractRevert

    w3 = connect(anvil.url)
    book = deploy_contracts(w3, TxSender(w3, Account.from_key(ANVIL_KEYS[0])))
    outsider = TxSender(w3, Account.from_key(ANVIL_KEYS[5]))
    token = PoolToken(w3, book.pool_token, outsider)
    # an explicit gas limit skips the estimate, so the revert happens on-chain
    with pytest.raises(ContractRevert) as caught:
        outsider.send(token.contract.functions.mint(outsider.address, 1), gas=200_000)
    assert caught.value.name == "AccessControlUnauthorizedAccount"
    assert caught.value.args[0] == outsider.address
    # and the estimate path names the same error before anything is sent
    with pytest.raises(ContractRevert) as early:
        token.mint(outsider.address, 1)
    assert early.value.name == "AccessControlUnauthorizedAccount"


def test_hand_encoded_calls_and_sends_name_their_reverts(anvil):
    from proofpool.infra.chain.bindings import ComputePool
    from proofpool.infra.chain.deploy import deploy_contracts
    from proofpool.infra.chain.errors import ContractRevert

    w3 = connect(anvil.url)
    book = deploy_contracts(w3, TxSender(w3, Account.from_key(ANVIL_KEYS[0])))
    outsider = TxSender(w3, Account.from_key(ANVIL_KEYS[5]))
    pool = ComputePool(w3, book.compute_pool, outsider)
    nonce = w3.eth.get_transaction_count(outsider.address)
    # a pool that does not exist: the estimate reverts, nothing is sent
    with pytest.raises(ContractRevert) as refused:
        pool.submit_work(99, outsider.address, b"\x01" * 32, 10, 0)
    assert refused.value.name == "ComputePoolNotActive"
    assert w3.eth.get_transaction_count(outsider.address) == nonce
    # reads by hand: the same answers as web3's, read-only bindings included
    work = ComputePool(w3, book.compute_pool).get_work(1, b"\x01" * 32)
    assert work.status.name == "NONE"
    assert work.node == "0x0000000000000000000000000000000000000000"
    latest = pool.latest_checkpoint(99)
    assert (latest.version, latest.manifest_sha256, latest.uri, latest.published_at) == tuple(
        pool.contract.functions.latestCheckpoint(99).call()
    )


def test_cached_fees_that_fell_short_are_fetched_again(anvil):
    import time

    w3 = connect(anvil.url)
    sender = TxSender(w3, Account.from_key(ANVIL_KEYS[4]))
    first = sender.transfer_eth(SINK, 1)
    assert sender._fee_cache is not None  # the first try's fees are kept for the next transaction
    # fees below the base fee (as if it had risen since): refused, bumped, fetched again
    sender._fee_cache = (time.monotonic(), {"maxFeePerGas": 1, "maxPriorityFeePerGas": 1})
    second = sender.transfer_eth(SINK, 1)
    assert first["status"] == second["status"] == 1
    assert w3.eth.get_transaction(second["transactionHash"])["maxFeePerGas"] > 1
    assert sender._fee_cache is None
