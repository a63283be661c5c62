"""Bundled submissions on anvil: `submitWorkBundle` records many rollout files as ONE submission.

The bundle key is the keccak of the files' keys and units; every verdict and settlement function
takes it unchanged, so the bundle is accepted, invalidated (slashing and ejecting its node once)
or paid as a whole, while the validator fee is reserved, paid and released per file.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
from web3 import Web3
from web3.logs import DISCARD

from proofpool.infra.chain.artifacts import Artifact, load_artifact
from proofpool.infra.chain.bindings import ComputePool
from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES, bundle_key, canonical
from tests.contracts.conftest import (
    DISPUTE_WINDOW,
    POOL_ID,
    REWARD_PER_UNIT,
    SLASH_AMOUNT,
    SLASH_SHARE_BPS,
    VALIDATOR_FEE,
    World,
)
from tests.contracts.helpers import (
    EVIDENCE,
    MEMBER_ACTIVE,
    MEMBER_SLASHED,
    POOL_CREATED,
    TOKEN,
    WORK_ACCEPTED,
    WORK_FINALIZED,
    WORK_FORFEITED,
    WORK_INVALID,
    WORK_PENDING,
    WORK_REJECTED,
    ZERO_ADDRESS,
    Actor,
    expect_revert,
    reason,
    work_key,
)
from tests.contracts.test_compute_pool import budget, make_pool, rewards

FAR = 10**10
WORK_EXPIRED = 7
CHALLENGE_WINDOW = 600
SLASH_TO_VALIDATOR = SLASH_AMOUNT * SLASH_SHARE_BPS // 10_000


def files(label: str, count: int, units: int | None = None) -> tuple[list[bytes], list[int]]:
    """`count` canonical files: sha256 keys of `label`-i, units `units` or 1 + i."""
    pairs = [(hashlib.sha256(f"{label}-{i}".encode()).digest(), units or 1 + i) for i in range(count)]
    return canonical(pairs)


def submit_bundle(
    world: World, keys: list[bytes], units: list[int], node: Actor | None = None, pool_id: int = POOL_ID
) -> bytes:
    """Submit a bundle from `node` (node1); returns its key."""
    node = node or world.node1
    node.send(world.c.pool.functions.submitWorkBundle(pool_id, node.address, keys, units, 1))
    return bundle_key(keys, units)


def work_files(world: World, key: bytes, pool_id: int = POOL_ID) -> int:
    return int(world.c.pool.functions.workFiles(pool_id, key).call())


def reserved(world: World, pool_id: int = POOL_ID) -> int:
    return int(world.c.pool.functions.budgetReserved(pool_id).call()[0])


def open_work(world: World, provider: Actor) -> int:
    return int(world.c.pool.functions.openWork(provider.address).call())


def status(world: World, key: bytes, pool_id: int = POOL_ID) -> int:
    return int(world.c.work(pool_id, key)[2])


def cost(units: list[int]) -> int:
    """What a bundle reserves and pays: its units' reward and one validator fee per file."""
    return sum(units) * REWARD_PER_UNIT + len(units) * VALIDATOR_FEE


_K, _U = files("shape", 3)
_TOO_MANY = sorted(hashlib.sha256(f"many-{i}".encode()).digest() for i in range(MAX_BUNDLE_FILES + 1))
"""One file more than a bundle holds, strictly ascending."""


def challenge_pool(world: World, quorum: int = 1) -> int:
    """A funded, started pool whose rejections wait CHALLENGE_WINDOW seconds; node1 joined."""
    pool_id = make_pool(world, budget=1_000 * TOKEN, challengeWindow=CHALLENGE_WINDOW, contestQuorum=quorum)
    world.c.join(world.provider, world.manager, pool_id, world.node1, 900 + pool_id, FAR)
    return pool_id


class TestSubmit:
    def test_a_bundle_is_one_pending_submission_of_many_files(self, world: World) -> None:
        keys, units = files("happy", 5)
        fns = world.c.pool.functions
        returned = world.node1.call(fns.submitWorkBundle(POOL_ID, world.node1.address, keys, units, 3))
        receipt = world.node1.send(fns.submitWorkBundle(POOL_ID, world.node1.address, keys, units, 3))
        key = bundle_key(keys, units)
        assert bytes(returned) == key
        assert world.c.event(receipt, "WorkBundleSubmitted") == {
            "poolId": POOL_ID,
            "workKey": key,
            "node": world.node1.address,
            "provider": world.provider.address,
            "workUnits": sum(units),
            "modelVersion": 3,
            "fileKeys": keys,
            "fileUnits": units,
        }
        assert [e.name for e in world.c.events(receipt)] == ["WorkBundleSubmitted"]  # no WorkSubmitted per file
        now = world.chain.timestamp()
        assert world.c.work(POOL_ID, key) == (
            world.node1.address,
            world.provider.address,
            WORK_PENDING,
            sum(units),
            3,
            now,
            now,
            ZERO_ADDRESS,
        )
        assert work_files(world, key) == 5
        assert open_work(world, world.provider) == 1  # one submission holds the stake
        for file_key in keys:  # files are not submissions of their own
            assert work_files(world, file_key) == 0

    def test_work_files_of_single_and_unknown_submissions(self, world: World) -> None:
        single = work_key("single")
        world.c.submit(world.node1, POOL_ID, single)
        assert work_files(world, single) == 1
        assert work_files(world, work_key("never")) == 0

    def test_the_binding_submits_and_reads_a_bundle(self, world: World) -> None:
        pool = ComputePool(world.c.w3, world.c.book.compute_pool, world.node1.sender)
        keys, units = files("binding", 3)
        receipt = pool.submit_work_bundle(POOL_ID, world.node1.address, keys, units, 2)
        event = next(e for e in pool.events(receipt) if e.name == "WorkBundleSubmitted")
        assert bytes(event["workKey"]) == bundle_key(keys, units)
        assert pool.work_files(POOL_ID, bundle_key(keys, units)) == 3
        assert pool.get_work(POOL_ID, bundle_key(keys, units)).work_units == sum(units)

    @pytest.mark.parametrize(
        "shape",
        ["empty", "mismatch", "descending", "duplicate", "too_many", "zero_units", "short_key"],
    )
    def test_the_binding_refuses_a_bundle_the_contract_would(self, world: World, shape: str) -> None:
        pool = ComputePool(world.c.w3, world.c.book.compute_pool, world.node1.sender)
        keys, units = files("refused", 3)
        bad = {
            "empty": ([], []),
            "mismatch": (keys, units[:2]),
            "descending": (keys[::-1], units),
            "duplicate": ([keys[0], keys[0]], [1, 1]),
            "too_many": (_TOO_MANY, [1] * len(_TOO_MANY)),
            "zero_units": (keys, [1, 0, 1]),
            "short_key": ([keys[0][:31]], [1]),
        }[shape]
        nonce = world.c.w3.eth.get_transaction_count(world.node1.address)
        with pytest.raises(ValueError, match="not canonical"):
            pool.submit_work_bundle(POOL_ID, world.node1.address, *bad, 1)
        assert world.c.w3.eth.get_transaction_count(world.node1.address) == nonce  # nothing sent

    def test_the_contract_key_is_the_python_key(self, world: World) -> None:
        """bundle_key agrees with the contract bit for bit, on random bundles of every size."""
        rng = random.Random(23)
        fns = world.c.pool.functions
        for count in (1, 2, 7, 32, 64, MAX_BUNDLE_FILES):
            pairs = [(rng.randbytes(32), rng.randint(1, 2**64 // (2 * MAX_BUNDLE_FILES))) for _ in range(count)]
            keys, units = canonical(pairs)
            on_chain = world.node1.call(fns.submitWorkBundle(POOL_ID, world.node1.address, keys, units, 1))
            assert bytes(on_chain) == bundle_key(keys, units), count
        keys, units = canonical([(hashlib.sha256(b"rollout-%d" % i).digest(), 4096 + i) for i in range(3)])
        pinned = world.node1.call(fns.submitWorkBundle(POOL_ID, world.node1.address, keys, units, 1))
        assert bytes(pinned).hex() == "c528e792b49acc6bc2555ad471c1378de91f1ad7cfae8597a2126234d686bb73"  # unit test's

    def test_a_bundle_of_max_files_is_accepted(self, world: World) -> None:
        keys, units = files("max", MAX_BUNDLE_FILES, units=2**56)
        key = submit_bundle(world, keys, units)
        assert work_files(world, key) == MAX_BUNDLE_FILES
        assert world.c.work(POOL_ID, key)[3] == MAX_BUNDLE_FILES * 2**56
        assert world.c.pool.functions.MAX_BUNDLE_FILES().call() == MAX_BUNDLE_FILES

    def test_the_same_files_with_other_units_are_another_bundle(self, world: World) -> None:
        """The key commits to the units too: a node claiming other units for the same files makes a
        new submission (the validators judge each file's claim, and catch a file in two bundles)."""
        keys, units = files("units", 2)
        first = submit_bundle(world, keys, units)
        second = submit_bundle(world, keys, [u + 1 for u in units])
        assert first != second
        assert [status(world, first), status(world, second)] == [WORK_PENDING, WORK_PENDING]


def _bad_caller(world: World) -> tuple[Actor, list, tuple]:
    keys, units = files("caller", 2)
    return world.node2, [POOL_ID, world.node1.address, keys, units, 1], (
        "ComputePoolCallerNotNode", (world.node1.address, world.node2.address)
    )  # fmt: skip


def _not_active(world: World) -> tuple[Actor, list, tuple]:
    pool_id = make_pool(world, start=False)
    keys, units = files("inactive", 2)
    return world.node1, [pool_id, world.node1.address, keys, units, 1], (
        "ComputePoolNotActive", (pool_id, POOL_CREATED)
    )  # fmt: skip


def _closed(world: World) -> tuple[Actor, list, tuple]:
    world.creator.send(world.c.pool.functions.closePool(POOL_ID))
    keys, units = files("closed", 2)
    return world.node1, [POOL_ID, world.node1.address, keys, units, 1], ("ComputePoolNotActive", (POOL_ID, 3))


def _not_member(world: World) -> tuple[Actor, list, tuple]:
    keys, units = files("outsider", 2)
    return world.node3, [POOL_ID, world.node3.address, keys, units, 1], (
        "ComputePoolNotMember", (POOL_ID, world.node3.address)
    )  # fmt: skip


def _node_inactive(world: World) -> tuple[Actor, list, tuple]:
    world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
    keys, units = files("removed", 2)
    return world.node1, [POOL_ID, world.node1.address, keys, units, 1], (
        "ComputePoolNodeInactive", (world.node1.address,)
    )  # fmt: skip


def _shape(keys: list[bytes], units: list[int], error: str, args: tuple) -> Any:
    def case(world: World) -> tuple[Actor, list, tuple]:
        return world.node1, [POOL_ID, world.node1.address, keys, units, 1], (error, args)

    return case


def _duplicate_bundle(world: World) -> tuple[Actor, list, tuple]:
    key = submit_bundle(world, _K, _U)
    return world.node1, [POOL_ID, world.node1.address, _K, _U, 1], ("ComputePoolDuplicateWork", (POOL_ID, key))


REVERTS = {
    "caller_not_node": _bad_caller,
    "pool_not_active": _not_active,
    "pool_closed": _closed,
    "not_member": _not_member,
    "node_inactive": _node_inactive,
    "empty": _shape([], [], "ComputePoolBadBundle", (POOL_ID, 0, 0)),
    "too_many": _shape(_TOO_MANY, [1] * len(_TOO_MANY), "ComputePoolBadBundle", (POOL_ID, 129, 129)),
    "length_mismatch": _shape(_K, _U[:2], "ComputePoolBadBundle", (POOL_ID, 3, 2)),
    "unsorted": _shape([_K[1], _K[0], _K[2]], _U, "ComputePoolBadBundle", (POOL_ID, 3, 3)),
    "duplicate_file": _shape([_K[0], _K[0], _K[1]], _U, "ComputePoolBadBundle", (POOL_ID, 3, 3)),
    "zero_units": _shape(_K, [1, 0, 1], "ComputePoolZeroWorkUnits", (POOL_ID, _K[1])),
    "units_overflow": _shape(_K[:2], [2**64 - 1, 1], "ComputePoolBundleUnitsOverflow", (POOL_ID, 2**64)),
    "duplicate_bundle": _duplicate_bundle,
}


@pytest.mark.parametrize("case", list(REVERTS))
def test_submit_work_bundle_refuses(world: World, case: str) -> None:
    sender, args, (error, error_args) = REVERTS[case](world)
    with expect_revert(error, *error_args):
        sender.send(world.c.pool.functions.submitWorkBundle(*args))


class TestSettlement:
    def test_attest_and_finalize_pay_units_and_a_fee_per_file(self, world: World) -> None:
        keys, units = files("paid", 4)
        key = submit_bundle(world, keys, units)
        single = work_key("single-paid")
        world.c.submit(world.node1, POOL_ID, single, 10)
        budget_before = budget(world)
        receipt = world.c.attest(world.validator, POOL_ID, [key, single])
        assert [e.name for e in world.c.events(receipt)] == ["AttestationEvidence", "WorkAttested", "WorkAttested"]
        assert reserved(world) == cost(units) + 10 * REWARD_PER_UNIT + VALIDATOR_FEE
        assert world.c.work(POOL_ID, key)[2] == WORK_ACCEPTED
        assert work_files(world, key) == 4

        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        assert world.c.event(receipt, "WorkFinalized") == {
            "poolId": POOL_ID,
            "workKey": key,
            "node": world.node1.address,
            "provider": world.provider.address,
            "reward": sum(units) * REWARD_PER_UNIT,
            "validator": world.validator.address,
            "validatorFee": 4 * VALIDATOR_FEE,
        }
        assert rewards(world, world.provider) == sum(units) * REWARD_PER_UNIT
        assert rewards(world, world.validator) == 4 * VALIDATOR_FEE
        assert budget(world) == budget_before - cost(units)
        assert reserved(world) == 10 * REWARD_PER_UNIT + VALIDATOR_FEE  # the single file's
        assert status(world, key) == WORK_FINALIZED
        assert work_files(world, key) == 4
        assert open_work(world, world.provider) == 1  # the single file is still open

    def test_the_budget_reserves_a_fee_per_file(self, world: World) -> None:
        keys, units = files("reserve", 8)
        needed = cost(units)
        pool_id = make_pool(world, budget=needed - 1)
        world.c.join(world.provider, world.manager, pool_id, world.node1, 31, FAR)
        key = submit_bundle(world, keys, units, pool_id=pool_id)
        with expect_revert("ComputePoolBudgetExhausted", pool_id, needed, needed - 1):
            world.c.attest(world.validator, pool_id, [key])
        assert status(world, key, pool_id) == WORK_PENDING
        world.creator.send(world.c.token.functions.approve(world.c.book.compute_pool, 1))
        world.creator.send(world.c.pool.functions.fundPool(pool_id, 1))
        world.c.attest(world.validator, pool_id, [key])
        assert reserved(world, pool_id) == needed
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(pool_id, [key]))
        assert (budget(world, pool_id), reserved(world, pool_id)) == (0, 0)


class TestVerdicts:
    def test_one_invalidation_slashes_and_ejects_once(self, world: World) -> None:
        keys, units = files("bad", 6)
        key = submit_bundle(world, keys, units)
        treasury_before = world.c.balance(world.treasury)
        receipt = world.validator.send(
            world.c.pool.functions.invalidateWork(POOL_ID, key, reason("toploc_mismatch"), EVIDENCE)
        )
        names = [e.name for e in world.c.events(receipt)]
        assert names.count("WorkInvalidated") == 1
        assert names.count("NodeEjected") == 1
        assert names.count("SlashDistributed") == 1
        assert status(world, key) == WORK_INVALID
        assert work_files(world, key) == 6
        assert world.c.member(POOL_ID, world.node1)[1] == MEMBER_SLASHED
        assert world.c.pool.functions.poolApproval(POOL_ID, world.provider.address).call()[1] == SLASH_AMOUNT
        assert rewards(world, world.validator) == SLASH_TO_VALIDATOR
        assert world.c.balance(world.treasury) - treasury_before == SLASH_AMOUNT - SLASH_TO_VALIDATOR
        assert open_work(world, world.provider) == 0

    def test_an_accepted_bundle_invalidated_in_its_window_releases_every_fee(self, world: World) -> None:
        keys, units = files("late", 5)
        key = submit_bundle(world, keys, units)
        world.c.attest(world.validator, POOL_ID, [key])
        assert reserved(world) == cost(units)
        world.validator2.send(world.c.pool.functions.invalidateWork(POOL_ID, key, reason("late"), EVIDENCE))
        assert reserved(world) == 0
        assert (status(world, key), work_files(world, key)) == (WORK_INVALID, 5)
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        assert [e.name for e in world.c.events(receipt)] == ["WorkSkipped"]
        assert rewards(world, world.provider) == 0

    def test_a_rejection_executes_after_its_window_and_keeps_the_file_count(self, world: World) -> None:
        pool_id = challenge_pool(world)
        keys, units = files("executed", 3)
        key = submit_bundle(world, keys, units, pool_id=pool_id)
        world.validator.send(world.c.pool.functions.invalidateWork(pool_id, key, reason("made_up"), EVIDENCE))
        assert (status(world, key, pool_id), work_files(world, key, pool_id)) == (WORK_REJECTED, 3)
        assert world.c.member(pool_id, world.node1)[1] == MEMBER_ACTIVE
        with expect_revert("ComputePoolChallengeWindowOpen"):
            world.outsider.send(world.c.pool.functions.executeRejection(pool_id, key))
        world.chain.increase_time(CHALLENGE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.executeRejection(pool_id, key))
        assert [e.name for e in world.c.events(receipt)].count("SlashDistributed") == 1
        assert (status(world, key, pool_id), work_files(world, key, pool_id)) == (WORK_INVALID, 3)
        assert world.c.member(pool_id, world.node1)[1] == MEMBER_SLASHED
        with expect_revert("ComputePoolWorkNotRejected", pool_id, key, WORK_INVALID):
            world.outsider.send(world.c.pool.functions.executeRejection(pool_id, key))

    @pytest.mark.parametrize("attested", [False, True], ids=["pending", "accepted"])
    def test_an_overturned_rejection_restores_the_bundle_with_its_files(self, world: World, attested: bool) -> None:
        pool_id = challenge_pool(world)
        keys, units = files(f"overturned-{attested}", 4)
        key = submit_bundle(world, keys, units, pool_id=pool_id)
        if attested:
            world.c.attest(world.validator2, pool_id, [key])
        world.validator.send(world.c.pool.functions.invalidateWork(pool_id, key, reason("made_up"), EVIDENCE))
        receipt = world.validator2.send(world.c.pool.functions.contestRejection(pool_id, key, EVIDENCE))
        restored = WORK_ACCEPTED if attested else WORK_PENDING
        assert world.c.event(receipt, "RejectionOverturned")["restored"] == restored
        assert (status(world, key, pool_id), work_files(world, key, pool_id)) == (restored, 4)
        if not attested:
            world.c.attest(world.validator2, pool_id, [key])
        assert reserved(world, pool_id) == cost(units)
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(pool_id, [key]))
        assert world.c.event(receipt, "WorkFinalized")["validatorFee"] == 4 * VALIDATOR_FEE
        assert rewards(world, world.validator2) == 4 * VALIDATOR_FEE
        assert reserved(world, pool_id) == 0

    def test_a_slashed_nodes_accepted_bundle_is_forfeited_and_its_fees_released(self, world: World) -> None:
        keys, units = files("forfeit", 7)
        key = submit_bundle(world, keys, units)
        world.c.attest(world.validator, POOL_ID, [key])
        bad = work_key("forfeit-bad")
        world.c.submit(world.node1, POOL_ID, bad)
        world.validator.send(world.c.pool.functions.invalidateWork(POOL_ID, bad, reason("x"), EVIDENCE))
        budget_before = budget(world)
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.finalizeWork(POOL_ID, [key]))
        assert [e.name for e in world.c.events(receipt)] == ["WorkForfeited"]
        assert (status(world, key), work_files(world, key)) == (WORK_FORFEITED, 7)
        assert reserved(world) == 0
        assert budget(world) == budget_before
        assert rewards(world, world.provider) == 0

    def test_a_pending_bundle_expires_after_the_wind_up(self, world: World) -> None:
        keys, units = files("expired", 3)
        key = submit_bundle(world, keys, units)
        world.creator.send(world.c.pool.functions.closePool(POOL_ID))
        with expect_revert("ComputePoolWindUpNotOver"):
            world.outsider.send(world.c.pool.functions.expireWork(POOL_ID, [key]))
        world.chain.increase_time(DISPUTE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.expireWork(POOL_ID, [key]))
        assert [e.name for e in world.c.events(receipt)] == ["WorkExpired"]
        assert (status(world, key), work_files(world, key)) == (WORK_EXPIRED, 3)
        assert open_work(world, world.provider) == 0


class TestAccess:
    def test_only_a_validator_attests_a_bundle(self, world: World) -> None:
        keys, units = files("access", 2)
        key = submit_bundle(world, keys, units)
        role = world.c.role(world.c.pool, "VALIDATOR_ROLE")
        for who in (world.outsider, world.node1, world.provider, world.creator):
            with expect_revert("AccessControlUnauthorizedAccount", who.address, role):
                world.c.attest(who, POOL_ID, [key])
        assert status(world, key) == WORK_PENDING

    @pytest.mark.parametrize("who", ["provider", "node1"])
    def test_no_self_verdict_on_a_bundle(self, world: World, who: str) -> None:
        keys, units = files(f"self-{who}", 2)
        key = submit_bundle(world, keys, units)
        judge = getattr(world, who)
        world.admin.send(world.c.pool.functions.grantRole(world.c.role(world.c.pool, "VALIDATOR_ROLE"), judge.address))
        with expect_revert("ComputePoolSelfVerdict", POOL_ID, key, judge.address):
            world.c.attest(judge, POOL_ID, [key])
        with expect_revert("ComputePoolSelfVerdict", POOL_ID, key, judge.address):
            judge.send(world.c.pool.functions.invalidateWork(POOL_ID, key, reason("x"), EVIDENCE))


class TestReentrancy:
    """A bundle's slash pays the treasury through the token: a token that re-enters on that transfer
    (contracts/mocks/HostileToken.sol) cannot execute the same rejection twice."""

    REENTER = 1

    def _hostile_pool(self, world: World, artifact: Artifact) -> tuple[Any, Any]:
        """A deployment on the hostile token: pool 1 with a challenge window, node1 a member."""
        send, w3 = world.admin.sender, world.c.w3

        def at(name: str, address: str) -> Any:
            return w3.eth.contract(address=address, abi=load_artifact(name).abi)

        token = w3.eth.contract(address=send.deploy(artifact), abi=artifact.abi)
        stake = at(
            "StakeManager", send.deploy(load_artifact("StakeManager"), token.address, world.admin.address, 6000, 0, 0)
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
        world.admin.send(stake.functions.setWorkLedger(pool.address))
        world.admin.send(stake.functions.grantRole(world.c.role(stake, "SLASHER_ROLE"), pool.address))
        world.admin.send(pool.functions.grantRole(world.c.role(pool, "VALIDATOR_ROLE"), world.validator.address))
        world.provider.send(token.functions.mint(world.provider.address, 1_000))
        world.provider.send(token.functions.approve(stake.address, 1_000))
        world.provider.send(stake.functions.stake(1_000))
        world.provider.send(registry.functions.registerProvider())
        signature = world.c.ownership_signature(world.node1, world.provider, registry=registry.address, nonce=0)
        world.provider.send(registry.functions.addNode(world.node1.address, 1, b"\x01" * 32, FAR, signature))
        params = world.pool_params(slashAmount=10, disputeWindow=60, challengeWindow=120, contestQuorum=1)
        world.creator.send(pool.functions.createPool(params))
        world.creator.send(pool.functions.startPool(1))
        world.provider.send(pool.functions.approvePool(1, 1_000))
        invite = world.c.invite(world.manager, 1, world.node1, 1, FAR, contract=pool.address)
        world.provider.send(pool.functions.joinPool(1, world.node1.address, 1, FAR, invite))
        return token, pool

    def test_a_reentrant_execution_is_refused_and_the_slash_happens_once(
        self, world: World, hostile_token_artifact: Artifact
    ) -> None:
        token, pool = self._hostile_pool(world, hostile_token_artifact)
        keys, units = files("hostile", 3)
        world.node1.send(pool.functions.submitWorkBundle(1, world.node1.address, keys, units, 1))
        key = bundle_key(keys, units)
        world.validator.send(pool.functions.invalidateWork(1, key, reason("x"), EVIDENCE))
        world.chain.increase_time(120)
        payload = pool.functions.executeRejection(1, key)._encode_transaction_data()
        world.validator.send(token.functions.arm(self.REENTER, pool.address, payload))
        with expect_revert("ReentrancyGuardReentrantCall"):
            world.outsider.send(pool.functions.executeRejection(1, key))
        assert pool.functions.getWork(1, key).call()[2] == WORK_REJECTED
        world.validator.send(token.functions.arm(0, ZERO_ADDRESS, b""))
        receipt = world.outsider.send(pool.functions.executeRejection(1, key))
        assert len(pool.events.SlashDistributed().process_receipt(receipt, errors=DISCARD)) == 1
        assert pool.functions.poolApproval(1, world.provider.address).call()[1] == 10  # slashed once
        assert pool.functions.getWork(1, key).call()[2] == WORK_INVALID
        assert pool.functions.workFiles(1, key).call() == 3


def test_event_topic_is_the_documented_signature(world: World) -> None:
    topic = Web3.keccak(text="WorkBundleSubmitted(uint256,bytes32,address,address,uint64,uint32,bytes32[],uint64[])")
    keys, units = files("topic", 2)
    receipt = world.node1.send(world.c.pool.functions.submitWorkBundle(POOL_ID, world.node1.address, keys, units, 1))
    assert bytes(receipt["logs"][0]["topics"][0]) == bytes(topic)
