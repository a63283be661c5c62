"""A pool's budget is reserved at attestation and refunded after the pool closes, on anvil.

The attack: a validator attests more work than the budget can pay, and the providers' accepted
work is unpayable (the finalize reverts for lack of budget, their stake stays bonded). With the
reservation the attestation is what reverts, so accepted work is always paid; a closed pool's
creator takes back what no attested work needs; Pending work nobody judged expires.
"""

from __future__ import annotations

from tests.contracts.conftest import DISPUTE_WINDOW, REWARD_PER_UNIT, VALIDATOR_FEE, World
from tests.contracts.helpers import EVIDENCE as EVIDENCE_HASH
from tests.contracts.helpers import (
    TOKEN,
    WORK_ACCEPTED,
    WORK_PENDING,
    expect_revert,
    reason,
    work_key,
)
from tests.contracts.test_compute_pool import accepted, budget, make_pool, submitted

FAR = 10**10
PER_KEY = 10 * REWARD_PER_UNIT + VALIDATOR_FEE
"""Reward and fee of one 10-unit submission."""
WORK_EXPIRED = 7


def _pool(world: World, funded: int) -> int:
    pool_id = make_pool(world, budget=funded)
    world.c.join(world.provider, world.manager, pool_id, world.node1, 7, FAR)
    return pool_id


def _reserved(world: World, pool_id: int) -> tuple[int, int]:
    reserved, wind_up_ends_at = world.c.pool.functions.budgetReserved(pool_id).call()
    return int(reserved), int(wind_up_ends_at)


def _open(world: World) -> int:
    return int(world.c.pool.functions.openWork(world.provider.address).call())


class TestReservation:
    def test_work_the_budget_cannot_pay_is_not_attested(self, world: World) -> None:
        pool_id = _pool(world, PER_KEY + 3 * TOKEN)
        keys = [submitted(world, f"costly-{i}", pool_id=pool_id) for i in range(2)]
        with expect_revert("ComputePoolBudgetExhausted", pool_id, 2 * PER_KEY, PER_KEY + 3 * TOKEN):
            world.c.attest(world.validator, pool_id, keys)
        world.c.attest(world.validator, pool_id, keys[:1])
        assert _reserved(world, pool_id) == (PER_KEY, 0)
        with expect_revert("ComputePoolBudgetExhausted", pool_id, PER_KEY, 3 * TOKEN):
            world.c.attest(world.validator, pool_id, keys[1:])
        assert world.c.work(pool_id, keys[1])[2] == WORK_PENDING  # waits for funding, still judgeable
        world.creator.send(world.c.token.functions.approve(world.c.book.compute_pool, PER_KEY))
        world.creator.send(world.c.pool.functions.fundPool(pool_id, PER_KEY))
        world.c.attest(world.validator, pool_id, keys[1:])
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(pool_id, keys))  # every accepted key is paid
        assert (budget(world, pool_id), _reserved(world, pool_id)[0]) == (3 * TOKEN, 0)

    def test_settling_releases_the_reservation(self, world: World) -> None:
        pool_id = _pool(world, 10 * PER_KEY)
        disputed = accepted(world, "disputed", pool_id=pool_id)
        forfeited = accepted(world, "forfeited", pool_id=pool_id)
        assert _reserved(world, pool_id)[0] == 2 * PER_KEY
        world.validator2.send(world.c.pool.functions.invalidateWork(pool_id, disputed, reason("late"), EVIDENCE_HASH))
        assert _reserved(world, pool_id)[0] == PER_KEY  # invalidated inside its window: released
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(pool_id, [forfeited]))  # node slashed above
        assert _reserved(world, pool_id)[0] == 0
        assert budget(world, pool_id) == 10 * PER_KEY  # nothing paid


class TestWindUp:
    def test_a_closed_pools_creator_gets_back_what_no_attested_work_needs(self, world: World) -> None:
        pool_id = _pool(world, 10 * PER_KEY)
        paid = accepted(world, "paid", pool_id=pool_id)
        unjudged = submitted(world, "unjudged", pool_id=pool_id)
        fns = world.c.pool.functions
        with expect_revert("ComputePoolNotClosed", pool_id, 2):
            world.creator.send(fns.refundBudget(pool_id))
        world.creator.send(fns.closePool(pool_id))
        ends_at = world.chain.timestamp() + DISPUTE_WINDOW
        assert _reserved(world, pool_id) == (PER_KEY, ends_at)
        with expect_revert("ComputePoolWindUpNotOver", pool_id, ends_at):
            world.creator.send(fns.refundBudget(pool_id))
        with expect_revert("ComputePoolWindUpNotOver", pool_id, ends_at):
            world.outsider.send(fns.expireWork(pool_id, [unjudged]))

        world.chain.increase_time(DISPUTE_WINDOW)
        with expect_revert("ComputePoolNotCreatorOrManager", pool_id, world.outsider.address):
            world.outsider.send(fns.refundBudget(pool_id))
        before = world.c.balance(world.creator)
        receipt = world.manager.send(fns.refundBudget(pool_id))  # the manager may ask; the creator is paid
        assert world.c.event(receipt, "PoolBudgetRefunded") == {
            "poolId": pool_id,
            "creator": world.creator.address,
            "amount": 9 * PER_KEY,
            "budget": PER_KEY,
        }
        assert world.c.balance(world.creator) == before + 9 * PER_KEY
        with expect_revert("ComputePoolNothingToRefund", pool_id):
            world.creator.send(fns.refundBudget(pool_id))
        with expect_revert("ComputePoolBudgetExhausted", pool_id, PER_KEY, 0):
            world.c.attest(world.validator, pool_id, [unjudged])  # the refunded budget pays no new work

        open_before = _open(world)
        receipt = world.outsider.send(fns.expireWork(pool_id, [unjudged, paid]))
        assert [e.name for e in world.c.events(receipt)] == ["WorkExpired", "WorkSkipped"]
        assert world.c.work(pool_id, unjudged)[2] == WORK_EXPIRED
        assert world.c.work(pool_id, paid)[2] == WORK_ACCEPTED
        assert _open(world) == open_before - 1  # the provider's stake is no longer held for it
        world.outsider.send(fns.finalizeWork(pool_id, [paid]))  # attested work is still paid
        assert budget(world, pool_id) == 0
        with expect_revert("ComputePoolWorkNotPending", pool_id, work_key("ghost"), 0):
            world.outsider.send(fns.expireWork(pool_id, [work_key("ghost")]))
