"""`proofpool provider`: what a compute provider does on-chain."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import typer

from proofpool.chain.accounts import load_account
from proofpool.chain.signing import Invite, sign_node_ownership
from proofpool.chain.units import format_pool, parse_pool
from proofpool.cli.common import (
    JsonOption,
    KeyOption,
    RpcOption,
    console,
    print_json,
    reader_client,
    report_tx,
    signer_client,
)
from proofpool.errors import ProofpoolError

app = typer.Typer(no_args_is_help=True)


@app.command()
def register(key: KeyOption = None, rpc_url: RpcOption = None) -> None:
    """Register the key's address as a compute provider."""
    client = signer_client(key, rpc_url)
    report_tx(client, f"registered provider {client.address}", client.registry.register_provider())


@app.command()
def stake(
    amount: str = typer.Argument(..., help="POOL tokens, e.g. 250.5"),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Stake tokens so your nodes may join pools (approves the StakeManager first if needed)."""
    client = signer_client(key, rpc_url)
    units = parse_pool(amount)
    approval = client.token.ensure_allowance(client.stake_manager.address, units)
    if approval is not None:
        report_tx(client, "approved the StakeManager", approval)
    report_tx(client, f"staked {amount} POOL", client.stake_manager.stake(units))


@app.command()
def unbond(
    amount: str = typer.Argument(..., help="POOL tokens to move from active stake to unbonding."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Start unbonding stake: withdrawable after the unbonding period, slashable until then."""
    client = signer_client(key, rpc_url)
    receipt = client.stake_manager.unbond(parse_pool(amount))
    _, matures_at = client.stake_manager.unbonding(client.address)
    report_tx(client, f"unbonding {amount} POOL, withdrawable from unix time {matures_at}", receipt)


@app.command()
def withdraw(key: KeyOption = None, rpc_url: RpcOption = None) -> None:
    """Withdraw matured unbonded stake."""
    client = signer_client(key, rpc_url)
    report_tx(client, "withdrew unbonded stake", client.stake_manager.withdraw())


@app.command("sign-node")
def sign_node(
    node_key: str = typer.Option(..., help="The NODE's key (hex, key file or env:NAME); run this on the node."),
    provider: str = typer.Option(..., help="Address of the provider that will add the node."),
    rpc_url: RpcOption = None,
) -> None:
    """On the node machine: sign that this node belongs to PROVIDER (bound to this chain and registry)."""
    client = reader_client(rpc_url)
    node = load_account(node_key)
    signature = sign_node_ownership(node, provider, client.chain_id, client.registry.address)
    print_json({"node": node.address, "provider": provider, "signature": signature})


@app.command("add-node")
def add_node(
    node: str = typer.Option(None, help="Node address (with --signature from `provider sign-node`)."),
    signature: str = typer.Option(None, help="The node's ownership signature (0x-hex)."),
    node_key: str = typer.Option(None, help="Or: the node's key, to sign here (devnet convenience)."),
    compute_units: int = typer.Option(1, min=1, help="Compute units the node offers."),
    specs: str = typer.Option("", help="Hardware description; its sha256 is stored on-chain."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Add a node; required stake grows with your total compute units."""
    client = signer_client(key, rpc_url)
    if node_key:
        node_account = load_account(node_key)
        node = node_account.address
        proof = sign_node_ownership(node_account, client.address, client.chain_id, client.registry.address)
    elif node and signature:
        proof = bytes.fromhex(signature.removeprefix("0x"))
    else:
        raise ProofpoolError("give --node-key, or --node and --signature")
    specs_hash = hashlib.sha256(specs.encode()).digest()
    receipt = client.registry.add_node(node, compute_units, specs_hash, proof)
    report_tx(client, f"added node {node} ({compute_units} compute units)", receipt)


@app.command()
def join(
    invite_file: Path = typer.Argument(..., help="Invite JSON written by `pool invite`."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Join a pool with an invite signed by its manager (single use, expiring)."""
    try:
        data = json.loads(invite_file.read_text())
        invite = Invite(
            pool_id=int(data["pool_id"]),
            node=data["node"],
            nonce=int(data["nonce"]),
            expiry=int(data["expiry"]),
            signature=bytes.fromhex(data["signature"].removeprefix("0x")),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProofpoolError(f"{invite_file} is not an invite file: {exc}") from exc
    client = signer_client(key, rpc_url)
    report_tx(client, f"node {invite.node} joined pool {invite.pool_id}", client.pool.join_pool(invite))


@app.command()
def status(
    address: str = typer.Argument(None, help="Provider address (default: the --key's address)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stake, unbonding, required stake, compute units and credited rewards of a provider."""
    client = reader_client(rpc_url)
    address = address or load_account(key).address
    unbonding, matures_at = client.stake_manager.unbonding(address)
    data = {
        "provider": address,
        "registered": client.registry.is_provider(address),
        "active_stake": client.stake_manager.active_stake(address),
        "unbonding": unbonding,
        "unbonding_matures_at": matures_at,
        "required_stake": client.stake_manager.required_stake(address),
        "compute_units": client.registry.provider_compute_units(address),
        "credited_rewards": client.pool.reward_balance(address),
        "wallet": client.token.balance_of(address),
    }
    if as_json:
        print_json(data)
        return
    for name, value in data.items():
        shown = format_pool(value) + " POOL" if name in POOL_FIELDS else value
        console.print(f"{name:22} {shown}")


POOL_FIELDS = {"active_stake", "unbonding", "required_stake", "credited_rewards", "wallet"}
