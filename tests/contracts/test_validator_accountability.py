"""Validators are accountable: the attack of a rogue validator key, run against the contracts on anvil.

A validator stakes; every verdict commits an evidence hash; a rejection slashes only after the
pool's challenge window, during which other staked validators contest it by recomputation; an
overturned verdict (a rejection a quorum contested, or an attestation of work later invalidated)
slashes the validator that gave it, to the validators who proved it wrong.
"""

from __future__ import annotations

import pytest

from tests.contracts.conftest import DISPUTE_WINDOW, PROVIDER_STAKE, SLASH_AMOUNT, UNBONDING_PERIOD, World
from tests.contracts.helpers import (
    EVIDENCE,
    TOKEN,
    WORK_ACCEPTED,
    WORK_INVALID,
    WORK_PENDING,
    WORK_REJECTED,
    Actor,
    expect_revert,
    reason,
    work_key,
)

FAR = 10**10
CHALLENGE_WINDOW = 600
MIN_VALIDATOR_STAKE = 200 * TOKEN
VALIDATOR_SLASH = 100 * TOKEN
VALIDATOR_STAKE = 2 * MIN_VALIDATOR_STAKE
"""What the test validators stake: enough for two overturned verdicts."""
CONTESTED = bytes.fromhex("c0" * 32)
"""The evidence hash of a contester's recomputation."""


@pytest.fixture
def game(world: World) -> int:
    """Staked validators and a started pool (node1 joined) whose rejections wait CHALLENGE_WINDOW
    seconds and are overturned by one contest; returns the pool id."""
    return _challenge_pool(world, quorum=1)


def _challenge_pool(world: World, quorum: int) -> int:
    fns = world.c.pool.functions
    world.admin.send(fns.setValidatorStakeParams(MIN_VALIDATOR_STAKE, VALIDATOR_SLASH))
    for validator in (world.validator, world.validator2):
        world.c.fund(world.admin, validator)
        world.c.stake_tokens(validator, VALIDATOR_STAKE)
    world.creator.send(fns.createPool(world.pool_params(challengeWindow=CHALLENGE_WINDOW, contestQuorum=quorum)))
    pool_id = int(fns.poolCount().call())
    world.creator.send(world.c.token.functions.approve(world.c.book.compute_pool, 1_000 * TOKEN))
    world.creator.send(fns.fundPool(pool_id, 1_000 * TOKEN))
    world.creator.send(fns.startPool(pool_id))
    world.provider.send(fns.approvePool(pool_id, PROVIDER_STAKE))
    world.c.join(world.provider, world.manager, pool_id, world.node1, 500 + pool_id, FAR)
    return pool_id


def _active(world: World, who: Actor) -> int:
    return int(world.c.stake.functions.activeStake(who.address).call())


def _stake(world: World, who: Actor) -> int:
    """Active plus unbonding stake of `who`."""
    fns = world.c.stake.functions
    return int(fns.activeStake(who.address).call()) + int(fns.unbonding(who.address).call()[0])


def _reject(world: World, pool_id: int, key: bytes, validator: Actor | None = None):
    fn = world.c.pool.functions.invalidateWork(pool_id, key, reason("made_up"), EVIDENCE)
    return (validator or world.validator).send(fn)


def _contest(world: World, pool_id: int, key: bytes, validator: Actor | None = None):
    return (validator or world.validator2).send(world.c.pool.functions.contestRejection(pool_id, key, CONTESTED))


def _status(world: World, pool_id: int, key: bytes) -> int:
    return int(world.c.work(pool_id, key)[2])


def _rewards(world: World, who: Actor) -> int:
    return int(world.c.pool.functions.rewardBalance(who.address).call())


class TestRogueValidator:
    def test_a_rogue_validator_cannot_slash_honest_work(self, world: World, game: int) -> None:
        """The attack: one validator key rejects five honest submissions with no evidence. Another
        validator recomputes each and contests: every rejection is overturned, the provider loses
        nothing, and the rogue validator pays for its false verdicts until it can give no more."""
        keys = [work_key(f"honest-{i}") for i in range(5)]
        for key in keys:
            world.c.submit(world.node1, game, key)
        provider_before = _stake(world, world.provider)

        _reject(world, game, keys[0])
        assert _status(world, game, keys[0]) == WORK_REJECTED
        receipt = _contest(world, game, keys[0])
        assert [e.name for e in world.c.events(receipt)] == [
            "RejectionContested",
            "RejectionOverturned",
            "Slashed",
            "Transfer",  # stake manager -> pool
            "ValidatorSlashed",
        ]
        assert world.c.event(receipt, "RejectionOverturned") == {
            "poolId": game,
            "workKey": keys[0],
            "validator": world.validator.address,
            "restored": WORK_PENDING,
        }
        assert world.c.event(receipt, "ValidatorSlashed") == {
            "poolId": game,
            "workKey": keys[0],
            "validator": world.validator.address,
            "beneficiary": world.validator2.address,
            "amount": VALIDATOR_SLASH,
        }
        assert _status(world, game, keys[0]) == WORK_PENDING

        for key in keys[1:3]:
            _reject(world, game, key)
            _contest(world, game, key)
        # Slashed three times, the rogue validator's stake is below the minimum: no more verdicts.
        left = VALIDATOR_STAKE - 3 * VALIDATOR_SLASH
        with expect_revert("ComputePoolValidatorUnderstaked", world.validator.address, left, MIN_VALIDATOR_STAKE):
            _reject(world, game, keys[3])
        assert _stake(world, world.provider) == provider_before
        assert _rewards(world, world.validator2) == 3 * VALIDATOR_SLASH
        assert [_status(world, game, key) for key in keys] == [WORK_PENDING] * 5
        # The honest work is still judged normally.
        world.c.attest(world.validator2, game, keys)
        assert [_status(world, game, key) for key in keys] == [WORK_ACCEPTED] * 5

    def test_an_unstaked_validator_gives_no_verdict(self, world: World, game: int) -> None:
        key = work_key("unstaked")
        world.c.submit(world.node1, game, key)
        world.validator.send(world.c.stake.functions.unbond(VALIDATOR_STAKE))
        refused = ("ComputePoolValidatorUnderstaked", world.validator.address, 0, MIN_VALIDATOR_STAKE)
        with expect_revert(*refused):
            world.c.attest(world.validator, game, [key])
        with expect_revert(*refused):
            _reject(world, game, key)
        _reject(world, game, key, world.validator2)
        with expect_revert(*refused):
            _contest(world, game, key, world.validator)

    def test_a_rejection_slashes_only_after_its_challenge_window(self, world: World, game: int) -> None:
        key = work_key("garbage")
        world.c.submit(world.node1, game, key)
        receipt = _reject(world, game, key)
        executable_at = world.chain.timestamp() + CHALLENGE_WINDOW
        assert world.c.event(receipt, "WorkRejected")["executableAt"] == executable_at
        assert [e.name for e in world.c.events(receipt)] == ["WorkRejected"]
        rejection = world.c.pool.functions.getRejection(game, key).call()
        assert rejection == [world.validator.address, reason("made_up"), executable_at, WORK_PENDING, []]
        with expect_revert("ComputePoolChallengeWindowOpen", game, key, executable_at):
            world.outsider.send(world.c.pool.functions.executeRejection(game, key))
        # While it waits, the work is open (stake stays bonded) and no other verdict applies to it.
        assert int(world.c.pool.functions.openWork(world.provider.address).call()) >= 1
        with expect_revert("ComputePoolWorkNotDisputable", game, key, WORK_REJECTED):
            _reject(world, game, key, world.validator2)
        assert world.c.event(world.c.attest(world.validator2, game, [key]), "WorkSkipped")["status"] == WORK_REJECTED

        world.chain.increase_time(CHALLENGE_WINDOW)
        with expect_revert("ComputePoolChallengeWindowClosed", game, key, executable_at):
            _contest(world, game, key)
        provider_before = _stake(world, world.provider)
        receipt = world.outsider.send(world.c.pool.functions.executeRejection(game, key))
        assert [e.name for e in world.c.events(receipt)][:3] == ["WorkInvalidated", "NodeEjected", "Slashed"]
        assert world.c.event(receipt, "WorkInvalidated")["validator"] == world.validator.address
        assert _stake(world, world.provider) == provider_before - SLASH_AMOUNT
        assert _status(world, game, key) == WORK_INVALID
        assert world.c.pool.functions.getRejection(game, key).call()[0] == "0x" + "0" * 40
        with expect_revert("ComputePoolWorkNotRejected", game, key, WORK_INVALID):
            world.outsider.send(world.c.pool.functions.executeRejection(game, key))

    def test_contest_rules(self, world: World) -> None:
        """A quorum of two: the reporter cannot contest itself, a contester counts once, and the
        slash is split between the two contesters."""
        pool_id = _challenge_pool(world, quorum=2)
        third = world.attester  # a third staked validator
        world.admin.send(world.c.pool.functions.grantRole(world.c.role(world.c.pool, "VALIDATOR_ROLE"), third.address))
        world.c.fund(world.admin, third)
        world.c.stake_tokens(third, VALIDATOR_STAKE)
        key = work_key("quorum")
        world.c.submit(world.node1, pool_id, key)
        _reject(world, pool_id, key)
        with expect_revert("ComputePoolSelfVerdict", pool_id, key, world.validator.address):
            _contest(world, pool_id, key, world.validator)
        receipt = _contest(world, pool_id, key)
        assert world.c.event(receipt, "RejectionContested")["contests"] == 1
        assert _status(world, pool_id, key) == WORK_REJECTED  # one of two
        with expect_revert("ComputePoolAlreadyContested", pool_id, key, world.validator2.address):
            _contest(world, pool_id, key)
        receipt = _contest(world, pool_id, key, third)
        shares = {e.args["beneficiary"]: e.args["amount"] for e in world.c.events(receipt, "ValidatorSlashed")}
        assert shares == {world.validator2.address: VALIDATOR_SLASH // 2, third.address: VALIDATOR_SLASH // 2}
        assert _status(world, pool_id, key) == WORK_PENDING

    def test_an_overturned_rejection_restores_an_attestation(self, world: World, game: int) -> None:
        key = work_key("attested")
        world.c.submit(world.node1, game, key)
        world.c.attest(world.validator2, game, [key])
        attested = world.c.work(game, key)
        _reject(world, game, key)
        assert world.c.work(game, key)[7] == world.validator.address  # the reporter, while Rejected
        _contest(world, game, key)
        assert world.c.work(game, key) == attested  # status, attester and dispute clock as before
        world.chain.increase_time(DISPUTE_WINDOW)
        world.outsider.send(world.c.pool.functions.finalizeWork(game, [key]))
        assert _rewards(world, world.validator2) > VALIDATOR_SLASH  # its fee on top of the slash

    def test_the_attester_of_work_found_invalid_is_slashed(self, world: World, game: int) -> None:
        key = work_key("waved-through")
        world.c.submit(world.node1, game, key)
        world.c.attest(world.validator2, game, [key])
        _reject(world, game, key)
        world.chain.increase_time(CHALLENGE_WINDOW)
        receipt = world.outsider.send(world.c.pool.functions.executeRejection(game, key))
        assert world.c.event(receipt, "ValidatorSlashed") == {
            "poolId": game,
            "workKey": key,
            "validator": world.validator2.address,
            "beneficiary": world.validator.address,
            "amount": VALIDATOR_SLASH,
        }
        assert _active(world, world.validator2) == VALIDATOR_STAKE - VALIDATOR_SLASH

    def test_unbonding_does_not_take_a_verdicts_stake_out_of_reach(self, world: World, game: int) -> None:
        """The rogue validator rejects, then unbonds its whole stake at once: the unbonding period is
        longer than any challenge window, so the overturn still finds the stake."""
        key = work_key("run-away")
        world.c.submit(world.node1, game, key)
        _reject(world, game, key)
        world.validator.send(world.c.stake.functions.unbond(VALIDATOR_STAKE))
        _contest(world, game, key)
        assert _stake(world, world.validator) == VALIDATOR_STAKE - VALIDATOR_SLASH
        assert _rewards(world, world.validator2) == VALIDATOR_SLASH

    def test_attestations_commit_their_evidence(self, world: World, game: int) -> None:
        keys = [work_key("e1"), work_key("e2")]
        for key in keys:
            world.c.submit(world.node1, game, key)
        receipt = world.c.attest(world.validator, game, keys)
        assert world.c.event(receipt, "AttestationEvidence") == {
            "poolId": game,
            "validator": world.validator.address,
            "evidenceHash": EVIDENCE,
            "batchSize": 2,
        }


class TestRules:
    @pytest.mark.parametrize(
        ("window", "quorum"),
        [
            (UNBONDING_PERIOD - DISPUTE_WINDOW, 1),  # a verdict's stake could be withdrawn before it is overturned
            (60, 0),
            (60, 33),
        ],
    )
    def test_challenge_rules_a_pool_cannot_have(self, world: World, window: int, quorum: int) -> None:
        params = world.pool_params(challengeWindow=window, contestQuorum=quorum)
        with expect_revert("ComputePoolInvalidChallengeRules", window, quorum, UNBONDING_PERIOD):
            world.creator.send(world.c.pool.functions.createPool(params))

    def test_pool_creation_announces_its_rules(self, world: World) -> None:
        params = world.pool_params(challengeWindow=60, contestQuorum=3)
        receipt = world.creator.send(world.c.pool.functions.createPool(params))
        pool_id = int(world.c.pool.functions.poolCount().call())
        assert world.c.event(receipt, "PoolChallengeRules") == {
            "poolId": pool_id,
            "challengeWindow": 60,
            "contestQuorum": 3,
        }
        assert world.c.pool.functions.challengeRules(pool_id).call() == [60, 3]

    def test_a_validator_slash_cannot_exceed_the_validator_stake(self, world: World) -> None:
        with expect_revert("ComputePoolInvalidValidatorSlash", TOKEN, 2 * TOKEN):
            world.admin.send(world.c.pool.functions.setValidatorStakeParams(TOKEN, 2 * TOKEN))
        receipt = world.admin.send(world.c.pool.functions.setValidatorStakeParams(2 * TOKEN, TOKEN))
        assert world.c.event(receipt, "ValidatorStakeParamsUpdated") == {
            "minValidatorStake": 2 * TOKEN,
            "validatorSlashAmount": TOKEN,
        }
        assert world.c.pool.functions.validatorStakeParams().call() == [2 * TOKEN, TOKEN]
