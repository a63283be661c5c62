"""ComputePool: pool life cycle, invite-only membership, submissions, verdicts, slashing,
settlement after the dispute window, reward withdrawal and checkpoints."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from eth_account.messages import _hash_eip191_message, encode_typed_data
from web3 import Web3

from proofpool.infra.chain.artifacts import Artifact, load_artifact
from tests.contracts.conftest import (
    BUDGET,
    DISPUTE_WINDOW,
    MODEL_URI,
    POOL_ID,
    PROVIDER_STAKE,
    REWARD_PER_UNIT,
    SLASH_AMOUNT,
    SLASH_SHARE_BPS,
    UNBONDING_PERIOD,
    VALIDATOR_FEE,
    World,
)
from tests.contracts.helpers import (
    ANY,
    EVIDENCE,
    MEMBER_ACTIVE,
    MEMBER_EJECTED,
    MEMBER_LEFT,
    MEMBER_SLASHED,
    POOL_ACTIVE,
    POOL_CLOSED,
    POOL_CREATED,
    TOKEN,
    WORK_ACCEPTED,
    WORK_FINALIZED,
    WORK_FORFEITED,
    WORK_INVALID,
    WORK_NONE,
    WORK_PENDING,
    ZERO_ADDRESS,
    Actor,
    expect_revert,
    reason,
    work_key,
)

FAR = 10**10  # an expiry far in the future
POOL_CREATED_TOPIC = Web3.keccak(
    text="PoolCreated(uint256,address,address,address,string,bytes32,uint256,uint256,uint256,uint64,uint16)"
)
SLASH_TO_VALIDATOR = SLASH_AMOUNT * SLASH_SHARE_BPS // 10_000
SLASH_TO_TREASURY = SLASH_AMOUNT - SLASH_TO_VALIDATOR


def make_pool(world: World, budget: int = 0, start: bool = True, **overrides: object) -> int:
    """Create (and fund and start) another pool from `creator`, approved by both providers; returns its id."""
    fns = world.c.pool.functions
    world.creator.send(fns.createPool(world.pool_params(**overrides)))
    pool_id = fns.poolCount().call()
    if budget:
        world.creator.send(world.c.token.functions.approve(world.c.book.compute_pool, budget))
        world.creator.send(fns.fundPool(pool_id, budget))
    if start:
        world.creator.send(fns.startPool(pool_id))
    for provider in (world.provider, world.provider2):  # both providers' nodes may join it
        provider.send(fns.approvePool(pool_id, PROVIDER_STAKE))
    return pool_id


def submitted(world: World, label: str, node: Actor | None = None, units: int = 10, pool_id: int = POOL_ID) -> bytes:
    key = work_key(label)
    world.c.submit(node or world.node1, pool_id, key, units)
    return key


def accepted(world: World, label: str, node: Actor | None = None, units: int = 10, pool_id: int = POOL_ID) -> bytes:
    key = submitted(world, label, node, units, pool_id)
    world.c.attest(world.validator, pool_id, [key])
    return key


def attested_at(world: World, key: bytes, pool_id: int = POOL_ID) -> int:
    return world.c.work(pool_id, key)[6]


def pool_info(world: World, pool_id: int = POOL_ID) -> tuple:
    return tuple(world.c.pool.functions.getPool(pool_id).call())


def budget(world: World, pool_id: int = POOL_ID) -> int:
    return pool_info(world, pool_id)[11]


def rewards(world: World, who: Actor) -> int:
    return world.c.pool.functions.rewardBalance(who.address).call()


class TestConstruction:
    def test_links(self, world: World) -> None:
        fns = world.c.pool.functions
        assert fns.token().call() == world.c.book.pool_token
        assert fns.stakeManager().call() == world.c.book.stake_manager
        assert fns.registry().call() == world.c.book.compute_registry

    @pytest.mark.parametrize("position", range(4), ids=["token", "stake_manager", "registry", "admin"])
    def test_zero_address_refused(self, world: World, position: int) -> None:
        book = world.c.book
        args = [book.pool_token, book.stake_manager, book.compute_registry, world.admin.address]
        args[position] = ZERO_ADDRESS
        with expect_revert("ComputePoolZeroAddress"):
            world.admin.sender.deploy(load_artifact("ComputePool"), *args)

    def test_token_must_be_the_stake_token(self, world: World) -> None:
        other_token = world.admin.sender.deploy(load_artifact("PoolToken"), world.admin.address)
        book = world.c.book
        with expect_revert("ComputePoolTokenMismatch", other_token, book.pool_token):
            world.admin.sender.deploy(
                load_artifact("ComputePool"),
                other_token,
                book.stake_manager,
                book.compute_registry,
                world.admin.address,
            )


class TestCreatePool:
    def test_creates_pool_with_next_id_and_emits_every_parameter(self, world: World) -> None:
        params = world.pool_params(modelUri="s3://tasks/v2", disputeWindow=60, validatorSlashShareBps=10_000)
        receipt = world.outsider.send(world.c.pool.functions.createPool(params))
        assert world.c.pool.functions.poolCount().call() == 2
        assert world.c.event(receipt, "PoolCreated") == {
            "poolId": 2,
            "creator": world.outsider.address,
            "manager": world.manager.address,
            "treasury": world.treasury.address,
            "modelUri": "s3://tasks/v2",
            "specSha256": bytes(32),
            "rewardPerUnit": REWARD_PER_UNIT,
            "validatorFee": VALIDATOR_FEE,
            "slashAmount": SLASH_AMOUNT,
            "disputeWindow": 60,
            "validatorSlashShareBps": 10_000,
        }
        assert pool_info(world, 2) == (
            world.outsider.address,
            world.manager.address,
            world.treasury.address,
            POOL_CREATED,
            "s3://tasks/v2",
            bytes(32),
            REWARD_PER_UNIT,
            VALIDATOR_FEE,
            SLASH_AMOUNT,
            60,
            10_000,
            0,
        )

    def test_spec_hash_is_stored_and_emitted_as_given(self, world: World) -> None:
        spec = hashlib.sha256(b"a pool spec").digest()
        params = world.pool_params(modelUri=f"spec://{spec.hex()}", specSha256=spec)
        receipt = world.creator.send(world.c.pool.functions.createPool(params))
        created = world.c.event(receipt, "PoolCreated")
        assert (created["poolId"], created["modelUri"], created["specSha256"]) == (2, f"spec://{spec.hex()}", spec)
        assert pool_info(world, 2)[4:6] == (f"spec://{spec.hex()}", spec)
        assert pool_info(world, POOL_ID)[5] == bytes(32)  # the other pool keeps its own (none)

    def test_the_contract_does_not_parse_the_model_uri(self, world: World) -> None:
        """Any specSha256 goes with any URI on-chain: the roles refuse a pool whose two disagree."""
        spec = b"\x42" * 32
        world.creator.send(world.c.pool.functions.createPool(world.pool_params(specSha256=spec)))
        assert pool_info(world, 2)[4:6] == (MODEL_URI, spec)

    def test_pool_created_topics_are_pool_id_manager_and_spec_hash(self, world: World) -> None:
        spec = hashlib.sha256(b"another spec").digest()
        receipt = world.outsider.send(world.c.pool.functions.createPool(world.pool_params(specSha256=spec)))
        [log] = [entry for entry in receipt["logs"] if entry["topics"][0] == POOL_CREATED_TOPIC]
        assert [bytes(topic) for topic in log["topics"][1:]] == [
            (2).to_bytes(32, "big"),
            bytes(12) + bytes.fromhex(world.manager.address[2:]),
            spec,
        ]

    def test_logs_filtered_by_spec_hash_find_exactly_its_pools(self, world: World) -> None:
        spec, other = hashlib.sha256(b"spec a").digest(), hashlib.sha256(b"spec b").digest()
        for chosen in (spec, other, spec):
            world.creator.send(world.c.pool.functions.createPool(world.pool_params(specSha256=chosen)))
        logs = world.c.w3.eth.get_logs(
            {
                "address": world.c.book.compute_pool,
                "fromBlock": 0,
                "toBlock": "latest",
                "topics": [Web3.to_hex(POOL_CREATED_TOPIC), None, None, Web3.to_hex(spec)],
            }
        )
        assert [int.from_bytes(bytes(log["topics"][1]), "big") for log in logs] == [2, 4]

    def test_world_pool_is_active_and_funded(self, world: World) -> None:
        info = pool_info(world)
        assert (info[0], info[3], info[4], info[11]) == (world.creator.address, POOL_ACTIVE, MODEL_URI, BUDGET)

    @pytest.mark.parametrize("field", ["manager", "treasury"])
    def test_zero_manager_or_treasury_refused(self, world: World, field: str) -> None:
        with expect_revert("ComputePoolZeroAddress"):
            world.creator.send(world.c.pool.functions.createPool(world.pool_params(**{field: ZERO_ADDRESS})))

    @pytest.mark.parametrize("window", [UNBONDING_PERIOD, UNBONDING_PERIOD + 1])
    def test_dispute_window_must_be_shorter_than_unbonding(self, world: World, window: int) -> None:
        with expect_revert("ComputePoolInvalidDisputeWindow", window, UNBONDING_PERIOD):
            world.creator.send(world.c.pool.functions.createPool(world.pool_params(disputeWindow=window)))

    def test_slash_share_above_100_percent_refused(self, world: World) -> None:
        with expect_revert("ComputePoolInvalidSlashShare", 10_001):
            world.creator.send(world.c.pool.functions.createPool(world.pool_params(validatorSlashShareBps=10_001)))


class TestFundStartClose:
    def test_anyone_funds_and_budget_grows(self, world: World) -> None:
        world.outsider.send(world.c.token.functions.approve(world.c.book.compute_pool, 5 * TOKEN))
        before = world.c.balance(world.c.book.compute_pool)
        receipt = world.outsider.send(world.c.pool.functions.fundPool(POOL_ID, 5 * TOKEN))
        assert world.c.event(receipt, "PoolFunded") == {
            "poolId": POOL_ID,
            "funder": world.outsider.address,
            "amount": 5 * TOKEN,
            "budget": BUDGET + 5 * TOKEN,
        }
        assert budget(world) == BUDGET + 5 * TOKEN
        assert world.c.balance(world.c.book.compute_pool) == before + 5 * TOKEN

    def test_fund_unknown_pool_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolUnknownPool", 99):
            world.creator.send(world.c.pool.functions.fundPool(99, TOKEN))

    def test_fund_zero_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolZeroAmount"):
            world.creator.send(world.c.pool.functions.fundPool(POOL_ID, 0))

    def test_fund_closed_pool_reverts(self, world: World) -> None:
        world.creator.send(world.c.pool.functions.closePool(POOL_ID))
        with expect_revert("ComputePoolClosed", POOL_ID):
            world.creator.send(world.c.pool.functions.fundPool(POOL_ID, TOKEN))

    @pytest.mark.parametrize("who", ["creator", "manager"])
    def test_creator_or_manager_starts(self, world: World, who: str) -> None:
        pool_id = make_pool(world, start=False)
        actor = getattr(world, who)
        receipt = actor.send(world.c.pool.functions.startPool(pool_id))
        assert world.c.event(receipt, "PoolStarted") == {"poolId": pool_id, "by": actor.address}
        assert pool_info(world, pool_id)[3] == POOL_ACTIVE

    def test_start_twice_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolAlreadyStarted", POOL_ID, POOL_ACTIVE):
            world.creator.send(world.c.pool.functions.startPool(POOL_ID))

    def test_start_or_close_unknown_pool_reverts(self, world: World) -> None:
        for fn in (world.c.pool.functions.startPool(99), world.c.pool.functions.closePool(99)):
            with expect_revert("ComputePoolUnknownPool", 99):
                world.creator.send(fn)

    @pytest.mark.parametrize("who", ["creator", "manager"])
    def test_close_blocks_joins_and_submissions(self, world: World, who: str) -> None:
        actor = getattr(world, who)
        receipt = actor.send(world.c.pool.functions.closePool(POOL_ID))
        assert world.c.event(receipt, "PoolClosed") == {"poolId": POOL_ID, "by": actor.address}
        with expect_revert("ComputePoolNotActive", POOL_ID, POOL_CLOSED):
            world.c.join(world.provider, world.manager, POOL_ID, world.node3, 77, FAR)
        with expect_revert("ComputePoolNotActive", POOL_ID, POOL_CLOSED):
            world.c.submit(world.node1, POOL_ID, work_key("late"))
        with expect_revert("ComputePoolClosed", POOL_ID):
            actor.send(world.c.pool.functions.closePool(POOL_ID))
        with expect_revert("ComputePoolAlreadyStarted", POOL_ID, POOL_CLOSED):
            actor.send(world.c.pool.functions.startPool(POOL_ID))

    def test_created_pool_can_close_without_starting(self, world: World) -> None:
        pool_id = make_pool(world, start=False)
        world.creator.send(world.c.pool.functions.closePool(pool_id))
        assert pool_info(world, pool_id)[3] == POOL_CLOSED

    def test_work_submitted_before_close_still_settles(self, world: World) -> None:
        key = submitted(world, "before-close")
        world.creator.send(world.c.pool.functions.closePool(POOL_ID))
        world.c.attest(world.validator, POOL_ID, [key])
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        assert world.c.work(POOL_ID, key)[2] == WORK_FINALIZED


class TestJoin:
    def test_provider_joins_its_node_with_invite(self, world: World) -> None:
        fns = world.c.pool.functions
        digest = bytes(fns.inviteDigest(POOL_ID, world.node3.address, 7, FAR).call())
        assert not fns.isInviteUsed(digest).call()
        receipt = world.c.join(world.provider, world.manager, POOL_ID, world.node3, 7, FAR)
        assert world.c.event(receipt, "NodeJoined") == {
            "poolId": POOL_ID,
            "node": world.node3.address,
            "provider": world.provider.address,
            "inviteDigest": digest,
        }
        assert world.c.member(POOL_ID, world.node3) == (
            world.provider.address,
            MEMBER_ACTIVE,
            False,
            world.chain.timestamp(),
        )
        assert fns.isInviteUsed(digest).call()

    def test_eip712_domain_and_typehash(self, world: World) -> None:
        fns = world.c.pool.functions
        domain = fns.eip712Domain().call()
        assert domain[1:5] == ["ProofpoolComputePool", "1", world.c.w3.eth.chain_id, world.c.book.compute_pool]
        invite_type = "Invite(uint256 poolId,address node,uint256 nonce,uint256 expiry)"
        assert bytes(fns.INVITE_TYPEHASH().call()) == Web3.keccak(text=invite_type)

    def test_invite_digest_matches_eip712_typed_data(self, world: World) -> None:
        message = encode_typed_data(
            domain_data={
                "name": "ProofpoolComputePool",
                "version": "1",
                "chainId": world.c.w3.eth.chain_id,
                "verifyingContract": world.c.book.compute_pool,
            },
            message_types={
                "Invite": [
                    {"name": "poolId", "type": "uint256"},
                    {"name": "node", "type": "address"},
                    {"name": "nonce", "type": "uint256"},
                    {"name": "expiry", "type": "uint256"},
                ]
            },
            message_data={"poolId": POOL_ID, "node": world.node3.address, "nonce": 7, "expiry": FAR},
        )
        digest = world.c.pool.functions.inviteDigest(POOL_ID, world.node3.address, 7, FAR).call()
        assert bytes(digest) == _hash_eip191_message(message)

    def test_expired_invite_reverts_before_any_other_check(self, world: World) -> None:
        expiry = world.chain.timestamp() - 1
        fn = world.c.pool.functions.joinPool(POOL_ID, world.spare_node.address, 1, expiry, b"garbage")
        with expect_revert("ComputePoolInviteExpired", POOL_ID, world.spare_node.address, expiry):
            world.outsider.send(fn)

    def test_invite_is_valid_through_its_expiry_second(self, world: World) -> None:
        expiry = world.chain.timestamp() + 100
        signature = world.c.invite(world.manager, POOL_ID, world.node3, 7, expiry)
        world.chain.set_next_timestamp(expiry)
        world.provider.send(
            world.c.pool.functions.joinPool(POOL_ID, world.node3.address, 7, expiry, signature), gas=300_000
        )
        assert world.c.member(POOL_ID, world.node3)[1] == MEMBER_ACTIVE

    def test_invite_cannot_be_reused(self, world: World) -> None:
        world.c.join(world.provider, world.manager, POOL_ID, world.node3, 7, FAR)
        world.provider.send(world.c.pool.functions.leavePool(POOL_ID, world.node3.address))
        digest = bytes(world.c.pool.functions.inviteDigest(POOL_ID, world.node3.address, 7, FAR).call())
        with expect_revert("ComputePoolInviteAlreadyUsed", digest):
            world.c.join(world.provider, world.manager, POOL_ID, world.node3, 7, FAR)
        world.c.join(world.provider, world.manager, POOL_ID, world.node3, 8, FAR)  # a fresh invite works

    def test_invite_signed_by_someone_else_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolInvalidInviteSigner", POOL_ID, world.creator.address, world.manager.address):
            world.c.join(world.provider, world.creator, POOL_ID, world.node3, 7, FAR)

    @pytest.mark.parametrize("domain", [{"chain_id": 1}, {"contract": "0x" + "11" * 20}], ids=["chain", "contract"])
    def test_invite_for_another_domain_reverts(self, world: World, domain: dict) -> None:
        signature = world.c.invite(world.manager, POOL_ID, world.node3, 7, FAR, **domain)
        fn = world.c.pool.functions.joinPool(POOL_ID, world.node3.address, 7, FAR, signature)
        with expect_revert("ComputePoolInvalidInviteSigner", POOL_ID, ANY, world.manager.address):
            world.provider.send(fn)

    def test_invite_for_another_node_reverts(self, world: World) -> None:
        signature = world.c.invite(world.manager, POOL_ID, world.spare_node, 7, FAR)
        fn = world.c.pool.functions.joinPool(POOL_ID, world.node3.address, 7, FAR, signature)
        with expect_revert("ComputePoolInvalidInviteSigner", POOL_ID, ANY, world.manager.address):
            world.provider.send(fn)

    def test_malformed_invite_signature_reverts_with_zero_signer(self, world: World) -> None:
        fn = world.c.pool.functions.joinPool(POOL_ID, world.node3.address, 7, FAR, b"\x01" * 10)
        with expect_revert("ComputePoolInvalidInviteSigner", POOL_ID, ZERO_ADDRESS, world.manager.address):
            world.provider.send(fn)

    def test_invite_to_unknown_pool_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolInvalidInviteSigner", 99, world.manager.address, ZERO_ADDRESS):
            world.c.join(world.provider, world.manager, 99, world.node3, 7, FAR)

    def test_blacklisted_node_cannot_join(self, world: World) -> None:
        world.manager.send(world.c.pool.functions.blacklistNode(POOL_ID, world.node3.address))
        with expect_revert("ComputePoolNodeBlacklisted", POOL_ID, world.node3.address):
            world.c.join(world.provider, world.manager, POOL_ID, world.node3, 7, FAR)

    def test_slashed_node_cannot_rejoin(self, world: World) -> None:
        key = submitted(world, "cheat")
        world.validator.send(world.c.pool.functions.invalidateWork(POOL_ID, key, reason("toploc"), EVIDENCE))
        with expect_revert("ComputePoolNodeSlashed", POOL_ID, world.node1.address):
            world.c.join(world.provider, world.manager, POOL_ID, world.node1, 7, FAR)

    def test_node_not_in_registry_cannot_join(self, world: World) -> None:
        with expect_revert("ComputePoolNodeInactive", world.spare_node.address):
            world.c.join(world.provider, world.manager, POOL_ID, world.spare_node, 7, FAR)

    def test_the_node_may_join_itself_under_its_provider(self, world: World) -> None:
        receipt = world.c.join(world.node3, world.manager, POOL_ID, world.node3, 7, FAR)
        joined = world.c.event(receipt, "NodeJoined")
        assert (joined["node"], joined["provider"]) == (world.node3.address, world.provider.address)
        assert world.c.member(POOL_ID, world.node3)[:2] == (world.provider.address, MEMBER_ACTIVE)

    def test_only_the_nodes_provider_may_join_it(self, world: World) -> None:
        with expect_revert("ComputePoolNotNodeProvider", POOL_ID, world.node3.address, world.provider2.address):
            world.c.join(world.provider2, world.manager, POOL_ID, world.node3, 7, FAR)

    def test_pool_must_be_active(self, world: World) -> None:
        pool_id = make_pool(world, start=False)
        with expect_revert("ComputePoolNotActive", pool_id, POOL_CREATED):
            world.c.join(world.provider, world.manager, pool_id, world.node3, 7, FAR)

    def test_member_cannot_join_again(self, world: World) -> None:
        with expect_revert("ComputePoolAlreadyMember", POOL_ID, world.node1.address):
            world.c.join(world.provider, world.manager, POOL_ID, world.node1, 7, FAR)

    def test_node_stays_bound_to_its_first_provider_in_a_pool(self, world: World) -> None:
        world.provider.send(world.c.pool.functions.leavePool(POOL_ID, world.node1.address))
        world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        world.c.add_node(world.provider2, world.node1, 1)
        with expect_revert(
            "ComputePoolProviderMismatch", POOL_ID, world.node1.address, world.provider.address, world.provider2.address
        ):
            world.c.join(world.provider2, world.manager, POOL_ID, world.node1, 7, FAR)

    @pytest.mark.parametrize("removal", ["leave", "eject"])
    def test_node_can_rejoin_after_leaving_or_ejection(self, world: World, removal: str) -> None:
        fns = world.c.pool.functions
        if removal == "leave":
            world.provider.send(fns.leavePool(POOL_ID, world.node1.address))
        else:
            world.manager.send(fns.ejectNode(POOL_ID, world.node1.address))
        world.c.join(world.provider, world.manager, POOL_ID, world.node1, 7, FAR)
        assert world.c.member(POOL_ID, world.node1)[1] == MEMBER_ACTIVE


class TestLeaveEjectBlacklist:
    def test_provider_takes_node_out(self, world: World) -> None:
        receipt = world.provider.send(world.c.pool.functions.leavePool(POOL_ID, world.node1.address))
        assert world.c.event(receipt, "NodeLeft") == {
            "poolId": POOL_ID,
            "node": world.node1.address,
            "provider": world.provider.address,
        }
        assert world.c.member(POOL_ID, world.node1)[:3] == (world.provider.address, MEMBER_LEFT, False)
        with expect_revert("ComputePoolNotMember", POOL_ID, world.node1.address):
            world.c.submit(world.node1, POOL_ID, work_key("after-leave"))

    def test_leave_by_non_member_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolNotMember", POOL_ID, world.node3.address):
            world.provider.send(world.c.pool.functions.leavePool(POOL_ID, world.node3.address))

    def test_manager_ejects_member(self, world: World) -> None:
        receipt = world.manager.send(world.c.pool.functions.ejectNode(POOL_ID, world.node1.address))
        assert world.c.event(receipt, "NodeEjected") == {
            "poolId": POOL_ID,
            "node": world.node1.address,
            "provider": world.provider.address,
            "slashed": False,
        }
        assert world.c.member(POOL_ID, world.node1)[1] == MEMBER_EJECTED

    def test_eject_non_member_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolNotMember", POOL_ID, world.node3.address):
            world.manager.send(world.c.pool.functions.ejectNode(POOL_ID, world.node3.address))

    def test_blacklist_member_ejects_it(self, world: World) -> None:
        receipt = world.manager.send(world.c.pool.functions.blacklistNode(POOL_ID, world.node1.address))
        assert world.c.event(receipt, "NodeBlacklisted") == {"poolId": POOL_ID, "node": world.node1.address}
        assert world.c.event(receipt, "NodeEjected")["slashed"] is False
        assert world.c.member(POOL_ID, world.node1)[1:3] == (MEMBER_EJECTED, True)
        assert world.c.pool.functions.isBlacklisted(POOL_ID, world.node1.address).call()

    def test_blacklist_unknown_node_only_bars_it(self, world: World) -> None:
        receipt = world.manager.send(world.c.pool.functions.blacklistNode(POOL_ID, world.spare_node.address))
        assert [e.name for e in world.c.events(receipt)] == ["NodeBlacklisted"]
        assert world.c.pool.functions.isBlacklisted(POOL_ID, world.spare_node.address).call()

    def test_blacklist_twice_reverts(self, world: World) -> None:
        world.manager.send(world.c.pool.functions.blacklistNode(POOL_ID, world.node3.address))
        with expect_revert("ComputePoolNodeAlreadyBlacklisted", POOL_ID, world.node3.address):
            world.manager.send(world.c.pool.functions.blacklistNode(POOL_ID, world.node3.address))

    @pytest.mark.parametrize("removal", ["leave", "eject"])
    def test_work_of_a_node_that_left_or_was_ejected_is_still_paid(self, world: World, removal: str) -> None:
        key = accepted(world, "honest")
        if removal == "leave":
            world.provider.send(world.c.pool.functions.leavePool(POOL_ID, world.node1.address))
        else:
            world.manager.send(world.c.pool.functions.ejectNode(POOL_ID, world.node1.address))
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        assert rewards(world, world.provider) == 10 * REWARD_PER_UNIT


class TestSubmitWork:
    def test_records_pending_work_and_emits(self, world: World) -> None:
        key = work_key("rollout-1")
        receipt = world.c.submit(world.node1, POOL_ID, key, units=321, version=7)
        now = world.chain.timestamp()
        assert world.c.event(receipt, "WorkSubmitted") == {
            "poolId": POOL_ID,
            "workKey": key,
            "node": world.node1.address,
            "provider": world.provider.address,
            "workUnits": 321,
            "modelVersion": 7,
        }
        assert world.c.work(POOL_ID, key) == (
            world.node1.address,
            world.provider.address,
            WORK_PENDING,
            321,
            7,
            now,
            now,
            ZERO_ADDRESS,
        )

    def test_unknown_work_reads_as_none(self, world: World) -> None:
        assert world.c.work(POOL_ID, work_key("nothing")) == (
            ZERO_ADDRESS,
            ZERO_ADDRESS,
            WORK_NONE,
            0,
            0,
            0,
            0,
            ZERO_ADDRESS,
        )

    @pytest.mark.parametrize("caller", ["provider", "node2", "manager"])
    def test_must_be_sent_by_the_node_key(self, world: World, caller: str) -> None:
        actor = getattr(world, caller)
        fn = world.c.pool.functions.submitWork(POOL_ID, world.node1.address, work_key("x"), 10, 1)
        with expect_revert("ComputePoolCallerNotNode", world.node1.address, actor.address):
            actor.send(fn)

    def test_zero_units_reverts(self, world: World) -> None:
        key = work_key("empty")
        with expect_revert("ComputePoolZeroWorkUnits", POOL_ID, key):
            world.c.submit(world.node1, POOL_ID, key, units=0)

    def test_duplicate_key_reverts_for_any_node(self, world: World) -> None:
        key = submitted(world, "dup")
        for node in (world.node1, world.node2):
            with expect_revert("ComputePoolDuplicateWork", POOL_ID, key):
                world.c.submit(node, POOL_ID, key)

    def test_same_key_may_be_submitted_to_another_pool(self, world: World) -> None:
        key = submitted(world, "shared")
        pool_id = make_pool(world)
        world.c.join(world.provider, world.manager, pool_id, world.node1, 7, FAR)
        world.c.submit(world.node1, pool_id, key)
        assert world.c.work(pool_id, key)[2] == WORK_PENDING

    def test_non_member_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolNotMember", POOL_ID, world.node3.address):
            world.c.submit(world.node3, POOL_ID, work_key("intruder"))

    def test_inactive_pool_reverts(self, world: World) -> None:
        pool_id = make_pool(world, start=False)
        with expect_revert("ComputePoolNotActive", pool_id, POOL_CREATED):
            world.c.submit(world.node1, pool_id, work_key("early"))

    def test_node_removed_from_registry_cannot_submit(self, world: World) -> None:
        world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        with expect_revert("ComputePoolNodeInactive", world.node1.address):
            world.c.submit(world.node1, POOL_ID, work_key("orphan"))


class TestAttestWork:
    def test_batch_accepts_each_key_and_starts_window(self, world: World) -> None:
        keys = [submitted(world, f"batch-{i}") for i in range(3)]
        receipt = world.c.attest(world.validator, POOL_ID, keys)
        now = world.chain.timestamp()
        assert [dict(e.args) for e in world.c.events(receipt, "WorkAttested")] == [
            {"poolId": POOL_ID, "workKey": key, "validator": world.validator.address} for key in keys
        ]
        for key in keys:
            work = world.c.work(POOL_ID, key)
            assert (work[2], work[6], work[7]) == (WORK_ACCEPTED, now, world.validator.address)
            assert work[5] <= now  # submittedAt kept

    def test_empty_batch_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolEmptyBatch", POOL_ID):
            world.c.attest(world.validator, POOL_ID, [])

    def test_a_key_judged_first_by_another_transaction_is_skipped_not_the_batch(self, world: World) -> None:
        """A front-run key (attested or invalidated by someone else between read and send) no longer
        sinks the whole batch: it is skipped with an event, the others are attested."""
        fresh = submitted(world, "fresh")
        done = accepted(world, "done")
        receipt = world.c.attest(world.validator2, POOL_ID, [fresh, done])
        assert world.c.event(receipt, "WorkSkipped") == {"poolId": POOL_ID, "workKey": done, "status": WORK_ACCEPTED}
        assert [e.args["workKey"] for e in world.c.events(receipt, "WorkAttested")] == [fresh]
        assert world.c.work(POOL_ID, fresh)[2] == WORK_ACCEPTED
        assert world.c.work(POOL_ID, done)[7] == world.validator.address  # untouched

    def test_unknown_key_reverts(self, world: World) -> None:
        key = work_key("ghost")
        with expect_revert("ComputePoolWorkNotPending", POOL_ID, key, WORK_NONE):
            world.c.attest(world.validator, POOL_ID, [key])


class TestInvalidateWork:
    def _invalidate(self, world: World, key: bytes, validator: Actor | None = None):
        fn = world.c.pool.functions.invalidateWork(POOL_ID, key, reason("toploc_mismatch"), EVIDENCE)
        return (validator or world.validator).send(fn)

    def test_pending_work_is_invalidated_slashed_and_split(self, world: World) -> None:
        key = submitted(world, "forged")
        treasury_before = world.c.balance(world.treasury)
        receipt = self._invalidate(world, key)
        assert [e.name for e in world.c.events(receipt)] == [
            "WorkRejected",  # with no challenge window the rejection executes at once
            "WorkInvalidated",
            "NodeEjected",
            "Slashed",
            "Transfer",  # stake manager -> pool
            "SlashDistributed",
            "Transfer",  # pool -> treasury
        ]
        assert world.c.event(receipt, "WorkRejected") == {
            "poolId": POOL_ID,
            "workKey": key,
            "validator": world.validator.address,
            "reason": reason("toploc_mismatch"),
            "evidenceHash": EVIDENCE,
            "executableAt": world.chain.timestamp(),
        }
        assert world.c.event(receipt, "WorkInvalidated") == {
            "poolId": POOL_ID,
            "workKey": key,
            "node": world.node1.address,
            "validator": world.validator.address,
            "reason": reason("toploc_mismatch"),
        }
        assert world.c.event(receipt, "NodeEjected") == {
            "poolId": POOL_ID,
            "node": world.node1.address,
            "provider": world.provider.address,
            "slashed": True,
        }
        assert world.c.event(receipt, "Slashed") == {
            "provider": world.provider.address,
            "slasher": world.c.book.compute_pool,
            "requested": SLASH_AMOUNT,
            "fromUnbonding": 0,
            "fromActive": SLASH_AMOUNT,
        }
        assert world.c.event(receipt, "SlashDistributed") == {
            "poolId": POOL_ID,
            "workKey": key,
            "provider": world.provider.address,
            "validator": world.validator.address,
            "validatorShare": SLASH_TO_VALIDATOR,
            "treasury": world.treasury.address,
            "treasuryShare": SLASH_TO_TREASURY,
        }
        work = world.c.work(POOL_ID, key)
        assert (work[2], work[7]) == (WORK_INVALID, world.validator.address)
        assert world.c.member(POOL_ID, world.node1)[1] == MEMBER_SLASHED
        assert rewards(world, world.validator) == SLASH_TO_VALIDATOR
        assert world.c.balance(world.treasury) == treasury_before + SLASH_TO_TREASURY
        assert world.c.stake.functions.activeStake(world.provider.address).call() == PROVIDER_STAKE - SLASH_AMOUNT

    def test_accepted_work_can_be_disputed_within_the_window(self, world: World) -> None:
        key = accepted(world, "disputed")
        world.chain.increase_time(DISPUTE_WINDOW - 60)
        self._invalidate(world, key, world.validator2)
        work = world.c.work(POOL_ID, key)
        assert (work[2], work[7]) == (WORK_INVALID, world.validator2.address)

    def test_accepted_work_after_the_window_reverts(self, world: World) -> None:
        key = accepted(world, "settled")
        closed_at = attested_at(world, key) + DISPUTE_WINDOW
        world.chain.increase_time(DISPUTE_WINDOW)
        with expect_revert("ComputePoolDisputeWindowClosed", POOL_ID, key, closed_at):
            self._invalidate(world, key)

    def test_double_invalidation_reverts(self, world: World) -> None:
        key = submitted(world, "twice")
        self._invalidate(world, key)
        with expect_revert("ComputePoolWorkNotDisputable", POOL_ID, key, WORK_INVALID):
            self._invalidate(world, key, world.validator2)

    def test_finalized_work_cannot_be_invalidated(self, world: World) -> None:
        key = accepted(world, "final")
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        with expect_revert("ComputePoolWorkNotDisputable", POOL_ID, key, WORK_FINALIZED):
            self._invalidate(world, key)

    def test_unknown_work_reverts(self, world: World) -> None:
        key = work_key("ghost")
        with expect_revert("ComputePoolWorkNotDisputable", POOL_ID, key, WORK_NONE):
            self._invalidate(world, key)

    @pytest.mark.parametrize(
        ("unbonded", "from_unbonding", "from_active"),
        [(840 * TOKEN, SLASH_AMOUNT, 0), (30 * TOKEN, 30 * TOKEN, SLASH_AMOUNT - 30 * TOKEN)],
        ids=["all-from-unbonding", "unbonding-then-active"],
    )
    def test_slash_takes_unbonding_first_then_active(
        self, world: World, unbonded: int, from_unbonding: int, from_active: int
    ) -> None:
        world.provider.send(world.c.stake.functions.unbond(unbonded))
        receipt = self._invalidate(world, submitted(world, "cheat"))
        slashed = world.c.event(receipt, "Slashed")
        assert (slashed["fromUnbonding"], slashed["fromActive"]) == (from_unbonding, from_active)
        stake = world.c.stake.functions
        assert stake.unbonding(world.provider.address).call()[0] == unbonded - from_unbonding
        assert stake.activeStake(world.provider.address).call() == PROVIDER_STAKE - unbonded - from_active

    def test_second_invalid_work_slashes_again_without_second_ejection(self, world: World) -> None:
        first, second = submitted(world, "cheat-1"), submitted(world, "cheat-2")
        self._invalidate(world, first)
        receipt = self._invalidate(world, second)
        assert world.c.events(receipt, "NodeEjected") == []
        assert world.c.event(receipt, "SlashDistributed")["validatorShare"] == SLASH_TO_VALIDATOR
        assert rewards(world, world.validator) == 2 * SLASH_TO_VALIDATOR

    def test_slash_of_a_drained_provider_distributes_what_is_left(self, world: World) -> None:
        world.admin.send(world.c.stake.functions.setStakeParams(0, 0))
        world.provider.send(world.c.stake.functions.unbond(PROVIDER_STAKE - 20 * TOKEN))
        world.chain.increase_time(UNBONDING_PERIOD)
        world.provider.send(world.c.stake.functions.withdraw())
        receipt = self._invalidate(world, submitted(world, "cheat"))
        split = world.c.event(receipt, "SlashDistributed")
        assert (split["validatorShare"], split["treasuryShare"]) == (4 * TOKEN, 16 * TOKEN)


class TestFinalizeWork:
    def test_after_window_pays_provider_and_validator_from_budget(self, world: World) -> None:
        keys = [accepted(world, "paid-1", units=10), accepted(world, "paid-2", node=world.node2, units=5)]
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, keys))
        finalized = [dict(e.args) for e in world.c.events(receipt, "WorkFinalized")]
        assert finalized == [
            {
                "poolId": POOL_ID,
                "workKey": keys[0],
                "node": world.node1.address,
                "provider": world.provider.address,
                "reward": 10 * REWARD_PER_UNIT,
                "validator": world.validator.address,
                "validatorFee": VALIDATOR_FEE,
            },
            {
                "poolId": POOL_ID,
                "workKey": keys[1],
                "node": world.node2.address,
                "provider": world.provider2.address,
                "reward": 5 * REWARD_PER_UNIT,
                "validator": world.validator.address,
                "validatorFee": VALIDATOR_FEE,
            },
        ]
        assert rewards(world, world.provider) == 10 * REWARD_PER_UNIT
        assert rewards(world, world.provider2) == 5 * REWARD_PER_UNIT
        assert rewards(world, world.validator) == 2 * VALIDATOR_FEE
        assert budget(world) == BUDGET - 15 * REWARD_PER_UNIT - 2 * VALIDATOR_FEE
        assert world.c.work(POOL_ID, keys[0])[2] == WORK_FINALIZED

    def test_before_window_reverts_with_finalizable_time(self, world: World) -> None:
        key = accepted(world, "early")
        ready = attested_at(world, key) + DISPUTE_WINDOW
        world.chain.increase_time(DISPUTE_WINDOW - 60)
        with expect_revert("ComputePoolDisputeWindowOpen", POOL_ID, key, ready):
            world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))

    def test_finalizable_exactly_when_window_ends(self, world: World) -> None:
        key = accepted(world, "boundary")
        world.chain.set_next_timestamp(attested_at(world, key) + DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]), gas=300_000)
        assert world.c.work(POOL_ID, key)[2] == WORK_FINALIZED

    def test_pending_key_reverts(self, world: World) -> None:
        key = submitted(world, "raw")
        with expect_revert("ComputePoolWorkNotAccepted", POOL_ID, key, WORK_PENDING):
            world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))

    def test_a_key_settled_by_another_transaction_is_skipped(self, world: World) -> None:
        done, later = accepted(world, "done"), accepted(world, "later")
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [done]))
        paid = rewards(world, world.provider)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [done, later]))
        assert world.c.event(receipt, "WorkSkipped") == {"poolId": POOL_ID, "workKey": done, "status": WORK_FINALIZED}
        assert [e.args["workKey"] for e in world.c.events(receipt, "WorkFinalized")] == [later]
        assert rewards(world, world.provider) == 2 * paid  # `done` was not paid twice

    def test_empty_batch_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolEmptyBatch", POOL_ID):
            world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, []))

    def test_work_of_slashed_node_is_forfeited(self, world: World) -> None:
        honest_looking = accepted(world, "looks-fine")
        cheat = submitted(world, "cheat")
        world.validator2.send(world.c.pool.functions.invalidateWork(POOL_ID, cheat, reason("sampling"), EVIDENCE))
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [honest_looking]))
        assert world.c.event(receipt, "WorkForfeited") == {
            "poolId": POOL_ID,
            "workKey": honest_looking,
            "node": world.node1.address,
        }
        assert world.c.events(receipt, "WorkFinalized") == []
        assert world.c.work(POOL_ID, honest_looking)[2] == WORK_FORFEITED
        assert rewards(world, world.provider) == 0
        assert rewards(world, world.validator) == 0
        assert budget(world) == BUDGET
        again = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [honest_looking]))
        assert world.c.event(again, "WorkSkipped")["status"] == WORK_FORFEITED


class TestWithdrawRewards:
    def test_provider_and_validator_withdraw_their_credits(self, world: World) -> None:
        key = accepted(world, "paid")
        world.validator.send(
            world.c.pool.functions.invalidateWork(
                POOL_ID, submitted(world, "bad", node=world.node2), reason("x"), EVIDENCE
            )
        )
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        for actor, amount in (
            (world.provider, 10 * REWARD_PER_UNIT),
            (world.validator, VALIDATOR_FEE + SLASH_TO_VALIDATOR),
        ):
            before = world.c.balance(actor)
            receipt = actor.send(world.c.pool.functions.withdrawRewards())
            assert world.c.event(receipt, "RewardsWithdrawn") == {"account": actor.address, "amount": amount}
            assert world.c.balance(actor) == before + amount
            assert rewards(world, actor) == 0

    def test_nothing_to_withdraw_reverts(self, world: World) -> None:
        with expect_revert("ComputePoolNothingToWithdraw", world.provider.address):
            world.provider.send(world.c.pool.functions.withdrawRewards())


class TestCheckpoints:
    def test_first_checkpoint_may_be_version_zero(self, world: World) -> None:
        manifest = work_key("manifest-0")
        receipt = world.manager.send(world.c.pool.functions.publishCheckpoint(POOL_ID, 0, manifest, "s3://ckpt/0"))
        assert world.c.event(receipt, "CheckpointPublished") == {
            "poolId": POOL_ID,
            "version": 0,
            "manifestSha256": manifest,
            "uri": "s3://ckpt/0",
        }
        latest = world.c.pool.functions.latestCheckpoint(POOL_ID).call()
        assert latest == [0, manifest, "s3://ckpt/0", world.chain.timestamp()]

    def test_versions_must_increase(self, world: World) -> None:
        fns = world.c.pool.functions
        world.manager.send(fns.publishCheckpoint(POOL_ID, 3, work_key("m3"), "s3://ckpt/3"))
        for version in (3, 2):
            with expect_revert("ComputePoolCheckpointVersionNotIncreasing", POOL_ID, 3, version):
                world.manager.send(fns.publishCheckpoint(POOL_ID, version, work_key("m"), "s3://x"))
        world.manager.send(fns.publishCheckpoint(POOL_ID, 4, work_key("m4"), "s3://ckpt/4"))
        assert fns.latestCheckpoint(POOL_ID).call()[:3] == [4, work_key("m4"), "s3://ckpt/4"]

    def test_pool_without_checkpoint_reads_empty(self, world: World) -> None:
        assert world.c.pool.functions.latestCheckpoint(POOL_ID).call() == [0, b"\x00" * 32, "", 0]


class TestHostileToken:
    """withdrawRewards against a token that re-enters or lies (contracts/mocks/HostileToken.sol)."""

    REENTER, RETURN_FALSE = 1, 2

    def _credited_validator(self, world: World, artifact: Artifact) -> tuple[Any, Any]:
        """A second deployment on the hostile token where `validator` holds a credited slash share."""
        send, w3 = world.admin.sender, world.c.w3

        def at(name: str, address: str) -> Any:
            return w3.eth.contract(address=address, abi=load_artifact(name).abi)

        token = w3.eth.contract(address=send.deploy(artifact), abi=artifact.abi)
        stake = at(
            "StakeManager", send.deploy(load_artifact("StakeManager"), token.address, world.admin.address, 600, 0, 0)
        )
        registry = at(
            "ComputeRegistry", send.deploy(load_artifact("ComputeRegistry"), stake.address, world.admin.address)
        )
        pool = at(
            "ComputePool",
            send.deploy(
                load_artifact("ComputePool"), token.address, stake.address, registry.address, world.admin.address
            ),
        )
        world.admin.send(stake.functions.setComputeRegistry(registry.address))
        world.admin.send(stake.functions.grantRole(world.c.role(stake, "SLASHER_ROLE"), pool.address))
        world.admin.send(pool.functions.grantRole(world.c.role(pool, "VALIDATOR_ROLE"), world.validator.address))

        world.provider.send(token.functions.mint(world.provider.address, 100))
        world.provider.send(token.functions.approve(stake.address, 100))
        world.provider.send(stake.functions.stake(100))
        world.provider.send(registry.functions.registerProvider())
        signature = world.c.ownership_signature(world.node1, world.provider, registry=registry.address, nonce=0)
        world.provider.send(registry.functions.addNode(world.node1.address, 1, b"\x01" * 32, 10**10, signature))
        world.creator.send(
            pool.functions.createPool(
                world.pool_params(slashAmount=10, validatorSlashShareBps=10_000, disputeWindow=60)
            )
        )
        world.creator.send(pool.functions.startPool(1))
        invite = world.c.invite(world.manager, 1, world.node1, 1, FAR, contract=pool.address)
        world.provider.send(pool.functions.approvePool(1, PROVIDER_STAKE))
        world.provider.send(pool.functions.joinPool(1, world.node1.address, 1, FAR, invite))
        world.node1.send(pool.functions.submitWork(1, world.node1.address, work_key("bad"), 1, 1))
        world.validator.send(pool.functions.invalidateWork(1, work_key("bad"), reason("x"), EVIDENCE))
        assert pool.functions.rewardBalance(world.validator.address).call() == 10
        return token, pool

    def test_reentrant_withdraw_is_refused(self, world: World, hostile_token_artifact: Artifact) -> None:
        token, pool = self._credited_validator(world, hostile_token_artifact)
        payload = pool.functions.withdrawRewards()._encode_transaction_data()
        world.validator.send(token.functions.arm(self.REENTER, pool.address, payload))
        with expect_revert("ReentrancyGuardReentrantCall"):
            world.validator.send(pool.functions.withdrawRewards())

    def test_token_returning_false_reverts(self, world: World, hostile_token_artifact: Artifact) -> None:
        token, pool = self._credited_validator(world, hostile_token_artifact)
        world.validator.send(token.functions.arm(self.RETURN_FALSE, ZERO_ADDRESS, b""))
        with expect_revert("SafeERC20FailedOperation", token.address):
            world.validator.send(pool.functions.withdrawRewards())
