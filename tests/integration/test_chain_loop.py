"""The demo's chain loop end to end on anvil, checked through decoded events."""

from __future__ import annotations

import pytest
from proofpool.devnet.chain_loop import balances_table, events_table, run_chain_loop
from proofpool.devnet.market import Cast
from rich.console import Console

from proofpool.infra.chain.bindings import WorkStatus, reason_text
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN


def test_chain_loop_slashes_the_cheater_and_pays_the_honest_provider(anvil):
    snapshot = anvil.rpc("evm_snapshot")
    try:
        cast = Cast()
        w3 = connect(anvil.url)
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        lines: list[str] = []
        result = run_chain_loop(ChainClient.build(w3, book, cast.admin), cast, lines.append)

        pool = result.client.pool
        assert pool.get_work(result.pool_id, result.honest_key).status is WorkStatus.FINALIZED
        assert any("ComputePoolDisputeWindowOpen" in line for line in lines)

        by_name: dict[str, list] = {}
        for event in result.events:
            by_name.setdefault(event.name, []).append(event)
        invalidated = by_name["WorkInvalidated"][0]
        assert invalidated["workKey"] == result.cheating_key
        assert invalidated["node"] == cast.bob_node.address
        assert reason_text(invalidated["reason"]) == "sampling_mismatch"
        split = by_name["SlashDistributed"][0]
        assert (split["validatorShare"], split["treasuryShare"]) == (25 * TOKEN, 25 * TOKEN)
        finalized = by_name["WorkFinalized"][0]
        assert (finalized["provider"], finalized["reward"]) == (cast.alice.address, 512 * TOKEN // 100)
        assert [e["account"] for e in by_name["RewardsWithdrawn"]] == [cast.alice.address, cast.validator.address]
        # every event carries where it came from, as the ledger will need
        assert all(e.tx_hash and e.block_number >= book.deploy_block for e in result.events)
        assert len({(e.tx_hash, e.log_index) for e in result.events}) == len(result.events)

        console = Console(record=True, width=200)
        console.print(balances_table(result, cast))
        console.print(events_table(result, cast))
        text = console.export_text()
        assert "SlashDistributed" in text and "25.5" in text  # validator: 25 slash share + 0.5 fee
    finally:
        anvil.rpc("evm_revert", [snapshot])


def test_registry_views_agree_with_the_off_chain_signer(anvil):
    from proofpool.infra.chain.signing import sign_node_ownership

    snapshot = anvil.rpc("evm_snapshot")
    try:
        cast = Cast()
        w3 = connect(anvil.url)
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        client = ChainClient.build(w3, book, cast.admin)
        provider = client.as_account(cast.alice)
        assert provider.registry.active_node_provider(cast.alice_node.address) is None
        client.token.mint(cast.alice.address, 1_000 * TOKEN)
        provider.registry.register_provider()
        provider.token.approve(provider.stake_manager.address, 200 * TOKEN)
        provider.stake_manager.stake(200 * TOKEN)
        deadline = w3.eth.get_block("latest")["timestamp"] + 600
        proof = sign_node_ownership(
            cast.alice_node, cast.alice.address, client.chain_id, client.registry.address, nonce=0, deadline=deadline
        )
        digest = client.registry.node_ownership_digest(cast.alice.address, cast.alice_node.address, 0, deadline)
        assert w3.eth.account._recover_hash(digest, signature=proof.signature) == cast.alice_node.address
        provider.registry.add_node(2, b"\x00" * 32, proof)
        assert provider.registry.active_node_provider(cast.alice_node.address) == cast.alice.address
        assert client.registry.get_node(cast.alice_node.address).compute_units == 2
        assert client.registry.node_nonce(cast.alice_node.address) == 1
        # the same signature cannot add the node back once its provider removed it
        provider.registry.remove_node(cast.alice_node.address)
        with pytest.raises(ContractRevert, match="ComputeRegistryInvalidNodeSignature"):
            provider.registry.add_node(2, b"\x00" * 32, proof)
    finally:
        anvil.rpc("evm_revert", [snapshot])
