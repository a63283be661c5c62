"""The devnet's cast and the on-chain steps that set a market up: a funded, started pool and
providers with staked, registered nodes. Used by the chain-loop demo, the full devnet stack
and the tests, so every one of them sets the market up the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from eth_account.signers.local import LocalAccount

from proofpool.core.spec import NO_SPEC
from proofpool.infra.chain.anvil import advance_time, anvil_account
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import grant_validator
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN

DEVNET_MODEL_URI = "devnet://tiny-llama/arithmetic-add-100"
PROVIDER_STAKE = 200 * TOKEN
"""What every devnet provider stakes (chain loop, full devnet, tests, benchmarks)."""
NODE_COMPUTE_UNITS = 4
"""Compute units each devnet node is registered with."""
NODE_GAS_MONEY = 10**18
"""Wei a devnet provider sends its node for `submitWork` gas (1 ETH)."""
PROVIDER_NAMES = ("alice", "bob", "carol", "dave")
"""The devnet's providers, each with one node (`<name>_node`), in the order runs take them."""
VALIDATOR_NAMES = ("validator", "validator2")


@dataclass
class Cast:
    """The devnet's actors, all anvil's well-known test accounts (see `anvil_account`)."""

    admin: LocalAccount = field(default_factory=partial(anvil_account, 0))
    manager: LocalAccount = field(default_factory=partial(anvil_account, 1))
    treasury: LocalAccount = field(default_factory=partial(anvil_account, 2))
    validator: LocalAccount = field(default_factory=partial(anvil_account, 3))
    alice: LocalAccount = field(default_factory=partial(anvil_account, 4))
    bob: LocalAccount = field(default_factory=partial(anvil_account, 5))
    alice_node: LocalAccount = field(default_factory=partial(anvil_account, 6))
    bob_node: LocalAccount = field(default_factory=partial(anvil_account, 7))
    validator2: LocalAccount = field(default_factory=partial(anvil_account, 8))
    carol: LocalAccount = field(default_factory=partial(anvil_account, 9))
    dave: LocalAccount = field(default_factory=partial(anvil_account, 10))
    carol_node: LocalAccount = field(default_factory=partial(anvil_account, 11))
    dave_node: LocalAccount = field(default_factory=partial(anvil_account, 12))

    def names(self) -> dict[str, str]:
        return {getattr(self, n).address: n for n in self.__dataclass_fields__}

    def providers(self) -> list[tuple[str, LocalAccount, LocalAccount]]:
        """(name, provider, node) of the four devnet providers, each with one node."""
        return [(name, getattr(self, name), getattr(self, f"{name}_node")) for name in PROVIDER_NAMES]

    def validators(self) -> list[tuple[str, LocalAccount]]:
        return [(name, getattr(self, name)) for name in VALIDATOR_NAMES]


def devnet_pool_params(cast: Cast, dispute_window: int = 3600) -> PoolParams:
    """The devnet pool: the tiny arithmetic model (no pool spec), 0.01 POOL per work unit, 0.5 POOL per verdict."""
    return PoolParams(
        manager=cast.manager.address,
        treasury=cast.treasury.address,
        model_uri=DEVNET_MODEL_URI,
        spec_sha256=NO_SPEC,
        reward_per_unit=TOKEN // 100,
        validator_fee=TOKEN // 2,
        slash_amount=50 * TOKEN,
        dispute_window=dispute_window,
        validator_slash_share_bps=5_000,
    )


def open_market(admin: ChainClient, cast: Cast, params: PoolParams, budget: int = 1_000 * TOKEN) -> int:
    """Mint POOL to the creator and both providers, make `cast.validator` a validator, and create,
    fund and start a pool; returns its id. `admin` sends as `cast.admin`."""
    for who in (cast.admin, cast.alice, cast.bob):
        admin.token.mint(who.address, 10_000 * TOKEN)
    grant_validator(admin.w3, TxSender(admin.w3, cast.admin), admin.book, cast.validator.address)
    pool_id, _ = admin.pool.create_pool(params)
    admin.token.approve(admin.pool.address, budget)
    admin.pool.fund_pool(pool_id, budget)
    admin.pool.start_pool(pool_id)
    return pool_id


def onboard_node(
    admin: ChainClient,
    provider: LocalAccount,
    node: LocalAccount,
    stake: int,
    compute_units: int,
    specs: bytes = b"cpu-2-cores",
    *,
    pools: Sequence[int] = (),
) -> ChainClient:
    """Register `provider`, stake `stake`, add `node` (signed by the node key), approve each of `pools`
    with the whole stake as the most it may slash, and give the node gas money if it has none;
    returns a client sending as the provider."""
    me = admin.as_account(provider)
    me.registry.register_provider()
    me.token.approve(me.stake_manager.address, stake)
    me.stake_manager.stake(stake)
    me.registry.add_node(
        compute_units, hashlib.sha256(specs).digest(), me.registry.prove_ownership(node, provider.address)
    )
    for pool_id in pools:
        me.pool.approve_pool(pool_id, stake)
    if admin.w3.eth.get_balance(node.address) == 0:
        TxSender(admin.w3, provider).transfer_eth(node.address, NODE_GAS_MONEY)
    return me


def time_travel(admin: ChainClient, seconds: int) -> None:
    """Move anvil's clock forward and mine a block (to close a dispute window on the devnet)."""
    advance_time(admin.w3, seconds)
