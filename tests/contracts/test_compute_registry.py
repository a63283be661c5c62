"""ComputeRegistry: providers, node ownership signatures bound to chain and registry,
stake-backed compute units, removal and attestation."""

from __future__ import annotations

import pytest
from eth_account.messages import _hash_eip191_message, encode_typed_data
from web3 import Web3

from proofpool.infra.chain.artifacts import load_artifact
from tests.contracts.conftest import MIN_STAKE, NODE1_UNITS, NODE3_UNITS, PROVIDER_STAKE, STAKE_PER_UNIT, World
from tests.contracts.helpers import (
    ANY,
    NODE_OWNERSHIP_FIELDS,
    OWNERSHIP_DEADLINE,
    TOKEN,
    ZERO_ADDRESS,
    expect_revert,
)

SPECS = b"\x5e" * 32


def _registered_outsider(world: World, stake: int = 0) -> None:
    world.outsider.send(world.c.registry.functions.registerProvider())
    if stake:
        world.c.stake_tokens(world.outsider, stake)


def _add(world: World, provider, node, units: int, signature: bytes, deadline: int = OWNERSHIP_DEADLINE):
    return provider.send(world.c.registry.functions.addNode(node.address, units, SPECS, deadline, signature))


class TestProviders:
    def test_register_emits_and_marks_provider(self, world: World) -> None:
        assert not world.c.registry.functions.isProvider(world.outsider.address).call()
        receipt = world.outsider.send(world.c.registry.functions.registerProvider())
        assert world.c.event(receipt, "ProviderRegistered") == {"provider": world.outsider.address}
        assert world.c.registry.functions.isProvider(world.outsider.address).call()

    def test_register_twice_reverts(self, world: World) -> None:
        with expect_revert("ComputeRegistryProviderAlreadyRegistered", world.provider.address):
            world.provider.send(world.c.registry.functions.registerProvider())


class TestAddNode:
    def test_adds_node_with_units_and_emits(self, world: World) -> None:
        _registered_outsider(world, stake=MIN_STAKE + 5 * STAKE_PER_UNIT)
        signature = world.c.ownership_signature(world.spare_node, world.outsider)
        receipt = _add(world, world.outsider, world.spare_node, 5, signature)
        assert world.c.event(receipt, "NodeAdded") == {
            "provider": world.outsider.address,
            "node": world.spare_node.address,
            "computeUnits": 5,
            "specsHash": SPECS,
            "providerComputeUnits": 5,
        }
        fns = world.c.registry.functions
        assert fns.getNode(world.spare_node.address).call() == [world.outsider.address, 5, SPECS, False, True]
        assert fns.activeNodeProvider(world.spare_node.address).call() == world.outsider.address
        assert fns.providerComputeUnits(world.outsider.address).call() == 5

    def test_unregistered_provider_reverts(self, world: World) -> None:
        signature = world.c.ownership_signature(world.spare_node, world.outsider)
        with expect_revert("ComputeRegistryProviderNotRegistered", world.outsider.address):
            _add(world, world.outsider, world.spare_node, 1, signature)

    def test_zero_node_reverts(self, world: World) -> None:
        fn = world.c.registry.functions.addNode(ZERO_ADDRESS, 1, SPECS, OWNERSHIP_DEADLINE, b"\x00" * 65)
        with expect_revert("ComputeRegistryZeroAddress"):
            world.provider.send(fn)

    def test_zero_units_reverts(self, world: World) -> None:
        signature = world.c.ownership_signature(world.spare_node, world.provider)
        with expect_revert("ComputeRegistryZeroComputeUnits", world.spare_node.address):
            _add(world, world.provider, world.spare_node, 0, signature)

    def test_active_node_cannot_be_claimed_again(self, world: World) -> None:
        signature = world.c.ownership_signature(world.node1, world.provider2)
        with expect_revert("ComputeRegistryNodeAlreadyRegistered", world.node1.address, world.provider.address):
            _add(world, world.provider2, world.node1, 1, signature)

    def test_signature_by_another_key_reverts_with_recovered_signer(self, world: World) -> None:
        signature = world.c.forged_ownership_signature(world.provider, world.provider, world.spare_node)
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, world.provider.address):
            _add(world, world.provider, world.spare_node, 1, signature)

    def test_signature_for_another_provider_reverts(self, world: World) -> None:
        signature = world.c.ownership_signature(world.spare_node, world.provider2)
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, ANY):
            _add(world, world.provider, world.spare_node, 1, signature)

    def test_signature_for_another_chain_is_refused(self, world: World) -> None:
        signature = world.c.ownership_signature(world.spare_node, world.provider, chain_id=1)
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, ANY):
            _add(world, world.provider, world.spare_node, 1, signature)

    def test_signature_for_another_registry_is_refused_here_and_valid_there(self, world: World) -> None:
        other_address = world.admin.sender.deploy(
            load_artifact("ComputeRegistry"), world.c.book.stake_manager, world.admin.address
        )
        signature = world.c.ownership_signature(world.spare_node, world.provider, registry=other_address)
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, ANY):
            _add(world, world.provider, world.spare_node, 1, signature)
        other = world.c.w3.eth.contract(address=other_address, abi=load_artifact("ComputeRegistry").abi)
        world.provider.send(other.functions.registerProvider())
        world.provider.send(other.functions.addNode(world.spare_node.address, 1, SPECS, OWNERSHIP_DEADLINE, signature))
        assert other.functions.activeNodeProvider(world.spare_node.address).call() == world.provider.address

    @pytest.mark.parametrize("signature", [b"", b"\x01" * 10, b"\x00" * 65], ids=["empty", "short", "zeros"])
    def test_malformed_signature_reverts_with_zero_signer(self, world: World, signature: bytes) -> None:
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, ZERO_ADDRESS):
            _add(world, world.provider, world.spare_node, 1, signature)

    def test_without_stake_reverts(self, world: World) -> None:
        _registered_outsider(world)
        signature = world.c.ownership_signature(world.spare_node, world.outsider)
        required = MIN_STAKE + 3 * STAKE_PER_UNIT
        with expect_revert("ComputeRegistryInsufficientStake", world.outsider.address, 0, required):
            _add(world, world.outsider, world.spare_node, 3, signature)

    def test_stake_must_cover_existing_plus_new_units(self, world: World) -> None:
        signature = world.c.ownership_signature(world.spare_node, world.provider)
        units = 100
        required = MIN_STAKE + STAKE_PER_UNIT * (NODE1_UNITS + NODE3_UNITS + units)
        with expect_revert("ComputeRegistryInsufficientStake", world.provider.address, PROVIDER_STAKE, required):
            _add(world, world.provider, world.spare_node, units, signature)

    def test_nodeOwnershipDigest_matches_eip712_typed_data(self, world: World) -> None:
        message = encode_typed_data(
            domain_data={
                "name": "ProofpoolComputeRegistry",
                "version": "1",
                "chainId": world.c.w3.eth.chain_id,
                "verifyingContract": world.c.book.compute_registry,
            },
            message_types={"NodeOwnership": NODE_OWNERSHIP_FIELDS},
            message_data={
                "provider": world.provider.address,
                "node": world.spare_node.address,
                "nonce": 3,
                "deadline": 77,
            },
        )
        fns = world.c.registry.functions
        digest = fns.nodeOwnershipDigest(world.provider.address, world.spare_node.address, 3, 77).call()
        assert bytes(digest) == _hash_eip191_message(message)

    def test_signature_is_refused_after_its_deadline(self, world: World) -> None:
        deadline = world.chain.timestamp() + 100
        signature = world.c.ownership_signature(world.spare_node, world.provider, deadline=deadline)
        world.chain.increase_time(101)
        with expect_revert("ComputeRegistryNodeSignatureExpired", world.spare_node.address, deadline):
            _add(world, world.provider, world.spare_node, 1, signature, deadline)

    def test_signature_is_valid_through_its_deadline_second(self, world: World) -> None:
        deadline = world.chain.timestamp() + 100
        signature = world.c.ownership_signature(world.spare_node, world.provider, deadline=deadline)
        world.chain.set_next_timestamp(deadline)
        world.provider.send(
            world.c.registry.functions.addNode(world.spare_node.address, 1, SPECS, deadline, signature), gas=300_000
        )
        assert world.c.registry.functions.activeNodeProvider(world.spare_node.address).call() == world.provider.address

    def test_a_used_signature_cannot_add_the_node_back_after_its_removal(self, world: World) -> None:
        """The replay: the provider removed a node (a stolen key, say); whoever kept the old
        signature cannot register the node under it again."""
        fns = world.c.registry.functions
        signature = world.c.ownership_signature(world.spare_node, world.provider)
        assert fns.nodeNonce(world.spare_node.address).call() == 0
        _add(world, world.provider, world.spare_node, 1, signature)
        assert fns.nodeNonce(world.spare_node.address).call() == 1
        world.provider.send(fns.removeNode(world.spare_node.address))
        with expect_revert("ComputeRegistryInvalidNodeSignature", world.spare_node.address, ANY):
            _add(world, world.provider, world.spare_node, 1, signature)
        _add(world, world.provider, world.spare_node, 1, world.c.ownership_signature(world.spare_node, world.provider))


class TestRemoveNode:
    def test_remove_releases_units_and_emits(self, world: World) -> None:
        receipt = world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        assert world.c.event(receipt, "NodeRemoved") == {
            "provider": world.provider.address,
            "node": world.node1.address,
            "computeUnits": NODE1_UNITS,
            "providerComputeUnits": NODE3_UNITS,
        }
        fns = world.c.registry.functions
        assert fns.getNode(world.node1.address).call() == [
            world.provider.address,
            NODE1_UNITS,
            b"\x01" * 32,
            False,
            False,
        ]
        assert fns.activeNodeProvider(world.node1.address).call() == ZERO_ADDRESS
        assert fns.providerComputeUnits(world.provider.address).call() == NODE3_UNITS

    def test_unknown_or_removed_node_reverts(self, world: World) -> None:
        with expect_revert("ComputeRegistryUnknownNode", world.spare_node.address):
            world.provider.send(world.c.registry.functions.removeNode(world.spare_node.address))
        world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        with expect_revert("ComputeRegistryUnknownNode", world.node1.address):
            world.provider.send(world.c.registry.functions.removeNode(world.node1.address))

    def test_other_provider_cannot_remove(self, world: World) -> None:
        with expect_revert("ComputeRegistryNotNodeProvider", world.node1.address, world.provider2.address):
            world.provider2.send(world.c.registry.functions.removeNode(world.node1.address))

    def test_removed_node_can_move_to_another_provider_with_a_new_signature(self, world: World) -> None:
        world.attester.send(world.c.registry.functions.attestNode(world.node1.address))
        world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        signature = world.c.ownership_signature(world.node1, world.provider2)
        _add(world, world.provider2, world.node1, 1, signature)
        node = world.c.registry.functions.getNode(world.node1.address).call()
        assert node == [world.provider2.address, 1, SPECS, False, True]


class TestAttestNode:
    def test_attester_marks_node_attested(self, world: World) -> None:
        receipt = world.attester.send(world.c.registry.functions.attestNode(world.node1.address))
        assert world.c.event(receipt, "NodeAttested") == {
            "provider": world.provider.address,
            "node": world.node1.address,
            "attester": world.attester.address,
        }
        assert world.c.registry.functions.getNode(world.node1.address).call()[3] is True

    def test_twice_reverts(self, world: World) -> None:
        world.attester.send(world.c.registry.functions.attestNode(world.node1.address))
        with expect_revert("ComputeRegistryNodeAlreadyAttested", world.node1.address):
            world.attester.send(world.c.registry.functions.attestNode(world.node1.address))

    def test_unknown_node_reverts(self, world: World) -> None:
        with expect_revert("ComputeRegistryUnknownNode", world.spare_node.address):
            world.attester.send(world.c.registry.functions.attestNode(world.spare_node.address))


class TestConstruction:
    def test_links_stake_manager(self, world: World) -> None:
        assert world.c.registry.functions.stakeManager().call() == world.c.book.stake_manager

    @pytest.mark.parametrize("which", ["stake_manager", "admin"])
    def test_zero_address_refused(self, world: World, which: str) -> None:
        stake_manager = ZERO_ADDRESS if which == "stake_manager" else world.c.book.stake_manager
        admin = ZERO_ADDRESS if which == "admin" else world.admin.address
        with expect_revert("ComputeRegistryZeroAddress"):
            world.admin.sender.deploy(load_artifact("ComputeRegistry"), stake_manager, admin)


def test_eip712_domain_and_typehash(world: World) -> None:
    fns = world.c.registry.functions
    domain = fns.eip712Domain().call()
    assert domain[1:5] == ["ProofpoolComputeRegistry", "1", world.c.w3.eth.chain_id, world.c.book.compute_registry]
    assert bytes(fns.NODE_OWNERSHIP_TYPEHASH().call()) == Web3.keccak(
        text="NodeOwnership(address provider,address node,uint256 nonce,uint256 deadline)"
    )


def test_stake_reads_in_whole_tokens(world: World) -> None:
    assert world.c.stake.functions.activeStake(world.provider.address).call() == PROVIDER_STAKE
    assert PROVIDER_STAKE % TOKEN == 0
