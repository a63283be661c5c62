"""Attacks on the money paths, run against the contracts on anvil: each must fail.

A stolen node key cannot commit its provider's stake to a pool of the thief's making; a pool
never slashes a provider by more than the provider approved; a validator cannot judge its own
node's work; unbonding does not take stake out from under work a verdict can still slash.
"""

from __future__ import annotations

import pytest

from tests.contracts.conftest import (
    DISPUTE_WINDOW,
    POOL_ID,
    PROVIDER_STAKE,
    SLASH_AMOUNT,
    UNBONDING_PERIOD,
    World,
)
from tests.contracts.helpers import EVIDENCE, TOKEN, WORK_INVALID, Actor, expect_revert, reason, work_key

FAR = 10**10


def _stake(world: World, who: Actor) -> tuple[int, int]:
    """(active, unbonding) stake of `who`."""
    fns = world.c.stake.functions
    return int(fns.activeStake(who.address).call()), int(fns.unbonding(who.address).call()[0])


def _pool_of(world: World, creator: Actor, slash: int, treasury: Actor | None = None) -> int:
    """A started pool created by `creator`, managed by it, slashing `slash` per verdict."""
    params = world.pool_params(manager=creator.address, treasury=(treasury or creator).address, slashAmount=slash)
    creator.send(world.c.pool.functions.createPool(params))
    pool_id = int(world.c.pool.functions.poolCount().call())
    creator.send(world.c.pool.functions.startPool(pool_id))
    return pool_id


def _open(world: World, who: Actor) -> int:
    return int(world.c.pool.functions.openWork(who.address).call())


class TestStolenNodeKey:
    def test_a_node_key_cannot_join_its_provider_to_a_pool_of_its_own_making(self, world: World) -> None:
        """The thief holds node1's key: it creates a pool slashing the provider's whole stake to
        itself, invites itself and joins. The join needs the provider's approval; the node key
        cannot give it."""
        thief = world.node1
        before = _stake(world, world.provider)
        pool_id = _pool_of(world, thief, slash=PROVIDER_STAKE)
        with expect_revert("ComputePoolNotApproved", pool_id, world.provider.address):
            world.c.join(thief, thief, pool_id, thief, 1, FAR)
        with expect_revert("ComputePoolNotProvider", thief.address):
            thief.send(world.c.pool.functions.approvePool(pool_id, PROVIDER_STAKE))
        assert world.c.member(pool_id, thief)[1] == 0  # never a member
        assert _stake(world, world.provider) == before

    def test_a_slash_never_exceeds_what_the_provider_approved(self, world: World) -> None:
        """The provider approved 75 POOL for a pool slashing 50 per verdict: three invalid files
        of its node take 50, then 25, then nothing."""
        fns = world.c.pool.functions
        pool_id = _pool_of(world, world.creator, slash=SLASH_AMOUNT, treasury=world.treasury)
        world.provider.send(fns.approvePool(pool_id, 75 * TOKEN))
        world.c.join(world.node3, world.creator, pool_id, world.node3, 1, FAR)
        keys = [work_key(f"garbage-{i}") for i in range(3)]
        for key in keys:
            world.c.submit(world.node3, pool_id, key)
        active_before, _ = _stake(world, world.provider)
        taken = []
        for key in keys:
            receipt = world.validator.send(fns.invalidateWork(pool_id, key, reason("garbage"), EVIDENCE))
            slash = world.c.event(receipt, "SlashDistributed")
            taken.append(slash["validatorShare"] + slash["treasuryShare"])
        assert taken == [50 * TOKEN, 25 * TOKEN, 0]
        assert _stake(world, world.provider)[0] == active_before - 75 * TOKEN
        assert tuple(fns.poolApproval(pool_id, world.provider.address).call()) == (75 * TOKEN, 75 * TOKEN, True)

    def test_approval_rules(self, world: World) -> None:
        fns = world.c.pool.functions
        pool_id = _pool_of(world, world.creator, slash=SLASH_AMOUNT)
        with expect_revert("ComputePoolApprovalBelowSlash", pool_id, SLASH_AMOUNT - 1, SLASH_AMOUNT):
            world.provider.send(fns.approvePool(pool_id, SLASH_AMOUNT - 1))
        with expect_revert("ComputePoolUnknownPool", 99):
            world.provider.send(fns.approvePool(99, SLASH_AMOUNT))
        receipt = world.provider.send(fns.approvePool(pool_id, 2 * SLASH_AMOUNT))
        assert world.c.event(receipt, "PoolApproved") == {
            "poolId": pool_id,
            "provider": world.provider.address,
            "maxSlash": 2 * SLASH_AMOUNT,
        }
        with expect_revert("ComputePoolApprovalLowered", pool_id, 2 * SLASH_AMOUNT, SLASH_AMOUNT):
            world.provider.send(fns.approvePool(pool_id, SLASH_AMOUNT))
        world.provider.send(fns.approvePool(pool_id, 3 * SLASH_AMOUNT))  # raising is fine

        receipt = world.provider.send(fns.revokePoolApproval(pool_id))
        assert world.c.event(receipt, "PoolApprovalRevoked") == {"poolId": pool_id, "provider": world.provider.address}
        with expect_revert("ComputePoolNotApproved", pool_id, world.provider.address):
            world.c.join(world.provider, world.creator, pool_id, world.node3, 1, FAR)
        with expect_revert("ComputePoolNotApproved", pool_id, world.provider.address):
            world.provider.send(fns.revokePoolApproval(pool_id))
        world.creator.send(fns.closePool(pool_id))
        with expect_revert("ComputePoolClosed", pool_id):
            world.provider.send(fns.approvePool(pool_id, 3 * SLASH_AMOUNT))


class TestSelfVerdict:
    @pytest.mark.parametrize("who", ["provider", "node1"])
    def test_a_validator_cannot_attest_or_invalidate_its_own_nodes_work(self, world: World, who: str) -> None:
        validator = getattr(world, who)
        role = world.c.pool.functions.VALIDATOR_ROLE().call()
        world.admin.send(world.c.pool.functions.grantRole(role, validator.address))
        own, other = work_key("own"), work_key("other")
        world.c.submit(world.node1, POOL_ID, own)
        world.c.submit(world.node2, POOL_ID, other)
        with expect_revert("ComputePoolSelfVerdict", POOL_ID, own, validator.address):
            world.c.attest(validator, POOL_ID, [other, own])
        with expect_revert("ComputePoolSelfVerdict", POOL_ID, own, validator.address):
            validator.send(world.c.pool.functions.invalidateWork(POOL_ID, own, reason("x"), EVIDENCE))
        world.c.attest(validator, POOL_ID, [other])  # another provider's work it may judge
        world.c.attest(world.validator, POOL_ID, [own])  # and an independent validator this one


class TestOpenWorkKeepsStakeBonded:
    def _unbond_all_it_may(self, world: World) -> int:
        fns = world.c.stake.functions
        free = int(fns.activeStake(world.provider.address).call()) - int(
            fns.requiredStake(world.provider.address).call()
        )
        world.provider.send(fns.unbond(free))
        return free

    def test_pending_work_blocks_withdrawal_and_its_invalidation_still_slashes(self, world: World) -> None:
        key = work_key("pending")
        world.c.submit(world.node1, POOL_ID, key)
        unbonded = self._unbond_all_it_may(world)
        world.chain.increase_time(UNBONDING_PERIOD + 1)
        with expect_revert("StakeManagerOpenWork", world.provider.address, 1):
            world.provider.send(world.c.stake.functions.withdraw())
        receipt = world.validator.send(world.c.pool.functions.invalidateWork(POOL_ID, key, reason("late"), EVIDENCE))
        slashed = world.c.event(receipt, "Slashed")
        assert (slashed["fromUnbonding"], slashed["fromActive"]) == (SLASH_AMOUNT, 0)
        assert _open(world, world.provider) == 0
        before = world.c.balance(world.provider)
        world.provider.send(world.c.stake.functions.withdraw())
        assert world.c.balance(world.provider) - before == unbonded - SLASH_AMOUNT

    def test_work_attested_late_is_still_slashable_inside_its_dispute_window(self, world: World) -> None:
        key = work_key("attested-late")
        world.c.submit(world.node1, POOL_ID, key)
        self._unbond_all_it_may(world)
        world.chain.increase_time(UNBONDING_PERIOD + 1)
        world.c.attest(world.validator, POOL_ID, [key])
        with expect_revert("StakeManagerOpenWork", world.provider.address, 1):
            world.provider.send(world.c.stake.functions.withdraw())
        receipt = world.validator2.send(
            world.c.pool.functions.invalidateWork(POOL_ID, key, reason("dispute"), EVIDENCE)
        )
        assert world.c.event(receipt, "Slashed")["fromUnbonding"] == SLASH_AMOUNT
        assert world.c.work(POOL_ID, key)[2] == WORK_INVALID

    def test_open_work_counts_pending_and_accepted_until_settled(self, world: World) -> None:
        fns = world.c.pool.functions
        paid, forfeited, invalid = work_key("paid"), work_key("forfeited"), work_key("invalid")
        assert _open(world, world.provider) == 0
        for key in (paid, forfeited):
            world.c.submit(world.node1, POOL_ID, key)
        assert _open(world, world.provider) == 2
        world.c.attest(world.validator, POOL_ID, [paid, forfeited])
        assert _open(world, world.provider) == 2  # accepted, still disputable
        world.chain.increase_time(DISPUTE_WINDOW)
        world.validator.send(fns.finalizeWork(POOL_ID, [paid]))
        assert _open(world, world.provider) == 1
        world.c.submit(world.node1, POOL_ID, invalid)
        world.validator.send(fns.invalidateWork(POOL_ID, invalid, reason("bad"), EVIDENCE))  # node1 now Slashed
        assert _open(world, world.provider) == 1
        world.validator.send(fns.finalizeWork(POOL_ID, [forfeited]))  # forfeited: node1 was slashed
        assert _open(world, world.provider) == 0
        assert _open(world, world.provider2) == 0
        self._unbond_all_it_may(world)
        world.chain.increase_time(UNBONDING_PERIOD + 1)
        world.provider.send(world.c.stake.functions.withdraw())  # nothing open: released
