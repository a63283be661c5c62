"""StakeManager: stake, unbond into one bucket, withdraw after maturity, slash (unbonding
first), required stake from registered compute units, admin setters."""

from __future__ import annotations

from typing import Any

import pytest

from proofpool.infra.chain.artifacts import Artifact, load_artifact
from tests.contracts.conftest import (
    MIN_STAKE,
    NODE1_UNITS,
    NODE3_UNITS,
    PROVIDER_STAKE,
    STAKE_PER_UNIT,
    UNBONDING_PERIOD,
    World,
)
from tests.contracts.helpers import TOKEN, ZERO_ADDRESS, Actor, expect_revert

PROVIDER_UNITS = NODE1_UNITS + NODE3_UNITS
PROVIDER_REQUIRED = MIN_STAKE + STAKE_PER_UNIT * PROVIDER_UNITS


@pytest.fixture
def slasher(world: World) -> Actor:
    """The outsider, given SLASHER_ROLE so slashing can be observed without a pool."""
    stake = world.c.stake
    world.admin.send(stake.functions.grantRole(world.c.role(stake, "SLASHER_ROLE"), world.outsider.address))
    return world.outsider


def _unbonding(world: World, who: Actor) -> tuple[int, int]:
    return tuple(world.c.stake.functions.unbonding(who.address).call())


def _active(world: World, who: Actor) -> int:
    return world.c.stake.functions.activeStake(who.address).call()


class TestConstruction:
    def test_parameters_and_links(self, world: World) -> None:
        fns = world.c.stake.functions
        assert fns.token().call() == world.c.book.pool_token
        assert fns.computeRegistry().call() == world.c.book.compute_registry
        assert fns.unbondingPeriod().call() == UNBONDING_PERIOD
        assert fns.minStake().call() == MIN_STAKE
        assert fns.stakePerComputeUnit().call() == STAKE_PER_UNIT
        slasher_role = world.c.role(world.c.stake, "SLASHER_ROLE")
        assert fns.hasRole(slasher_role, world.c.book.compute_pool).call()

    @pytest.mark.parametrize("which", ["token", "admin"])
    def test_zero_address_refused(self, world: World, which: str) -> None:
        token = ZERO_ADDRESS if which == "token" else world.c.book.pool_token
        admin = ZERO_ADDRESS if which == "admin" else world.admin.address
        with expect_revert("StakeManagerZeroAddress"):
            world.admin.sender.deploy(load_artifact("StakeManager"), token, admin, 10, 1, 1)

    def test_without_registry_required_stake_is_min_stake_and_full_unbond_allowed(self, world: World) -> None:
        address = world.admin.sender.deploy(
            load_artifact("StakeManager"), world.c.book.pool_token, world.admin.address, 60, MIN_STAKE, STAKE_PER_UNIT
        )
        fresh = world.c.w3.eth.contract(address=address, abi=load_artifact("StakeManager").abi)
        assert fresh.functions.computeRegistry().call() == ZERO_ADDRESS
        assert fresh.functions.requiredStake(world.provider.address).call() == MIN_STAKE
        world.provider.send(world.c.token.functions.approve(address, 500 * TOKEN))
        world.provider.send(fresh.functions.stake(500 * TOKEN))
        world.provider.send(fresh.functions.unbond(500 * TOKEN))
        assert fresh.functions.activeStake(world.provider.address).call() == 0


class TestStake:
    def test_stake_pulls_tokens_and_emits_staked(self, world: World) -> None:
        before = world.c.balance(world.provider)
        receipt = world.c.stake_tokens(world.provider, 25 * TOKEN)
        assert world.c.balance(world.provider) == before - 25 * TOKEN
        assert _active(world, world.provider) == PROVIDER_STAKE + 25 * TOKEN
        assert world.c.event(receipt, "Staked") == {
            "provider": world.provider.address,
            "amount": 25 * TOKEN,
            "activeStake": PROVIDER_STAKE + 25 * TOKEN,
        }

    def test_zero_amount_reverts(self, world: World) -> None:
        with expect_revert("StakeManagerZeroAmount"):
            world.provider.send(world.c.stake.functions.stake(0))

    def test_without_allowance_reverts(self, world: World) -> None:
        with expect_revert("ERC20InsufficientAllowance", world.c.book.stake_manager, 0, TOKEN):
            world.outsider.send(world.c.stake.functions.stake(TOKEN))


class TestUnbond:
    def test_required_stake_follows_registered_units(self, world: World) -> None:
        fns = world.c.stake.functions
        assert fns.requiredStake(world.provider.address).call() == PROVIDER_REQUIRED
        assert fns.requiredStakeFor(3).call() == MIN_STAKE + 3 * STAKE_PER_UNIT
        assert fns.requiredStake(world.outsider.address).call() == MIN_STAKE

    def test_unbond_moves_stake_to_bucket_maturing_after_period(self, world: World) -> None:
        receipt = world.provider.send(world.c.stake.functions.unbond(100 * TOKEN))
        now = world.chain.timestamp()
        assert _active(world, world.provider) == PROVIDER_STAKE - 100 * TOKEN
        assert _unbonding(world, world.provider) == (100 * TOKEN, now + UNBONDING_PERIOD)
        assert world.c.event(receipt, "UnbondStarted") == {
            "provider": world.provider.address,
            "amount": 100 * TOKEN,
            "unbondingAmount": 100 * TOKEN,
            "maturesAt": now + UNBONDING_PERIOD,
        }

    def test_second_unbond_adds_to_bucket_and_restarts_maturity(self, world: World) -> None:
        world.provider.send(world.c.stake.functions.unbond(100 * TOKEN))
        world.chain.increase_time(1000)
        receipt = world.provider.send(world.c.stake.functions.unbond(50 * TOKEN))
        now = world.chain.timestamp()
        assert _unbonding(world, world.provider) == (150 * TOKEN, now + UNBONDING_PERIOD)
        assert world.c.event(receipt, "UnbondStarted")["unbondingAmount"] == 150 * TOKEN

    def test_unbond_down_to_exactly_required_stake_is_allowed(self, world: World) -> None:
        world.provider.send(world.c.stake.functions.unbond(PROVIDER_STAKE - PROVIDER_REQUIRED))
        assert _active(world, world.provider) == PROVIDER_REQUIRED

    def test_unbond_below_required_stake_reverts(self, world: World) -> None:
        amount = PROVIDER_STAKE - PROVIDER_REQUIRED + 1
        with expect_revert(
            "StakeManagerBelowRequiredStake", world.provider.address, PROVIDER_REQUIRED - 1, PROVIDER_REQUIRED
        ):
            world.provider.send(world.c.stake.functions.unbond(amount))

    def test_without_compute_units_everything_can_unbond(self, world: World) -> None:
        world.c.stake_tokens(world.outsider, 10 * TOKEN)  # below minStake, but no units
        world.outsider.send(world.c.stake.functions.unbond(10 * TOKEN))
        assert _active(world, world.outsider) == 0

    def test_removing_nodes_releases_required_stake(self, world: World) -> None:
        world.provider.send(world.c.registry.functions.removeNode(world.node1.address))
        world.provider.send(world.c.registry.functions.removeNode(world.node3.address))
        world.provider.send(world.c.stake.functions.unbond(PROVIDER_STAKE))
        assert _active(world, world.provider) == 0

    def test_more_than_active_reverts(self, world: World) -> None:
        with expect_revert("StakeManagerInsufficientStake", world.provider.address, PROVIDER_STAKE, PROVIDER_STAKE + 1):
            world.provider.send(world.c.stake.functions.unbond(PROVIDER_STAKE + 1))

    def test_zero_amount_reverts(self, world: World) -> None:
        with expect_revert("StakeManagerZeroAmount"):
            world.provider.send(world.c.stake.functions.unbond(0))


class TestWithdraw:
    def test_nothing_unbonding_reverts(self, world: World) -> None:
        with expect_revert("StakeManagerNothingToWithdraw", world.provider.address):
            world.provider.send(world.c.stake.functions.withdraw())

    def test_before_maturity_reverts_with_maturity_time(self, world: World) -> None:
        world.provider.send(world.c.stake.functions.unbond(100 * TOKEN))
        matures_at = _unbonding(world, world.provider)[1]
        world.chain.increase_time(UNBONDING_PERIOD - 100)
        with expect_revert("StakeManagerUnbondingNotMatured", world.provider.address, matures_at):
            world.provider.send(world.c.stake.functions.withdraw())

    def test_at_maturity_transfers_bucket_and_clears_it(self, world: World) -> None:
        world.provider.send(world.c.stake.functions.unbond(100 * TOKEN))
        matures_at = _unbonding(world, world.provider)[1]
        before = world.c.balance(world.provider)
        world.chain.set_next_timestamp(matures_at)
        receipt = world.provider.send(world.c.stake.functions.withdraw(), gas=200_000)
        assert world.c.balance(world.provider) == before + 100 * TOKEN
        assert _unbonding(world, world.provider) == (0, 0)
        assert world.c.event(receipt, "Withdrawn") == {"provider": world.provider.address, "amount": 100 * TOKEN}
        with expect_revert("StakeManagerNothingToWithdraw", world.provider.address):
            world.provider.send(world.c.stake.functions.withdraw())


class TestSlash:
    def test_takes_unbonding_first_then_active(self, world: World, slasher: Actor) -> None:
        world.provider.send(world.c.stake.functions.unbond(300 * TOKEN))
        before = world.c.balance(slasher)

        receipt = slasher.send(world.c.stake.functions.slash(world.provider.address, 200 * TOKEN))
        assert world.c.event(receipt, "Slashed") == {
            "provider": world.provider.address,
            "slasher": slasher.address,
            "requested": 200 * TOKEN,
            "fromUnbonding": 200 * TOKEN,
            "fromActive": 0,
        }
        assert _unbonding(world, world.provider)[0] == 100 * TOKEN
        assert _active(world, world.provider) == 700 * TOKEN

        receipt = slasher.send(world.c.stake.functions.slash(world.provider.address, 150 * TOKEN))
        slashed = world.c.event(receipt, "Slashed")
        assert (slashed["fromUnbonding"], slashed["fromActive"]) == (100 * TOKEN, 50 * TOKEN)
        assert _unbonding(world, world.provider)[0] == 0
        assert _active(world, world.provider) == 650 * TOKEN
        assert world.c.balance(slasher) == before + 350 * TOKEN

    def test_is_capped_by_what_the_provider_has(self, world: World, slasher: Actor) -> None:
        fn = world.c.stake.functions.slash(world.provider.address, 5_000 * TOKEN)
        assert slasher.call(fn) == PROVIDER_STAKE
        receipt = slasher.send(fn)
        assert world.c.event(receipt, "Slashed")["fromActive"] == PROVIDER_STAKE
        assert _active(world, world.provider) == 0

    def test_provider_without_stake_yields_zero(self, world: World, slasher: Actor) -> None:
        before = world.c.balance(slasher)
        receipt = slasher.send(world.c.stake.functions.slash(world.outsider.address, TOKEN))
        assert world.c.event(receipt, "Slashed")["fromActive"] == 0
        assert world.c.balance(slasher) == before
        assert world.c.events(receipt, "Transfer") == []


class TestAdmin:
    def test_set_compute_registry_emits_old_and_new(self, world: World) -> None:
        new = world.outsider.address
        receipt = world.admin.send(world.c.stake.functions.setComputeRegistry(new))
        assert world.c.event(receipt, "ComputeRegistryUpdated") == {
            "oldRegistry": world.c.book.compute_registry,
            "newRegistry": new,
        }
        assert world.c.stake.functions.computeRegistry().call() == new

    def test_set_compute_registry_refuses_zero(self, world: World) -> None:
        with expect_revert("StakeManagerZeroAddress"):
            world.admin.send(world.c.stake.functions.setComputeRegistry(ZERO_ADDRESS))

    def test_unbonding_period_only_increases(self, world: World) -> None:
        fns = world.c.stake.functions
        for proposed in (UNBONDING_PERIOD, UNBONDING_PERIOD - 1):
            with expect_revert("StakeManagerUnbondingPeriodNotIncreased", UNBONDING_PERIOD, proposed):
                world.admin.send(fns.setUnbondingPeriod(proposed))
        receipt = world.admin.send(fns.setUnbondingPeriod(UNBONDING_PERIOD + 1))
        assert world.c.event(receipt, "UnbondingPeriodUpdated") == {
            "oldPeriod": UNBONDING_PERIOD,
            "newPeriod": UNBONDING_PERIOD + 1,
        }
        assert fns.unbondingPeriod().call() == UNBONDING_PERIOD + 1

    def test_set_stake_params_emits_both_updates(self, world: World) -> None:
        receipt = world.admin.send(world.c.stake.functions.setStakeParams(7 * TOKEN, 3 * TOKEN))
        assert world.c.event(receipt, "MinStakeUpdated") == {"oldMinStake": MIN_STAKE, "newMinStake": 7 * TOKEN}
        assert world.c.event(receipt, "StakePerComputeUnitUpdated") == {
            "oldStakePerComputeUnit": STAKE_PER_UNIT,
            "newStakePerComputeUnit": 3 * TOKEN,
        }
        assert (
            world.c.stake.functions.requiredStake(world.provider.address).call()
            == 7 * TOKEN + 3 * TOKEN * PROVIDER_UNITS
        )


class TestHostileToken:
    """StakeManager against a token that re-enters or lies (contracts/mocks/HostileToken.sol)."""

    REENTER, RETURN_FALSE = 1, 2

    def _setup(self, world: World, artifact: Artifact) -> tuple[Any, Any]:
        token_address = world.admin.sender.deploy(artifact)
        token = world.c.w3.eth.contract(address=token_address, abi=artifact.abi)
        stake_address = world.admin.sender.deploy(
            load_artifact("StakeManager"), token_address, world.admin.address, 60, 0, 0
        )
        stake = world.c.w3.eth.contract(address=stake_address, abi=load_artifact("StakeManager").abi)
        world.provider.send(token.functions.mint(world.provider.address, 100))
        world.provider.send(token.functions.approve(stake_address, 100))
        world.provider.send(stake.functions.stake(100))
        world.provider.send(stake.functions.unbond(100))
        world.chain.increase_time(60)
        return token, stake

    def test_reentrant_withdraw_is_refused(self, world: World, hostile_token_artifact: Artifact) -> None:
        token, stake = self._setup(world, hostile_token_artifact)
        payload = stake.functions.withdraw()._encode_transaction_data()
        world.provider.send(token.functions.arm(self.REENTER, stake.address, payload))
        with expect_revert("ReentrancyGuardReentrantCall"):
            world.provider.send(stake.functions.withdraw())

    def test_token_returning_false_reverts(self, world: World, hostile_token_artifact: Artifact) -> None:
        token, stake = self._setup(world, hostile_token_artifact)
        world.provider.send(token.functions.arm(self.RETURN_FALSE, ZERO_ADDRESS, b""))
        with expect_revert("SafeERC20FailedOperation", token.address):
            world.provider.send(stake.functions.withdraw())
