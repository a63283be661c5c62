"""Every restricted function: it works for the role that may call it and is refused, with the
right custom error, to every other actor of the world."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.deploy import load_address_book, write_address_book
from tests.contracts.conftest import DISPUTE_WINDOW, POOL_ID, PROVIDER_STAKE, UNBONDING_PERIOD, World
from tests.contracts.helpers import EVIDENCE, TOKEN, Actor, expect_revert, reason, work_key

ACTORS = (
    "admin", "provider", "provider2", "validator", "validator2", "manager", "creator", "attester", "outsider",
    "node1", "node2",
)  # fmt: skip


@dataclass(frozen=True)
class Restricted:
    """A restricted call: who may make it and what everybody else gets."""

    name: str
    call: Callable[[World], Any]
    allowed: tuple[str, ...]
    error: Callable[[World, Actor], tuple[str, tuple]]


def _role_error(contract: str, role: str) -> Callable[[World, Actor], tuple[str, tuple]]:
    def error(world: World, actor: Actor) -> tuple[str, tuple]:
        return "AccessControlUnauthorizedAccount", (actor.address, world.c.role(getattr(world.c, contract), role))

    return error


def _pending_key(world: World) -> bytes:
    key = work_key("access-control")
    world.c.submit(world.node1, POOL_ID, key)
    return key


def _created_pool(world: World) -> int:
    world.creator.send(world.c.pool.functions.createPool(world.pool_params()))
    return world.c.pool.functions.poolCount().call()


def _rejected_key(world: World) -> tuple[int, bytes]:
    """A key of node1 that `validator` rejected in a new pool with a challenge window."""
    pool = world.c.pool.functions
    world.creator.send(pool.createPool(world.pool_params(challengeWindow=60, contestQuorum=2)))
    pool_id = pool.poolCount().call()
    world.creator.send(pool.startPool(pool_id))
    world.provider.send(pool.approvePool(pool_id, PROVIDER_STAKE))
    signature = world.c.invite(world.manager, pool_id, world.node1, 77, 10**10)
    world.provider.send(pool.joinPool(pool_id, world.node1.address, 77, 10**10, signature))
    key = work_key("contested")
    world.c.submit(world.node1, pool_id, key)
    world.validator.send(pool.invalidateWork(pool_id, key, reason("x"), EVIDENCE))
    return pool_id, key


def _contest(world: World) -> Any:
    pool_id, key = _rejected_key(world)
    return world.c.pool.functions.contestRejection(pool_id, key, EVIDENCE)


def _contest_error(world: World, actor: Actor) -> tuple[str, tuple]:
    if actor.address == world.validator.address:  # the reporter may not contest its own rejection
        return "ComputePoolSelfVerdict", (
            world.c.pool.functions.poolCount().call(),
            work_key("contested"),
            actor.address,
        )
    return _role_error("pool", "VALIDATOR_ROLE")(world, actor)


def _refund(world: World) -> Any:
    """refundBudget of POOL_ID, closed and past its wind-up."""
    world.creator.send(world.c.pool.functions.closePool(POOL_ID))
    world.chain.increase_time(DISPUTE_WINDOW)
    return world.c.pool.functions.refundBudget(POOL_ID)


def _join_node3(world: World) -> Any:
    signature = world.c.invite(world.manager, POOL_ID, world.node3, 99, 10**10)
    return world.c.pool.functions.joinPool(POOL_ID, world.node3.address, 99, 10**10, signature)


CASES = [
    Restricted("PoolToken.mint", lambda w: w.c.token.functions.mint(w.outsider.address, 1),
               ("admin",), _role_error("token", "MINTER_ROLE")),
    Restricted("PoolToken.grantRole", lambda w: w.c.token.functions.grantRole(
                   w.c.role(w.c.token, "MINTER_ROLE"), w.outsider.address),
               ("admin",), _role_error("token", "DEFAULT_ADMIN_ROLE")),
    Restricted("StakeManager.slash", lambda w: w.c.stake.functions.slash(w.provider.address, 1),
               (), _role_error("stake", "SLASHER_ROLE")),
    Restricted("StakeManager.setComputeRegistry",
               lambda w: w.c.stake.functions.setComputeRegistry(w.c.book.compute_registry),
               ("admin",), _role_error("stake", "DEFAULT_ADMIN_ROLE")),
    Restricted("StakeManager.setWorkLedger", lambda w: w.c.stake.functions.setWorkLedger(w.c.book.compute_pool),
               ("admin",), _role_error("stake", "DEFAULT_ADMIN_ROLE")),
    Restricted("StakeManager.setUnbondingPeriod",
               lambda w: w.c.stake.functions.setUnbondingPeriod(UNBONDING_PERIOD + 1),
               ("admin",), _role_error("stake", "DEFAULT_ADMIN_ROLE")),
    Restricted("StakeManager.setStakeParams", lambda w: w.c.stake.functions.setStakeParams(1, 1),
               ("admin",), _role_error("stake", "DEFAULT_ADMIN_ROLE")),
    Restricted("StakeManager.grantRole", lambda w: w.c.stake.functions.grantRole(
                   w.c.role(w.c.stake, "SLASHER_ROLE"), w.outsider.address),
               ("admin",), _role_error("stake", "DEFAULT_ADMIN_ROLE")),
    Restricted("ComputeRegistry.attestNode", lambda w: w.c.registry.functions.attestNode(w.node1.address),
               ("attester",), _role_error("registry", "ATTESTER_ROLE")),
    Restricted("ComputeRegistry.grantRole", lambda w: w.c.registry.functions.grantRole(
                   w.c.role(w.c.registry, "ATTESTER_ROLE"), w.outsider.address),
               ("admin",), _role_error("registry", "DEFAULT_ADMIN_ROLE")),
    Restricted("ComputeRegistry.removeNode", lambda w: w.c.registry.functions.removeNode(w.node1.address),
               ("provider",), lambda w, a: ("ComputeRegistryNotNodeProvider", (w.node1.address, a.address))),
    Restricted("ComputePool.attestWork", lambda w: w.c.pool.functions.attestWork(POOL_ID, [_pending_key(w)], EVIDENCE),
               ("validator", "validator2"), _role_error("pool", "VALIDATOR_ROLE")),
    Restricted("ComputePool.invalidateWork",
               lambda w: w.c.pool.functions.invalidateWork(POOL_ID, _pending_key(w), reason("x"), EVIDENCE),
               ("validator", "validator2"), _role_error("pool", "VALIDATOR_ROLE")),
    Restricted("ComputePool.contestRejection", _contest, ("validator2",), _contest_error),
    Restricted("ComputePool.setValidatorStakeParams",
               lambda w: w.c.pool.functions.setValidatorStakeParams(2 * TOKEN, TOKEN),
               ("admin",), _role_error("pool", "DEFAULT_ADMIN_ROLE")),
    Restricted("ComputePool.grantRole", lambda w: w.c.pool.functions.grantRole(
                   w.c.role(w.c.pool, "VALIDATOR_ROLE"), w.outsider.address),
               ("admin",), _role_error("pool", "DEFAULT_ADMIN_ROLE")),
    Restricted("ComputePool.startPool", lambda w: w.c.pool.functions.startPool(_created_pool(w)),
               ("creator", "manager"), lambda w, a: ("ComputePoolNotCreatorOrManager", (2, a.address))),
    Restricted("ComputePool.refundBudget", _refund,
               ("creator", "manager"), lambda w, a: ("ComputePoolNotCreatorOrManager", (POOL_ID, a.address))),
    Restricted("ComputePool.closePool", lambda w: w.c.pool.functions.closePool(POOL_ID),
               ("creator", "manager"), lambda w, a: ("ComputePoolNotCreatorOrManager", (POOL_ID, a.address))),
    Restricted("ComputePool.ejectNode", lambda w: w.c.pool.functions.ejectNode(POOL_ID, w.node1.address),
               ("manager",), lambda w, a: ("ComputePoolNotManager", (POOL_ID, a.address))),
    Restricted("ComputePool.blacklistNode", lambda w: w.c.pool.functions.blacklistNode(POOL_ID, w.node3.address),
               ("manager",), lambda w, a: ("ComputePoolNotManager", (POOL_ID, a.address))),
    Restricted("ComputePool.publishCheckpoint",
               lambda w: w.c.pool.functions.publishCheckpoint(POOL_ID, 1, work_key("m"), "s3://m"),
               ("manager",), lambda w, a: ("ComputePoolNotManager", (POOL_ID, a.address))),
    Restricted("ComputePool.leavePool", lambda w: w.c.pool.functions.leavePool(POOL_ID, w.node1.address),
               ("provider",), lambda w, a: ("ComputePoolNotNodeProvider", (POOL_ID, w.node1.address, a.address))),
    Restricted("ComputePool.joinPool", _join_node3,
               ("provider", "node3"),
               lambda w, a: ("ComputePoolNotNodeProvider", (POOL_ID, w.node3.address, a.address))),
    Restricted("ComputePool.approvePool", lambda w: w.c.pool.functions.approvePool(POOL_ID, PROVIDER_STAKE),
               ("provider", "provider2"), lambda w, a: ("ComputePoolNotProvider", (a.address,))),
    Restricted("ComputePool.revokePoolApproval", lambda w: w.c.pool.functions.revokePoolApproval(POOL_ID),
               ("provider", "provider2"), lambda w, a: ("ComputePoolNotApproved", (POOL_ID, a.address))),
    Restricted("ComputePool.submitWork",
               lambda w: w.c.pool.functions.submitWork(POOL_ID, w.node1.address, work_key("s"), 1, 1),
               ("node1",), lambda w, a: ("ComputePoolCallerNotNode", (w.node1.address, a.address))),
    Restricted("ComputePool.submitWorkBundle",
               lambda w: w.c.pool.functions.submitWorkBundle(POOL_ID, w.node1.address, [work_key("b")], [1], 1),
               ("node1",), lambda w, a: ("ComputePoolCallerNotNode", (w.node1.address, a.address))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "actor"),
    [pytest.param(case, actor, id=f"{case.name}-{actor}") for case in CASES for actor in case.allowed],
)
def test_allowed_actor_may_call(world: World, case: Restricted, actor: str) -> None:
    getattr(world, actor).send(case.call(world))


@pytest.mark.parametrize(
    ("case", "actor"),
    [
        pytest.param(case, actor, id=f"{case.name}-{actor}")
        for case in CASES
        for actor in ACTORS
        if actor not in case.allowed
    ],
)
def test_everyone_else_is_refused(world: World, case: Restricted, actor: str) -> None:
    caller = getattr(world, actor)
    fn = case.call(world)
    name, args = case.error(world, caller)
    with expect_revert(name, *args):
        caller.send(fn)


def test_compute_pool_is_the_only_slasher(world: World) -> None:
    stake = world.c.stake
    role = world.c.role(stake, "SLASHER_ROLE")
    assert stake.functions.hasRole(role, world.c.book.compute_pool).call()
    assert not any(stake.functions.hasRole(role, getattr(world, a).address).call() for a in ACTORS)


ROLES = {
    "token": "MINTER_ROLE",
    "stake": "SLASHER_ROLE",
    "registry": "ATTESTER_ROLE",
    "pool": "VALIDATOR_ROLE",
}


@pytest.mark.parametrize("contract", list(ROLES))
class TestRoleAdministration:
    def test_default_admin_administers_the_role(self, world: World, contract: str) -> None:
        c = getattr(world.c, contract)
        role = world.c.role(c, ROLES[contract])
        assert c.functions.getRoleAdmin(role).call() == b"\x00" * 32
        assert c.functions.hasRole(b"\x00" * 32, world.admin.address).call()

    def test_grant_then_revoke_emits_events(self, world: World, contract: str) -> None:
        c = getattr(world.c, contract)
        role = world.c.role(c, ROLES[contract])
        receipt = world.admin.send(c.functions.grantRole(role, world.outsider.address))
        assert world.c.event(receipt, "RoleGranted") == {
            "role": role,
            "account": world.outsider.address,
            "sender": world.admin.address,
        }
        receipt = world.admin.send(c.functions.revokeRole(role, world.outsider.address))
        assert world.c.event(receipt, "RoleRevoked")["account"] == world.outsider.address
        assert not c.functions.hasRole(role, world.outsider.address).call()

    def test_holder_may_renounce_only_for_itself(self, world: World, contract: str) -> None:
        c = getattr(world.c, contract)
        role = world.c.role(c, ROLES[contract])
        world.admin.send(c.functions.grantRole(role, world.outsider.address))
        with expect_revert("AccessControlBadConfirmation"):
            world.outsider.send(c.functions.renounceRole(role, world.admin.address))
        world.outsider.send(c.functions.renounceRole(role, world.outsider.address))
        assert not c.functions.hasRole(role, world.outsider.address).call()

    def test_supports_access_control_interface(self, world: World, contract: str) -> None:
        fns = getattr(world.c, contract).functions
        assert fns.supportsInterface(bytes.fromhex("7965db0b")).call()  # IAccessControl
        assert fns.supportsInterface(bytes.fromhex("01ffc9a7")).call()  # IERC165
        assert not fns.supportsInterface(bytes.fromhex("ffffffff")).call()


class TestDeployment:
    """What `deploy_contracts` wires, and the address book it produces."""

    def test_links_and_roles_are_wired(self, world: World) -> None:
        book = world.c.book
        assert world.c.stake.functions.computeRegistry().call() == book.compute_registry
        assert world.c.registry.functions.stakeManager().call() == book.stake_manager
        assert world.c.pool.functions.stakeManager().call() == book.stake_manager
        assert world.c.pool.functions.registry().call() == book.compute_registry
        token = world.c.token
        assert token.functions.hasRole(world.c.role(token, "MINTER_ROLE"), world.admin.address).call()
        for contract in (world.c.token, world.c.stake, world.c.registry, world.c.pool):
            assert contract.functions.hasRole(b"\x00" * 32, book.deployer).call()
        assert book.deployer == world.admin.address
        assert 0 < book.deploy_block <= world.c.w3.eth.block_number

    def test_address_book_round_trips_through_json(self, world: World, tmp_path: Path) -> None:
        book = world.c.book
        path = write_address_book(book, tmp_path)
        assert path == tmp_path / f"{book.chain_id}.json"
        assert json.loads(path.read_text())["contracts"] == book.addresses
        assert load_address_book(book.chain_id, tmp_path) == book

    def test_missing_or_foreign_address_book_is_a_config_error(self, world: World, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="no deployment for chain 5"):
            load_address_book(5, tmp_path)
        path = write_address_book(world.c.book, tmp_path)
        path.rename(tmp_path / "5.json")
        with pytest.raises(ConfigError, match="describes chain"):
            load_address_book(5, tmp_path)
        (tmp_path / "6.json").write_text("{}")
        with pytest.raises(ConfigError, match="malformed address book"):
            load_address_book(6, tmp_path)
