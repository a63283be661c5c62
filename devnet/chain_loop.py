"""The chain half of the market loop on a throw-away anvil: deploy, create and fund a pool,
register and stake two providers, add and join their nodes, submit work from both,
invalidate one submission, finalize the other after the dispute window, withdraw.

It is the demo of the contracts, and a smoke test of the chain client: it checks the
outcome it prints and fails loudly when the chain disagrees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from proofpool.devnet.market import (
    NODE_COMPUTE_UNITS,
    PROVIDER_STAKE,
    Cast,
    devnet_pool_params,
    onboard_node,
    open_market,
    time_travel,
)
from rich.console import Console
from rich.table import Table

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.anvil import start_anvil
from proofpool.infra.chain.bindings import NO_EVIDENCE, MemberState, WorkStatus, reason_text
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts, write_address_book
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN, format_pool
from proofpool.infra.config import get_settings

DISPUTE_WINDOW = 3600


@dataclass(frozen=True)
class ChainLoopResult:
    """What the loop produced, for the caller (CLI table, tests)."""

    client: ChainClient
    pool_id: int
    honest_key: bytes
    cheating_key: bytes
    events: list[ChainEvent]


def run_chain_loop(client: ChainClient, cast: Cast, say: Callable[[str], None]) -> ChainLoopResult:
    """Drive every step of the loop's chain half; `client` sends as `cast.admin`."""
    admin = client
    validator, manager = admin.as_account(cast.validator), admin.as_account(cast.manager)

    say("mint 10,000 POOL to the pool creator and both providers; grant the validator role")
    say("create, fund (1,000 POOL) and start a pool")
    pool_id = open_market(admin, cast, devnet_pool_params(cast, DISPUTE_WINDOW))

    nodes = {}
    for provider, node in ((cast.alice, cast.alice_node), (cast.bob, cast.bob_node)):
        name = cast.names()[provider.address]
        say(f"{name}: register, stake 200 POOL, add a node with {NODE_COMPUTE_UNITS} compute units, join the pool")
        me = onboard_node(admin, provider, node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(pool_id,))
        expiry = admin.w3.eth.get_block("latest")["timestamp"] + 600
        invite = sign_invite(cast.manager, pool_id, node.address, 1, expiry, me.chain_id, me.pool.address)
        me.pool.join_pool(invite)
        nodes[name] = admin.as_account(node)

    say("both nodes submit work, signed by their own node keys")
    honest_key = hashlib.sha256(b"alice rollouts, step 0").digest()
    cheating_key = hashlib.sha256(b"bob rollouts, step 0").digest()
    nodes["alice"].pool.submit_work(pool_id, cast.alice_node.address, honest_key, 512, 0)
    nodes["bob"].pool.submit_work(pool_id, cast.bob_node.address, cheating_key, 480, 0)

    say("the validator accepts alice's file and invalidates bob's (slash, eject, split)")
    validator.pool.attest_work(pool_id, [honest_key], NO_EVIDENCE)
    validator.pool.invalidate_work(pool_id, cheating_key, "sampling_mismatch", NO_EVIDENCE)

    try:
        admin.pool.finalize_work(pool_id, [honest_key])
        raise ProofpoolError("finalize inside the dispute window was accepted")
    except ContractRevert as revert:
        say(f"finalize inside the dispute window refused: {revert.name}")
    time_travel(admin, DISPUTE_WINDOW + 1)
    say("one hour later (anvil time travel): finalize alice's work, withdraw rewards and fees")
    admin.pool.finalize_work(pool_id, [honest_key])
    admin.as_account(cast.alice).pool.withdraw_rewards()
    validator.pool.withdraw_rewards()
    manager.pool.publish_checkpoint(pool_id, 1, hashlib.sha256(b"manifest v1").digest(), "s3://devnet/ckpt/1")

    logs = admin.w3.eth.get_logs(
        {
            "fromBlock": admin.book.deploy_block,
            "toBlock": "latest",
            "address": list(admin.book.addresses.values()),
        }
    )
    result = ChainLoopResult(admin, pool_id, honest_key, cheating_key, admin.decoder().decode_logs(logs))
    check_outcome(result, cast)
    return result


def check_outcome(result: ChainLoopResult, cast: Cast) -> None:
    """Fail unless the chain shows exactly the intended outcome."""
    pool, stake = result.client.pool, result.client.stake_manager
    problems = []
    if pool.get_work(result.pool_id, result.honest_key).status is not WorkStatus.FINALIZED:
        problems.append("alice's work is not finalized")
    if pool.get_work(result.pool_id, result.cheating_key).status is not WorkStatus.INVALID:
        problems.append("bob's work is not invalid")
    if pool.get_member(result.pool_id, cast.bob_node.address).state is not MemberState.SLASHED:
        problems.append("bob's node was not ejected as slashed")
    if pool.get_member(result.pool_id, cast.alice_node.address).state is not MemberState.ACTIVE:
        problems.append("alice's node is no longer active")
    if stake.active_stake(cast.bob.address) != PROVIDER_STAKE - 50 * TOKEN:
        problems.append("bob's stake was not slashed by 50 POOL")
    if problems:
        raise ProofpoolError("devnet chain loop ended wrong: " + "; ".join(problems))


def balances_table(result: ChainLoopResult, cast: Cast) -> Table:
    """POOL balances, stakes and credited rewards per actor."""
    client = result.client
    table = Table(title="balances after the loop (POOL)")
    for column in ("actor", "address", "wallet", "active stake", "unbonding", "credited rewards"):
        table.add_column(column, justify="left" if column in ("actor", "address") else "right")
    for name in ("admin", "treasury", "validator", "alice", "bob"):
        address = getattr(cast, name).address
        unbonding, _ = client.stake_manager.unbonding(address)
        table.add_row(
            name,
            address[:10] + "…",
            format_pool(client.token.balance_of(address)),
            format_pool(client.stake_manager.active_stake(address)),
            format_pool(unbonding),
            format_pool(client.pool.reward_balance(address)),
        )
    table.add_row(
        "pool budget",
        f"pool {result.pool_id}",
        format_pool(client.pool.get_pool(result.pool_id).budget),
        "",
        "",
        "",
    )
    return table


def _summary(event: ChainEvent, names: dict[str, str]) -> str:
    parts = []
    for key, value in event.args.items():
        if isinstance(value, str) and value in names:
            value = names[value]
        elif isinstance(value, bytes):
            value = reason_text(value) if key == "reason" else "0x" + value.hex()[:8] + "…"
        elif isinstance(value, int) and value >= TOKEN // 1000 and key not in ("poolId", "version"):
            value = format_pool(value)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def events_table(result: ChainLoopResult, cast: Cast) -> Table:
    """Every event the deployment emitted, as the indexer will see them."""
    names = cast.names()
    names.update({address: name for name, address in result.client.book.addresses.items()})
    table = Table(title=f"{len(result.events)} events from eth_getLogs")
    for column in ("block", "contract", "event", "arguments", "tx"):
        table.add_column(column, overflow="fold")
    for event in result.events:
        table.add_row(
            str(event.block_number),
            event.contract,
            event.name,
            _summary(event, names),
            "0x" + event.tx_hash.hex()[:10],
        )
    return table


def main(console: Console, rpc_url: str | None = None) -> ChainLoopResult:
    """Run the loop on `rpc_url`, or on a fresh anvil that is stopped afterwards."""
    cast = Cast()
    settings = get_settings()
    anvil = None
    if rpc_url is None:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        anvil = start_anvil(log_path=settings.state_dir / "anvil-demo.log")
        rpc_url = anvil.url
        console.print(f"[bold]anvil[/bold] started at {rpc_url}")
    try:
        w3 = connect(rpc_url)
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        # a throw-away chain's address book stays with the throw-away state
        path = write_address_book(book, settings.state_dir / "deployments" if anvil else settings.deployments_dir)
        console.print(f"[bold]contracts[/bold] deployed, address book {path}")
        client = ChainClient.build(w3, book, cast.admin)
        result = run_chain_loop(client, cast, lambda line: console.print(f"  • {line}"))
        console.print(balances_table(result, cast))
        console.print(events_table(result, cast))
        console.print("[green]chain loop ok[/green]: cheater slashed and ejected, honest work paid")
        return result
    finally:
        if anvil is not None:
            anvil.stop()
