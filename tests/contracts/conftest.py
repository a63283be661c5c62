"""Contract test fixtures: compile if needed, deploy once on the session's anvil, build one
shared world (providers staked with nodes, a funded active pool with two member nodes),
and restore it from an `evm_snapshot` around every test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from eth_account import Account
from web3 import Web3

from proofpool.infra.chain.anvil import ANVIL_KEYS, AnvilProcess
from proofpool.infra.chain.artifacts import Artifact, load_artifact
from proofpool.infra.chain.compile import build_is_stale, compile_contracts, compile_sources
from proofpool.infra.chain.deploy import TOKEN, DeployParams, deploy_contracts, grant_role
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from tests.contracts.helpers import Actor, Chain, Deployment

UNBONDING_PERIOD = 7 * 24 * 3600
MIN_STAKE = 100 * TOKEN
STAKE_PER_UNIT = 10 * TOKEN
PROVIDER_STAKE = 1_000 * TOKEN
REWARD_PER_UNIT = TOKEN
VALIDATOR_FEE = 2 * TOKEN
SLASH_AMOUNT = 50 * TOKEN
DISPUTE_WINDOW = 3600
SLASH_SHARE_BPS = 2_000
BUDGET = 10_000 * TOKEN
MODEL_URI = "hf://proofpool/tiny-llama-arith"
NODE1_UNITS, NODE2_UNITS, NODE3_UNITS = 4, 2, 2
POOL_ID = 1


def _compile_mock(name: str, out_dir: Path) -> Artifact:
    """Compile a test-only contract from contracts/mocks/ (never part of `make contracts`)."""
    compile_sources([f"mocks/{name}.sol"], out_dir)
    stem = out_dir / f"mocks_{name}_sol_{name}"
    abi = json.loads(stem.with_suffix(".abi").read_text())
    return Artifact(name=name, abi=abi, bytecode="0x" + stem.with_suffix(".bin").read_text().strip())


@dataclass
class World:
    """Everything a contract test touches. Pool 1 is Active and funded; node1 (provider) and
    node2 (provider2) are members; node3 is registered to provider but not in the pool."""

    chain: Chain
    c: Deployment
    admin: Actor
    provider: Actor
    provider2: Actor
    validator: Actor
    validator2: Actor
    manager: Actor
    creator: Actor
    attester: Actor
    outsider: Actor
    node1: Actor
    node2: Actor
    node3: Actor
    spare_node: Actor
    treasury: Actor
    pool_id: int = POOL_ID

    def pool_params(self, **overrides: object) -> tuple:
        values = {
            "manager": self.manager.address,
            "treasury": self.treasury.address,
            "modelUri": MODEL_URI,
            "specSha256": bytes(32),
            "rewardPerUnit": REWARD_PER_UNIT,
            "validatorFee": VALIDATOR_FEE,
            "slashAmount": SLASH_AMOUNT,
            "disputeWindow": DISPUTE_WINDOW,
            "validatorSlashShareBps": SLASH_SHARE_BPS,
            "challengeWindow": 0,
            "contestQuorum": 1,
        } | overrides
        return tuple(values.values())


@pytest.fixture(scope="session")
def w3(anvil: AnvilProcess) -> Web3:
    if build_is_stale():
        compile_contracts()
    return connect(anvil.url)


def _actor(w3: Web3, name: str, key: str | bytes) -> Actor:
    account = Account.from_key(key)
    return Actor(name, account, TxSender(w3, account))


@pytest.fixture(scope="session")
def world(w3: Web3) -> World:
    named = ["admin", "provider", "provider2", "validator", "validator2", "manager", "creator", "attester"]
    actors = {name: _actor(w3, name, ANVIL_KEYS[i]) for i, name in enumerate(named)}
    actors["outsider"] = _actor(w3, "outsider", ANVIL_KEYS[8])
    for name in ("node1", "node2", "node3", "spare_node", "treasury"):
        actors[name] = _actor(w3, name, Web3.keccak(text=f"proofpool-test-{name}"))
        actors["admin"].sender.transfer_eth(actors[name].address, 100 * 10**18)

    admin = actors["admin"]
    params = DeployParams(
        unbonding_period=UNBONDING_PERIOD,
        min_stake=MIN_STAKE,
        stake_per_compute_unit=STAKE_PER_UNIT,
        min_validator_stake=0,  # the validator-stake rules have their own tests (test_validator_accountability)
        validator_slash_amount=0,
    )
    book = deploy_contracts(w3, admin.sender, params)
    grant_role(w3, admin.sender, book, "VALIDATOR_ROLE", actors["validator"].address)
    grant_role(w3, admin.sender, book, "VALIDATOR_ROLE", actors["validator2"].address)
    grant_role(w3, admin.sender, book, "ATTESTER_ROLE", actors["attester"].address)

    def contract(name: str) -> object:
        return w3.eth.contract(address=book.addresses[name], abi=load_artifact(name).abi)

    c = Deployment(w3, book, *(contract(n) for n in ("PoolToken", "StakeManager", "ComputeRegistry", "ComputePool")))
    world = World(chain=Chain(w3), c=c, **actors)

    for who in (world.provider, world.provider2, world.creator, world.outsider):
        c.fund(admin, who)
    holdings = [
        (world.provider, [(world.node1, NODE1_UNITS), (world.node3, NODE3_UNITS)]),
        (world.provider2, [(world.node2, NODE2_UNITS)]),
    ]
    for provider, nodes in holdings:
        provider.send(c.registry.functions.registerProvider())
        c.stake_tokens(provider, PROVIDER_STAKE)
        for node, units in nodes:
            c.add_node(provider, node, units)

    world.creator.send(c.pool.functions.createPool(world.pool_params()))
    world.creator.send(c.token.functions.approve(book.compute_pool, BUDGET))
    world.creator.send(c.pool.functions.fundPool(POOL_ID, BUDGET))
    world.creator.send(c.pool.functions.startPool(POOL_ID))
    for provider in (world.provider, world.provider2):
        provider.send(c.pool.functions.approvePool(POOL_ID, PROVIDER_STAKE))
    expiry = world.chain.timestamp() + 365 * 24 * 3600
    c.join(world.provider, world.manager, POOL_ID, world.node1, 1, expiry)
    c.join(world.provider2, world.manager, POOL_ID, world.node2, 2, expiry)
    return world


@pytest.fixture(scope="session")
def hostile_token_artifact(w3: Web3, tmp_path_factory: pytest.TempPathFactory) -> Artifact:
    """contracts/mocks/HostileToken.sol: re-enters or returns false on transfer."""
    return _compile_mock("HostileToken", tmp_path_factory.mktemp("mocks"))


@pytest.fixture(autouse=True)
def _isolate(world: World) -> Iterator[None]:
    """Each test starts from the session world and leaves no trace on the chain."""
    snapshot = world.chain.snapshot()
    yield
    world.chain.revert(snapshot)


@pytest.fixture
def c(world: World) -> Deployment:
    return world.c
